"""Share links in Chromium (docs/data.md "Share links", "Temporary chats"): the owner shares
a conversation with a tool call and a hostile answer, another user opens the read-only page
(the security suite's payloads inert there too), continues it in their own chat, the owner
revokes the link and it answers the 404 of a token that never existed; then a temporary chat
stays out of the owner's list, is marked in its header and offers no Share; the dialog's Copy
button and the Settings list's dates."""

from __future__ import annotations

import re
import secrets
from typing import Any

import pytest

from jxai_app.models import Conversation, ShareLink
from jxai_app.store.shares import share_hash
from tests.e2e.conftest import BrowserPage
from tests.e2e.steps import CONVERSATION_URL, ask_for_echo, conversation_id, send, wait_idle
from tests.e2e.test_xss import CHEAT_SHEET, assert_inert

pytestmark = pytest.mark.browser


def _share(owner: BrowserPage) -> str:
    page = owner.page
    page.get_by_test_id("share").click()
    page.get_by_test_id("share-create").click()
    link = page.get_by_test_id("share-link")
    link.wait_for()
    url = str(link.inner_text())
    assert page.get_by_test_id("share-create").is_disabled(), "a second press would make a second link"
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.get_by_test_id("share-copy").click()
    page.get_by_text("Link copied to the clipboard").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == url
    page.locator("#share-close").click()
    return url


def test_share_view_continue_revoke_and_a_temporary_chat(logged_in: Any, fake_llm: Any) -> None:
    fake, model = fake_llm
    owner = logged_in()
    send(owner, "What is 6 times 7? Use the calculator.")
    owner.page.get_by_text("The result is 42").wait_for()
    wait_idle(owner)
    send(owner, "[xss] summarise this web page")
    owner.page.get_by_text("still works").wait_for()
    wait_idle(owner)
    shared_id = conversation_id(owner)
    url = _share(owner)
    assert "/s/" in url and shared_id not in url
    # The snapshot also carries every cheat-sheet payload, as answers the page must draw inert.
    link = ShareLink.objects.get(token_hash=share_hash(url.rsplit("/s/", 1)[1]))
    payloads = [{"role": "assistant", "content": p.replace("LEAK", model.leak_url), "toolCalls": []}
                for p in CHEAT_SHEET]
    ShareLink.objects.filter(pk=link.pk).update(snapshot={**link.snapshot,
                                                          "messages": link.snapshot["messages"] + payloads})

    viewer = logged_in()
    page = viewer.page
    response = page.goto(url)
    assert response.status == 200
    assert response.headers["referrer-policy"] == "no-referrer" and response.headers["x-robots-tag"] == "noindex"
    card = page.get_by_test_id("tool-call").first
    assert '"result": 42' in card.get_by_test_id("tool-result").text_content()
    assert card.get_attribute("data-state") == "success"
    page.get_by_text("still works").wait_for()
    page.wait_for_timeout(300)                       # let any image or handler have its chance
    bodies = page.locator("#transcript .message-body")
    assert bodies.count() == 5 + len(CHEAT_SHEET)    # two questions, two calculator rounds, the xss answer
    for index in range(bodies.count()):
        assert_inert(viewer, bodies.nth(index), fake)
    assert page.get_by_test_id("composer").count() == 0
    assert not [u for u in viewer.requests if "/ws/" in u and u.startswith("ws")]
    # On a phone the header wraps: the title gets the row's width, the date line stays readable.
    page.set_viewport_size({"width": 390, "height": 844})
    head = page.locator(".share-head").bounding_box()
    title, meta = page.get_by_test_id("conversation-title").bounding_box(), page.locator(".share-meta").bounding_box()
    assert title["width"] >= head["width"] * 0.8 and meta["width"] >= head["width"] * 0.6, (head, title, meta)
    page.set_viewport_size({"width": 1280, "height": 820})

    page.get_by_test_id("share-continue").click()
    page.wait_for_url(CONVERSATION_URL)
    page.get_by_text("still works").wait_for()
    copy = Conversation.objects.get(pk=conversation_id(viewer))
    assert copy.owner_id != link.owner_id and copy.pk != link.conversation_id
    ask_for_echo(viewer, "carry on")                 # the copy is the viewer's own conversation

    owner.page.get_by_test_id("open-settings").click()
    # Dates as on the share page: day month year, 24-hour clock, no seconds.
    listed = str(owner.page.locator("[data-testid=share-item] .dialog-help").inner_text())
    assert re.search(r"shared \d{1,2} [A-Z][a-z]{2} \d{4}, \d{2}:\d{2} [^\d:]", listed), listed
    owner.page.get_by_test_id("share-revoke").click()
    owner.page.locator("#share-list-empty").wait_for()
    owner.page.keyboard.press("Escape")
    gone = page.goto(url)
    never = page.request.get(f"/s/{secrets.token_urlsafe(32)}")
    assert gone.status == never.status == 404 and gone.text() == never.text()

    owner.page.get_by_test_id("new-conversation").click()
    listed = owner.page.get_by_test_id("conversation-link").count()
    owner.page.get_by_test_id("temporary-chat").check()
    ask_for_echo(owner, "a temporary question")
    temporary = Conversation.objects.get(pk=conversation_id(owner))
    assert temporary.temporary and not Conversation.objects.get(pk=shared_id).temporary
    assert owner.page.get_by_test_id("conversation-link").count() == listed
    assert owner.page.get_by_test_id("temporary-chat").is_hidden()
    # The open temporary chat says so in its header, and offers no Share (the server refuses it too).
    owner.page.get_by_test_id("temporary-marker").wait_for()
    assert owner.page.get_by_test_id("share").is_hidden() and owner.page.get_by_test_id("rename").is_visible()
    owner.page.reload()
    owner.page.get_by_test_id("temporary-marker").wait_for()
    assert owner.page.get_by_test_id("share").is_hidden()
    # Console errors are expected here: the CSP reports the handlers it blocked in the hostile answers.
    assert owner.errors == [] and viewer.errors == []
