"""The chat page in a real browser against the real server (docs/architecture.md "The chat page").

Every test logs in through the login page, talks to daphne over a real websocket, and the
answers come from the loopback fake provider (see ``conftest.py`` and ``scripted_model.py``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from jxai_app.models import Conversation, Message
from tests.e2e.scripted_model import SLOW_WORDS
from tests.e2e.steps import (
    ask, ask_for_echo, assert_clean, assistant_text, conversation_id, login, reload, screenshot, send, slow_words,
    wait_connected, wait_idle,
)

pytestmark = pytest.mark.browser


def test_log_in_send_and_see_the_streamed_answer(open_page: Any, make_user: Any) -> None:
    user = make_user()
    tab = open_page()
    tab.page.goto("/")
    assert "/accounts/login/" in tab.page.url          # logged out: sent to the login page
    login(tab, user)
    page = tab.page
    assert page.get_by_test_id("composer").evaluate("el => el === document.activeElement")

    answer = ask(tab, "hi there", until="second point")
    page.get_by_test_id("message-user").filter(has_text="hi there").wait_for()
    wait_idle(tab)
    assert "Hello! You said: hi there" in assistant_text(tab)
    assert answer.locator(".message-body li").count() == 2        # Markdown rendered as a list

    cid = conversation_id(tab)                                     # the new conversation's address
    link = page.get_by_test_id("conversation-link").first
    assert link.get_attribute("href") == f"/c/{cid}"
    assert link.get_attribute("aria-current") == "page"
    assert "hi there" in link.inner_text()
    # 876 tokens of a 1,000-token window: the count and the 80 % warning show.
    assert page.get_by_test_id("tokens").inner_text() == "876 / 1,000 tokens"
    assert page.get_by_test_id("context-warning").is_visible()

    conversation = Conversation.objects.get(pk=cid)
    assert conversation.owner_id == user.pk and conversation.status == "idle"
    roles = list(Message.objects.filter(conversation=conversation).exclude(role="system")
                 .order_by("position").values_list("role", flat=True))
    assert roles == ["user", "assistant"]
    assert_clean(tab)


def test_a_tool_call_shows_as_a_card_then_the_answer(logged_in: Any) -> None:
    tab = logged_in()
    page = tab.page
    send(tab, "What is 6 times 7? Use the calculator.")
    card = page.get_by_test_id("tool-call").first
    card.wait_for()
    assert "calculate" in card.locator(".tool-name").inner_text()
    page.get_by_text("The result is 42").wait_for()
    wait_idle(tab)
    assert card.get_attribute("data-state") == "success"
    assert card.get_by_test_id("tool-status").inner_text() == "succeeded"
    assert '"expression": "6 * 7"' in card.locator(".tool-args-text").text_content()
    assert '"result": 42' in card.get_by_test_id("tool-result").text_content()
    # Round 1 (text + call) and round 2 (the answer) are two assistant messages, in order.
    messages = page.get_by_test_id("message-assistant")
    assert messages.count() == 2
    assert "Let me work that out." in assistant_text(tab, 0)
    assert "The result is 42 (from the calculator)." in assistant_text(tab, 1)
    # One Good / Bad per answer: on its last message, not on the round that called the tool.
    assert [m.get_by_test_id("feedback-up").is_visible() for m in messages.all()] == [False, True]
    # The arguments and result are folded; the card opens with the keyboard.
    assert not card.get_by_test_id("tool-result").is_visible()
    card.locator(".tool-result summary").focus()
    page.keyboard.press("Enter")
    assert card.get_by_test_id("tool-result").is_visible()
    page.evaluate("document.activeElement.blur()")
    screenshot(tab, "tool-card.png")
    # Reload: the saved card (result included) comes back from the database.
    reload(tab)
    saved = page.get_by_test_id("tool-call").first
    saved.get_by_test_id("tool-result").wait_for(state="attached")
    assert [m.get_by_test_id("feedback-up").is_visible() for m in messages.all()] == [False, True]
    assert saved.get_attribute("data-state") == "success"
    assert '"result": 42' in saved.get_by_test_id("tool-result").text_content()
    # A short window, read to the end: an answer whose block arrives taller than the "near the
    # end" margin is still followed (docs/architecture.md "The chat page").
    page.set_viewport_size({"width": 1280, "height": 420})
    page.get_by_test_id("transcript").evaluate("box => { box.scrollTop = box.scrollHeight; }")
    ask_for_echo(tab, "Say it back: " + "lorem ipsum " * 150)
    page.wait_for_function("""() => { const box = document.querySelector("[data-testid=transcript]");
        return box.scrollHeight - box.scrollTop - box.clientHeight < 2; }""", timeout=3_000)
    assert_clean(tab)


def test_stop_mid_stream_stops_the_answer_and_drops_it(logged_in: Any) -> None:
    tab = logged_in()
    page = tab.page
    answer = ask(tab, "[slow] tell me a long story", until="word12")
    assert page.get_by_test_id("stop").is_visible() and not page.get_by_test_id("send").is_visible()
    screenshot(tab, "mid-stream.png")
    page.get_by_test_id("stop").click()
    started = time.monotonic()
    wait_idle(tab, timeout=5_000)
    assert time.monotonic() - started < 3.0
    answer.get_by_text("partial answer was not saved").wait_for()
    question = page.get_by_test_id("message-user").filter(has_text="tell me a long story")
    assert not question.get_by_test_id("stopped-marker").is_visible()  # the answer's note says it once
    assert not answer.get_by_test_id("feedback-down").is_visible()  # nothing saved to rate
    assert answer.get_by_test_id("copy-message").is_visible()        # what was shown can be copied
    seen = slow_words(assistant_text(tab))
    assert seen == list(range(len(seen))) and 12 < len(seen) < SLOW_WORDS
    page.wait_for_timeout(600)                                       # nothing more arrives
    assert slow_words(assistant_text(tab)) == seen
    cid = conversation_id(tab)
    assert not Message.objects.filter(conversation_id=cid, role="assistant").exists()

    reload(tab)                                                      # the partial answer is gone
    page.get_by_test_id("message-user").filter(has_text="tell me a long story").wait_for()
    assert page.get_by_test_id("message-assistant").count() == 0
    assert question.get_by_test_id("stopped-marker").is_visible()  # after the reload, the question says it
    # Escape stops too, from the keyboard.
    ask(tab, "[slow] again", until="word3")
    page.get_by_test_id("composer").press("Escape")
    wait_idle(tab, timeout=5_000)
    assert_clean(tab)


def test_reload_and_the_list_bring_back_the_saved_conversation(logged_in: Any) -> None:
    tab = logged_in()
    page = tab.page
    ask_for_echo(tab, "first question")
    first = conversation_id(tab)
    page.get_by_test_id("new-conversation").click()
    assert page.url.endswith("/") and page.get_by_test_id("message-user").count() == 0
    ask_for_echo(tab, "second question")
    second = conversation_id(tab)
    assert first != second

    reload(tab)
    page.get_by_text("You said: second question").wait_for()
    links = page.get_by_test_id("conversation-link")
    assert [links.nth(i).get_attribute("href") for i in range(links.count())] == [f"/c/{second}", f"/c/{first}"]
    links.nth(1).click()                                             # most recent first; open the older
    page.wait_for_url(f"**/c/{first}")
    page.get_by_text("You said: first question").wait_for()
    assert page.get_by_test_id("message-user").count() == 1
    assert page.get_by_test_id("message-user").locator(".message-body").inner_text() == "first question"
    page.go_back()                                                   # history works too
    page.get_by_text("You said: second question").wait_for()
    assert_clean(tab)


def test_a_second_tab_sees_the_same_stream_and_can_stop_it(open_page: Any, logged_in: Any) -> None:
    first = logged_in()
    ask(first, "[slow] stream to two tabs", until="word5")
    cid = conversation_id(first)

    second = open_page(context=first.page.context)                  # same session, new tab
    second.page.goto(f"/c/{cid}")
    wait_connected(second)
    answer = second.page.get_by_test_id("message-assistant").first
    answer.get_by_text("word30").wait_for()                          # joined mid-turn, still live
    assert second.page.get_by_test_id("message-user").filter(has_text="stream to two tabs").count() == 1
    second.page.get_by_test_id("stop").click()                       # Stop from the other tab
    wait_idle(second, timeout=5_000)
    wait_idle(first, timeout=5_000)
    words_first = slow_words(assistant_text(first))
    words_second = slow_words(assistant_text(second))
    assert words_first == words_second == list(range(len(words_first)))   # no gap, no duplicate
    assert len(words_first) >= 30
    assert_clean(first, second)


def test_an_upstream_error_shows_a_banner_and_retry_recovers(logged_in: Any, fake_llm: Any) -> None:
    _, model = fake_llm
    tab = logged_in()
    page = tab.page
    text = f"[fail] please answer {time.monotonic()}"
    send(tab, text)
    banner = page.get_by_test_id("error")
    banner.wait_for()
    assert "overloaded" in banner.inner_text()
    retry = page.get_by_test_id("retry")
    assert retry.is_visible()
    wait_idle(tab)
    cid = conversation_id(tab)
    assert Conversation.objects.get(pk=cid).status == "error"

    reload(tab)                                                      # the failure is remembered
    banner.wait_for()
    assert retry.is_visible()

    model.heal(text)
    retry.click()
    page.get_by_text("Recovered: this time it worked.").wait_for()
    wait_idle(tab)
    assert banner.is_hidden()
    assert page.get_by_test_id("message-user").count() == 1
    assert page.get_by_test_id("message-assistant").count() == 1
    assert Conversation.objects.get(pk=cid).status == "idle"
    # A failure after some text: the partial answer stays, marked, with nothing to rate.
    send(tab, "[break] start, then fail")
    banner.wait_for()
    wait_idle(tab)
    failed = page.get_by_test_id("message-assistant").nth(1)
    assert "This answer failed and was not saved." in failed.inner_text()
    assert failed.get_by_test_id("copy-message").is_visible()
    assert not failed.get_by_test_id("feedback-up").is_visible() and not failed.get_by_test_id("feedback-down").is_visible()
    assert_clean(tab)


def test_keyboard_only(logged_in: Any) -> None:
    tab = logged_in()
    page = tab.page
    composer = page.get_by_test_id("composer")
    composer.press_sequentially("line one")
    composer.press("Shift+Enter")                                    # a new line, not a send
    composer.press_sequentially("line two")
    assert composer.input_value() == "line one\nline two"
    assert page.get_by_test_id("message-user").count() == 0
    composer.press("Enter")
    page.get_by_test_id("message-user").wait_for()
    assert page.get_by_test_id("message-user").locator(".message-body").inner_text() == "line one\nline two"
    wait_idle(tab)
    assert composer.input_value() == ""
    # Tab moves through real controls, and focus is visible.
    page.get_by_test_id("new-conversation").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.testid") == "search"   # the search box, then the list
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.dataset.testid")
    assert focused == "conversation-link"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")
    page.keyboard.press("Enter")                                     # opens the conversation
    page.wait_for_url("**/c/*")
    assert_clean(tab)


def test_model_picker_rename_and_delete(logged_in: Any, fake_llm: Any) -> None:
    fake, _ = fake_llm
    tab = logged_in()
    page = tab.page
    picker = page.get_by_test_id("model")
    assert [o.get_attribute("value") for o in picker.locator("option").all()] == ["fake-model", "fake-large"]
    assert picker.input_value() == "fake-model"
    picker.select_option("fake-large")
    ask_for_echo(tab, "which model is this?")
    asked = [r.json for r in fake.requests if r.json and r.json.get("messages", [{}])[-1].get("content")
             == "which model is this?"]
    assert [body["model"] for body in asked] == ["fake-large"]
    assert page.get_by_test_id("tokens").inner_text() == "876 / 128,000 tokens"
    assert page.get_by_test_id("context-warning").is_hidden()
    cid = conversation_id(tab)

    page.get_by_test_id("rename").click()
    title_input = page.get_by_test_id("rename-input")
    title_input.fill("Model check")
    title_input.press("Enter")
    page.get_by_test_id("conversation-title").filter(has_text="Model check").wait_for()
    page.get_by_test_id("conversation-link").filter(has_text="Model check").wait_for()
    assert Conversation.objects.get(pk=cid).title == "Model check"

    tab.accept_dialogs = True                                        # confirm() "Delete …?"
    page.get_by_test_id("delete").click()
    page.wait_for_url(lambda url: url.endswith("/"))
    page.get_by_test_id("conversation-link").filter(has_text="Model check").wait_for(state="detached")
    assert not Conversation.objects.filter(pk=cid).exists()
    assert page.request.get(f"/c/{cid}").status == 404
    assert_clean(tab)


def test_narrow_screen(logged_in: Any) -> None:
    tab = logged_in(viewport={"width": 390, "height": 760})
    page = tab.page
    ask_for_echo(tab, "small screen")
    link = page.get_by_test_id("conversation-link").first
    assert not link.is_visible()                                     # the list is folded away
    toggle = page.get_by_role("button", name="Conversations")
    assert toggle.get_attribute("aria-expanded") == "false"
    toggle.click()
    link.wait_for(state="visible")
    assert toggle.get_attribute("aria-expanded") == "true"
    for testid in ("composer", "send"):
        box = page.get_by_test_id(testid).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390                                              # no sideways scrolling
    page.keyboard.press("Escape")                                    # Escape folds it again
    link.wait_for(state="hidden")
    assert page.evaluate("document.activeElement.getAttribute('aria-controls')") == "sidebar"
    toggle.click()
    link.click()
    link.wait_for(state="hidden")                                    # picking one folds the list
    screenshot(tab, "narrow.png")
    assert_clean(tab)


def test_log_out(logged_in: Any) -> None:
    tab = logged_in()
    tab.page.get_by_test_id("logout").click()
    tab.page.wait_for_url("**/accounts/login/")
    tab.page.goto("/")
    assert "/accounts/login/" in tab.page.url
    assert_clean(tab)
