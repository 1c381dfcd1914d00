"""The page's everyday tools in a real browser (docs/architecture.md "The chat page"): Copy on messages and
code blocks, highlighted code, search, date groups, custom instructions, feedback seen in admin.

Headless Chromium against daphne and the loopback fake provider (``conftest.py``). Clipboard
permissions are granted to the test's browser context, so Copy really writes the clipboard and
the test reads it back. Screenshots of the highlighted code block and of search results go to
``docs/``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jxai_app.models import Conversation, Message, MessageFeedback
from jxai_app.store.instructions import INSTRUCTIONS_HEADING
from tests.e2e.conftest import PASSWORD, ROOT, BrowserPage
from tests.e2e.scripted_model import CODE_ANSWER, CODE_BLOCK
from tests.e2e.steps import assert_clean, conversation_id, login, reload, send, wait_idle
from tests.support.chain import messages_chain

pytestmark = pytest.mark.browser

DOCS = ROOT / "docs"


def _clipboard_tab(open_page: Any, app_server: Any) -> BrowserPage:
    context = open_page.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=app_server.url)
    return open_page(context=context)


def _clipboard(tab: BrowserPage) -> str:
    return str(tab.page.evaluate("navigator.clipboard.readText()"))


def test_copy_puts_messages_and_code_on_the_clipboard_and_code_is_highlighted(
        open_page: Any, app_server: Any, make_user: Any) -> None:
    tab = _clipboard_tab(open_page, app_server)
    login(tab, make_user())
    page = tab.page
    send(tab, "[code] show me a function")
    page.get_by_text("Call it with").wait_for()
    wait_idle(tab)

    answer = page.get_by_test_id("message-assistant").first
    code = answer.locator("pre > code")
    expect(code).to_have_class("language-python hljs")
    keyword = code.locator(".hljs-keyword").first
    assert keyword.inner_text() == "def"
    colours = code.evaluate("""c => [getComputedStyle(c.querySelector('.hljs-keyword')).color,
                                     getComputedStyle(c.querySelector('.hljs-string')).color, getComputedStyle(c).color]""")
    assert len(set(colours)) == 3, f"keywords, strings and plain code share a colour: {colours}"
    assert answer.locator(".code-language").inner_text() == "python"
    page.screenshot(path=str(DOCS / "screenshot-code.png"))

    answer.get_by_test_id("copy-code").click()
    expect(answer.get_by_test_id("copy-code")).to_have_text("Copied")
    assert _clipboard(tab) == CODE_BLOCK
    answer.get_by_test_id("copy-message").click()
    assert _clipboard(tab) == CODE_ANSWER                          # the Markdown the model wrote
    page.get_by_test_id("message-user").first.get_by_test_id("copy-message").click()
    assert _clipboard(tab) == "[code] show me a function"

    reload(tab)                                                    # saved: highlighted again
    expect(page.get_by_test_id("message-assistant").first.locator("pre > code .hljs-keyword").first).to_have_text("def")
    assert page.get_by_test_id("copy-code").count() == 1
    assert_clean(tab)


def _conversation(owner: Any, title: str, question: str, answer: str, days_ago: float) -> Conversation:
    conversation = Conversation.objects.create(owner=owner, model="fake-model", title=title)
    messages_chain(conversation, {"role": "user", "content": question},
                   {"role": "assistant", "content": answer, "model": "fake-model"})
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now() - timedelta(days=days_ago))
    return conversation


def test_search_finds_an_own_message_by_a_word_and_the_list_is_grouped_by_date(open_page: Any,
                                                                               make_user: Any) -> None:
    alice, bob = make_user("alice"), make_user("bob")
    _conversation(alice, "Sourdough starter", "How do I feed a starter?", "Twice a day, equal weights.", 0)
    trip = _conversation(alice, "Swiss trip", "Which trains go to Zermatt?",
                         "The **Glacier Express** runs from St. Moritz to Zermatt.", 1)
    _conversation(alice, "Tax forms", "Which form for freelancers?", "Form B, usually.", 4)
    _conversation(alice, "Old chat", "Anything about Zermatt?", "Zermatt is car-free.", 70)
    _conversation(bob, "Bob's glacier", "My glacier secret", "Glacier secrets stay with bob.", 0)

    tab = open_page(viewport={"width": 1280, "height": 720})
    login(tab, alice)
    page = tab.page
    groups = page.get_by_test_id("date-group")
    expect(groups).to_have_count(4)
    labels = groups.all_text_contents()
    assert labels[:3] == ["Today", "Yesterday", "Previous 7 days"]
    assert labels[3] == page.evaluate("""() => new Intl.DateTimeFormat(undefined, {month: 'long', year: 'numeric'})
                                         .format(new Date(Date.now() - 70 * 86400000))""")

    page.get_by_test_id("search").fill("glacier")
    results = page.get_by_test_id("search-result")
    expect(results).to_have_count(1)                               # bob's glacier is not hers
    assert "Swiss trip" in results.first.inner_text() and "Glacier Express" in results.first.inner_text()
    assert not page.get_by_test_id("conversation-link").first.is_visible()   # results take the list's place
    assert results.first.locator("mark").all_text_contents() == ["Glacier"]

    answer_id = Message.objects.get(conversation=trip, role="assistant").pk
    assert results.first.get_attribute("href") == f"/c/{trip.pk}#message-{answer_id}"
    results.first.click()
    page.wait_for_url(f"**/c/{trip.pk}#message-{answer_id}")
    found = page.locator(f".message.found[data-message-id='{answer_id}']")
    expect(found).to_be_visible()
    page.screenshot(path=str(DOCS / "screenshot-search.png"))
    reload(tab)                                                    # the address alone shows the message
    expect(page.locator(f".message.found[data-message-id='{answer_id}']")).to_be_visible()

    page.get_by_test_id("search").fill("zermatt")
    expect(results).to_have_count(4)                               # two questions, two answers, all hers
    page.get_by_test_id("search").press("Escape")
    expect(results).to_have_count(0)
    expect(page.get_by_test_id("conversation-link")).to_have_count(4)
    assert_clean(tab)


def test_custom_instructions_are_saved_in_the_dialog_and_reach_the_model(logged_in: Any, fake_llm: Any) -> None:
    fake, _ = fake_llm
    tab = logged_in()
    page = tab.page
    page.get_by_test_id("open-settings").click()
    box = page.get_by_test_id("custom-instructions")
    expect(box).to_be_enabled()
    box.fill("Call me Captain. Answer in one line.")
    page.get_by_test_id("settings-save").click()
    expect(page.locator("#settings-dialog")).not_to_be_visible()
    expect(page.get_by_test_id("settings-saved")).to_be_visible()                # the save is confirmed

    send(tab, "instructions check")
    page.get_by_text("You said: instructions check").wait_for()
    wait_idle(tab)
    request = next(r for r in reversed(fake.requests)
                   if (r.json or {}).get("messages", [{}])[-1].get("content") == "instructions check")
    assert request.json["messages"][0]["content"].endswith(f"{INSTRUCTIONS_HEADING}\nCall me Captain. Answer in one line.")

    reload(tab)                                                    # the dialog reads what was saved
    page.get_by_test_id("open-settings").click()
    expect(page.get_by_test_id("custom-instructions")).to_have_value("Call me Captain. Answer in one line.")
    assert page.get_by_test_id("custom-instructions").get_attribute("maxlength") == "4000"
    expect(page.get_by_test_id("settings-saved")).to_be_hidden()
    assert_clean(tab)


BACKGROUND = "getComputedStyle(document.body).backgroundColor"


def test_the_theme_follows_the_system_unless_picked_and_the_pick_is_kept(logged_in: Any) -> None:
    tab = logged_in()
    page = tab.page
    page.emulate_media(color_scheme="light")
    light = page.evaluate(BACKGROUND)
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate(BACKGROUND)
    assert light != dark                                           # "System theme" follows the system
    page.get_by_test_id("theme").select_option("light")
    assert page.evaluate(BACKGROUND) == light
    reload(tab)                                                    # the pick is kept in this browser
    expect(page.get_by_test_id("theme")).to_have_value("light")
    assert page.evaluate(BACKGROUND) == light
    assert page.locator("link[data-scheme=light]").get_attribute("media") == "all"  # the code style follows
    page.emulate_media(color_scheme="light")
    page.get_by_test_id("theme").select_option("dark")
    assert page.evaluate(BACKGROUND) == dark
    page.get_by_test_id("theme").select_option("system")
    assert page.evaluate(BACKGROUND) == light
    assert_clean(tab)


def test_a_thumbs_down_with_a_comment_is_visible_in_admin(open_page: Any, make_user: Any,
                                                          django_user_model: Any) -> None:
    tab = open_page()
    login(tab, make_user())
    page = tab.page
    send(tab, "rate me")
    page.get_by_text("You said: rate me").wait_for()
    wait_idle(tab)
    cid = conversation_id(tab)
    answer = page.get_by_test_id("message-assistant").first
    answer.get_by_test_id("feedback-down").click()
    answer.get_by_test_id("feedback-comment").fill("The list is not what I asked for.")
    answer.get_by_test_id("feedback-send").click()
    expect(answer.get_by_test_id("feedback-comment")).not_to_be_visible()
    expect(answer).to_have_attribute("data-feedback-comment", "The list is not what I asked for.")
    expect(answer.get_by_test_id("feedback-saved")).to_have_text("Feedback saved.")   # the server's answer
    reload(tab)                                                    # saved on the server
    expect(page.get_by_test_id("message-assistant").first.get_by_test_id("feedback-down")).to_have_attribute(
        "aria-pressed", "true")
    assert MessageFeedback.objects.get().comment == "The list is not what I asked for."

    django_user_model.objects.create_superuser("reviewer", "r@example.com", PASSWORD)
    staff = open_page()
    changelist = "/admin/jxai_app/conversation/?feedback=down"
    staff.page.goto(f"/admin/login/?next={changelist}")
    staff.page.fill("#id_username", "reviewer")
    staff.page.fill("#id_password", PASSWORD)
    staff.page.click("input[type=submit]")
    staff.page.wait_for_url(f"**{changelist}")
    row = staff.page.locator("#result_list tbody tr")
    expect(row).to_have_count(1)
    assert row.locator("td.field-feedback_summary").inner_text() == "1 down"
    staff.page.goto("/admin/jxai_app/conversation/?feedback=up")
    expect(staff.page.locator("#result_list tbody tr")).to_have_count(0)
    staff.page.goto(f"/admin/jxai_app/conversation/{cid}/transcript/")
    feedback = staff.page.get_by_test_id("admin-feedback")
    expect(feedback).to_have_attribute("data-rating", "down")
    assert "thumbs down — The list is not what I asked for." in feedback.inner_text()
    assert_clean(tab, staff)
