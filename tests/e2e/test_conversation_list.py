"""The conversation list's paging in a real browser (docs/websocket.md "Safety additions": `list`
with `before`, `next` only when another page follows; docs/architecture.md "The chat page").

The test server runs with ``JXAI_CONVERSATIONS_PAGE_SIZE`` = :data:`PAGE_SIZE` (see
``conftest.py``); each test gives its user ``PAGE_SIZE + 5`` conversations, two of them with the
same ``updated_at`` at the page boundary, so the server's tie-break (id) decides the cut.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jxai_app import store
from jxai_app.models import Conversation
from tests.e2e.conftest import PAGE_SIZE, BrowserPage
from tests.e2e.steps import assert_clean, conversation_id, login, screenshot, send, wait_idle

pytestmark = pytest.mark.browser

TOTAL = PAGE_SIZE + 5


def make_conversations(user: Any, count: int = TOTAL) -> list[str]:
    """``count`` conversations an hour old and older, one minute apart, except two at the
    page boundary that share a timestamp. Returns their ids in the server's order (most
    recently updated first, ties by id descending)."""
    rows = [store.conversation_create(user=user, model="fake-model", title=f"Chat {i:02d}") for i in range(count)]
    base = timezone.now() - timedelta(hours=1)
    for i, row in enumerate(rows):
        minutes = PAGE_SIZE - 1 if i == PAGE_SIZE else i
        Conversation.objects.filter(pk=row.pk).update(updated_at=base - timedelta(minutes=minutes))
    ordered = sorted(Conversation.objects.filter(owner=user), key=lambda c: (c.updated_at, c.pk.hex), reverse=True)
    return [str(c.pk) for c in ordered]


def listed(recorded: BrowserPage) -> list[str]:
    """The conversation ids in the sidebar, top to bottom."""
    links = recorded.page.get_by_test_id("conversation-link")
    return list(links.evaluate_all("links => links.map((link) => link.dataset.conversationId)"))


def test_load_more_appends_the_next_page_and_live_updates_keep_it(open_page: Any, make_user: Any) -> None:
    user = make_user()
    expected = make_conversations(user)
    tab = open_page()
    login(tab, user)
    page = tab.page
    links = page.get_by_test_id("conversation-link")
    load_more = page.get_by_test_id("load-more")
    load_more.wait_for(state="visible")                             # the socket's first page said `next`
    assert listed(tab) == expected[:PAGE_SIZE]
    screenshot(tab, "load-more.png")

    load_more.focus()                                               # from the keyboard
    page.keyboard.press("Enter")
    expect(links).to_have_count(TOTAL)
    assert listed(tab) == expected                                  # in order, no duplicates
    expect(load_more).to_be_hidden()                                # no page follows
    # The button went away under the keyboard: focus is on the first conversation it brought.
    assert page.evaluate("document.activeElement.dataset.conversationId") == expected[PAGE_SIZE]

    # A change to an appended conversation moves it to the top; the other pages stay.
    oldest = expected[-1]
    page.locator(f"a[data-conversation-id='{oldest}']").click()
    page.wait_for_url(f"**/c/{oldest}")
    page.get_by_test_id("rename").click()
    page.get_by_test_id("rename-input").fill("Revived")
    page.get_by_test_id("rename-input").press("Enter")
    expect(links.first).to_have_text("Revived")
    assert listed(tab) == [oldest, *expected[:-1]]

    # A deletion removes only that row.
    gone = expected[PAGE_SIZE + 1]
    page.locator(f"a[data-conversation-id='{gone}']").click()
    page.wait_for_url(f"**/c/{gone}")
    tab.accept_dialogs = True
    page.get_by_test_id("delete").click()
    page.wait_for_url(lambda url: url.endswith("/"))
    expect(links).to_have_count(TOTAL - 1)
    assert listed(tab) == [oldest, *[cid for cid in expected[:-1] if cid != gone]]

    # A new conversation goes on top of everything loaded.
    send(tab, "a brand new chat")
    page.get_by_text("You said: a brand new chat").wait_for()
    wait_idle(tab)
    created = conversation_id(tab)
    expect(links).to_have_count(TOTAL)
    assert listed(tab) == [created, oldest, *[cid for cid in expected[:-1] if cid != gone]]
    assert not Conversation.objects.filter(pk=gone).exists()
    assert_clean(tab)


def test_a_conversation_updated_elsewhere_before_its_page_loads_is_listed_once(
        open_page: Any, make_user: Any) -> None:
    user = make_user()
    expected = make_conversations(user)
    first = open_page()
    login(first, user)
    load_more = first.page.get_by_test_id("load-more")
    load_more.wait_for(state="visible")
    assert listed(first) == expected[:PAGE_SIZE]

    # Another tab renames a conversation of the second page, which the first tab has not loaded.
    second_page = expected[PAGE_SIZE + 2]
    other = open_page(context=first.page.context)
    other.page.goto(f"/c/{second_page}")
    other.page.locator("html[data-connection='open']").wait_for(state="attached")
    other.page.get_by_test_id("rename").click()
    other.page.get_by_test_id("rename-input").fill("Renamed elsewhere")
    other.page.get_by_test_id("rename-input").press("Enter")

    links = first.page.get_by_test_id("conversation-link")
    expect(links.first).to_have_text("Renamed elsewhere")          # the update reached the other tab
    assert listed(first) == [second_page, *expected[:PAGE_SIZE]]
    load_more.click()
    expect(links).to_have_count(TOTAL)
    assert listed(first) == [second_page, *[cid for cid in expected if cid != second_page]]
    expect(load_more).to_be_hidden()

    # A reload starts again from the first page, the renamed conversation on top.
    first.page.reload()
    load_more.wait_for(state="visible")
    assert listed(first) == [second_page, *expected[:PAGE_SIZE - 1]]
    assert_clean(first, other)
