"""Branches on the chat page in a real browser (docs/store.md "Branches", docs/websocket.md
"Branches"): edit a question, regenerate an answer, move between versions with ‹ n / m ›,
every tab following and a reload keeping the chosen branch; the trace a stopped answer
leaves. Answers come from the scripted fake provider (``scripted_model.py``)."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from jxai_app.models import Conversation, Message
from tests.e2e.conftest import ROOT
from tests.e2e.steps import (
    ask, ask_for_echo, assert_clean, conversation_id, reload, screenshot, wait_connected, wait_idle,
)

pytestmark = pytest.mark.browser


def _question(tab: Any, text: str) -> Any:
    return tab.page.get_by_test_id("message-user").filter(has_text=text)


def _shows(tab: Any, *answers: str, hidden: tuple[str, ...] = ()) -> None:
    for text in answers:
        tab.page.get_by_text(f"You said: {text}").wait_for()
    for text in hidden:
        tab.page.get_by_text(f"You said: {text}").wait_for(state="detached")


def test_edit_makes_a_branch_every_tab_follows_and_a_reload_keeps(open_page: Any, logged_in: Any) -> None:
    tab = logged_in()
    page = tab.page
    ask_for_echo(tab, "first question")
    ask_for_echo(tab, "second question")
    cid = conversation_id(tab)
    other = open_page(context=page.context)                        # a second tab of the same login
    other.page.goto(f"/c/{cid}")
    wait_connected(other)
    _shows(other, "first question", "second question")

    first = _question(tab, "first question")
    first.get_by_test_id("edit").click()
    editor = first.get_by_test_id("edit-input")
    assert editor.input_value() == "first question"
    editor.fill("edited question")
    first.get_by_test_id("edit-submit").click()
    _shows(tab, "edited question", hidden=("first question", "second question"))
    wait_idle(tab)
    edited = _question(tab, "edited question")
    assert edited.get_by_test_id("branch-position").inner_text() == "2 / 2"
    assert page.get_by_test_id("message-user").count() == 1        # the second question stays on its branch
    _shows(other, "edited question", hidden=("second question",))
    assert _question(other, "edited question").get_by_test_id("branch-position").inner_text() == "2 / 2"
    shot = screenshot(tab, "branches.png")
    if os.environ.get("JXAI_UPDATE_SCREENSHOT") == "1":            # refresh docs/screenshot-branches.png
        shutil.copyfile(shot, ROOT / "docs" / "screenshot-branches.png")

    edited.get_by_test_id("branch-prev").click()                   # back to the first version
    _shows(tab, "first question", "second question", hidden=("edited question",))
    assert _question(tab, "first question").get_by_test_id("branch-position").inner_text() == "1 / 2"
    _shows(other, "first question", "second question", hidden=("edited question",))
    reload(tab)
    _shows(tab, "first question", "second question", hidden=("edited question",))
    assert _question(tab, "first question").get_by_test_id("branch-position").inner_text() == "1 / 2"

    _question(tab, "first question").get_by_test_id("branch-next").click()
    _shows(tab, "edited question", hidden=("second question",))
    reload(tab)
    _shows(tab, "edited question", hidden=("first question", "second question"))
    assert _question(tab, "edited question").get_by_test_id("branch-position").inner_text() == "2 / 2"
    leaf = Conversation.objects.get(pk=cid).active_leaf
    assert leaf is not None and leaf.parent.content == "edited question"
    assert Message.objects.filter(conversation_id=cid, role="user").count() == 3  # nothing was lost

    edited = _question(tab, "edited question")                    # a refused edit keeps its text
    edited.get_by_test_id("edit").click()
    too_long = "x" * 32_001                                       # JXAI_MAX_MESSAGE_CHARS is 32,000
    edited.get_by_test_id("edit-input").fill(too_long)
    edited.get_by_test_id("edit-submit").click()
    page.get_by_test_id("error").filter(has_text="longer than").wait_for()
    assert edited.get_by_test_id("edit-input").input_value() == too_long
    edited.get_by_test_id("edit-input").press("Escape")
    edited.get_by_test_id("edit-input").wait_for(state="detached")
    assert Message.objects.filter(conversation_id=cid, role="user").count() == 3
    assert_clean(tab, other)


def test_a_search_result_on_another_branch_shows_that_branch(logged_in: Any) -> None:
    """Picking a search hit that is on a branch not shown switches to that branch and marks
    the message (it used to open the conversation on the branch shown, without the message)."""
    tab = logged_in()
    page = tab.page
    ask_for_echo(tab, "a question about glaciers")
    first = _question(tab, "a question about glaciers")
    first.get_by_test_id("edit").click()
    first.get_by_test_id("edit-input").fill("a question about deserts")
    first.get_by_test_id("edit-submit").click()
    _shows(tab, "a question about deserts", hidden=("a question about glaciers",))
    wait_idle(tab)
    cid = conversation_id(tab)
    hidden = Message.objects.get(conversation_id=cid, role="user", content="a question about glaciers")

    page.get_by_test_id("search").fill("glaciers")
    hit = page.locator(f"[data-testid=search-result][href$='#message-{hidden.pk}']")
    hit.click()
    page.locator(f".message.found[data-message-id='{hidden.pk}']").wait_for()
    page.get_by_test_id("search").press("Escape")                 # the results give the list its place back
    _shows(tab, "a question about glaciers", hidden=("a question about deserts",))
    assert _question(tab, "a question about glaciers").get_by_test_id("branch-position").inner_text() == "1 / 2"
    assert Conversation.objects.get(pk=cid).active_leaf.parent_id == hidden.pk  # the server switched too
    reload(tab)
    _shows(tab, "a question about glaciers", hidden=("a question about deserts",))
    assert_clean(tab)


def test_regenerate_with_another_model_is_a_second_version(logged_in: Any, fake_llm: Any) -> None:
    fake, _ = fake_llm
    tab = logged_in()
    page = tab.page
    ask_for_echo(tab, "say it twice")
    page.get_by_test_id("model").select_option("fake-large")
    page.get_by_test_id("message-assistant").first.get_by_test_id("regenerate").click()
    answer = page.get_by_test_id("message-assistant").first
    answer.get_by_test_id("branch-position").filter(has_text="2 / 2").wait_for()
    wait_idle(tab)
    assert page.get_by_test_id("message-assistant").count() == 1
    asked = [r.json["model"] for r in fake.requests
             if r.json and r.json.get("messages", [{}])[-1].get("content") == "say it twice"]
    assert asked == ["fake-model", "fake-large"]
    cid = conversation_id(tab)
    answers = list(Message.objects.filter(conversation_id=cid, role="assistant").order_by("position")
                   .values_list("model", "parent__content"))
    assert answers == [("fake-model", "say it twice"), ("fake-large", "say it twice")]

    answer.get_by_test_id("branch-prev").click()
    answer = page.get_by_test_id("message-assistant").first
    answer.get_by_test_id("branch-position").filter(has_text="1 / 2").wait_for()
    reload(tab)
    page.get_by_test_id("message-assistant").first.get_by_test_id("branch-position").filter(
        has_text="1 / 2").wait_for()
    assert_clean(tab)


def test_a_stopped_answer_leaves_a_marker_that_survives_a_reload(logged_in: Any) -> None:
    tab = logged_in()
    page = tab.page
    ask(tab, "[slow] a story to stop", until="word3")
    page.get_by_test_id("stop").click()
    wait_idle(tab, timeout=5_000)
    # Live, from the server: the marker is there, but while the partial answer shows its own
    # note, that note alone says nothing was saved (docs/architecture.md "The chat page").
    _question(tab, "a story to stop").get_by_test_id("stopped-marker").wait_for(state="attached")
    assert not _question(tab, "a story to stop").get_by_test_id("stopped-marker").is_visible()
    page.get_by_text("partial answer was not saved").wait_for()
    reload(tab)
    stopped = _question(tab, "a story to stop")
    marker = stopped.get_by_test_id("stopped-marker")
    marker.wait_for()
    assert marker.inner_text() == "Stopped — no answer was saved"
    assert page.get_by_test_id("message-assistant").count() == 0   # the partial answer was dropped

    ask_for_echo(tab, "the next question")
    reload(tab)
    _shows(tab, "the next question")
    assert _question(tab, "a story to stop").get_by_test_id("stopped-marker").is_visible()
    assert _question(tab, "the next question").get_by_test_id("stopped-marker").count() == 0
    assert page.get_by_test_id("stopped-marker").count() == 1
    assert_clean(tab)
