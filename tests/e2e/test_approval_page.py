"""The approval card in a real browser (docs/approval.md "The page"): the built-in ``save_note``
tool waits for the user's approval (its policy row, as migration 0004 makes it); the card
shows the call's name and arguments with Approve and Deny, survives a reload, and after
Approve the tool runs and the card is an ordinary tool card.
"""

from __future__ import annotations

from typing import Any

import pytest

from jxai_app.models import Conversation, Note, ToolPolicy
from tests.e2e.steps import assert_clean, reload, send, wait_idle

pytestmark = pytest.mark.browser


def _waiting_note(logged_in: Any, text: str) -> tuple[Any, Any]:
    """A logged-in tab that asked for a note (``save_note`` requires approval) and its card,
    once the card waits for the decision."""
    ToolPolicy.objects.update_or_create(tool_name="save_note", defaults={"requires_approval": "always"})
    tab = logged_in()
    send(tab, f"[note] {text}")
    card = tab.page.get_by_test_id("tool-call").first
    card.get_by_test_id("approval-card").wait_for()
    return tab, card


def test_approve_a_note_from_its_card_after_a_reload(logged_in: Any) -> None:
    tab, card = _waiting_note(logged_in, "Buy oat milk")
    page = tab.page
    assert card.get_attribute("data-state") == "approval"
    assert card.get_by_test_id("tool-status").inner_text() == "waiting for your approval"
    assert "save_note" in card.locator(".tool-name").inner_text()
    assert '"text": "Buy oat milk"' in card.locator(".tool-args-text").inner_text()  # unfolded, readable JSON
    assert not Note.objects.exists()  # nothing ran yet

    reload(tab)  # the pending card comes back from the snapshot
    card = page.get_by_test_id("tool-call").first
    card.get_by_test_id("approval-card").wait_for()
    assert card.get_attribute("data-state") == "approval"
    page.get_by_test_id("stop").wait_for()  # Stop would end the paused turn

    card.get_by_test_id("approve").click()
    card.get_by_test_id("approval-card").wait_for(state="detached")
    card.get_by_test_id("tool-result").wait_for(state="attached")
    page.get_by_text("The result is 42").wait_for()  # the model's next round (scripted)
    wait_idle(tab)
    assert card.get_attribute("data-state") == "success"
    assert card.get_by_test_id("tool-status").inner_text() == "succeeded"
    assert "Buy oat milk" in card.get_by_test_id("tool-result").text_content()
    [note] = Note.objects.all()
    [conversation] = Conversation.objects.all()
    assert (note.text, note.owner_id) == ("Buy oat milk", conversation.owner_id)  # the user's own notes
    assert_clean(tab)


def test_a_denied_call_says_denied_live_and_after_a_reload(logged_in: Any) -> None:
    tab, card = _waiting_note(logged_in, "Sell the car")
    page = tab.page
    card.get_by_test_id("approval-reason").fill("not now")
    card.get_by_test_id("deny").click()
    card.get_by_test_id("approval-card").wait_for(state="detached")
    wait_idle(tab)
    expect_denied = lambda: (card.get_attribute("data-state"), card.get_by_test_id("tool-status").inner_text())  # noqa: E731
    assert expect_denied() == ("denied", "denied")
    assert "The user denied this call: not now" in card.get_by_test_id("tool-result").text_content()
    reload(tab)
    card = page.get_by_test_id("tool-call").first
    card.get_by_test_id("tool-result").wait_for(state="attached")
    assert expect_denied() == ("denied", "denied")
    assert not Note.objects.exists()
    # Without a reload: Stop shows while the next call waits, and Esc in the composer stops it.
    send(tab, "[note] Wash the car")
    waiting = page.get_by_test_id("tool-call").nth(1)
    waiting.get_by_test_id("approval-card").wait_for()
    page.get_by_test_id("stop").wait_for()
    page.get_by_test_id("composer").press("Escape")
    waiting.get_by_test_id("approval-card").wait_for(state="detached")
    wait_idle(tab)
    assert "The user denied this call: the turn was stopped" in waiting.get_by_test_id("tool-result").text_content()
    assert not Note.objects.exists()
    assert_clean(tab)
