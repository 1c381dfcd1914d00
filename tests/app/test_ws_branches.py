"""Branches over the websocket protocol (docs/websocket.md "Branches"): ``edit``,
``regenerate`` and ``switch_branch`` reach every tab of the conversation as snapshots of the
new path, and are refused while a turn runs; through the real consumer, runner and database."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from jxai_app.models import Message
from tests.app.turns_support import DOWN_MODEL, MODEL, Tab, fake, hub, text_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)


def _contents(frame: dict[str, Any]) -> list[str]:
    return [m["content"] for m in frame["messages"]]


def _branch(frame: dict[str, Any], content: str) -> tuple[int, int]:
    message = next(m for m in frame["messages"] if m["content"] == content)
    return message["branch"]["index"] + 1, message["branch"]["count"]


async def _turn_done(*tabs: Tab) -> None:
    for tab in tabs:
        await tab.until_event("turn_end")
        await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] != "streaming")


async def _two_tabs_on_one_exchange(user: Any, fake: FakeProvider) -> tuple[Tab, Tab, str, dict[str, Any]]:
    """Two tabs following a conversation ``Q1 → A1``; returns them, its id and the first snapshot."""
    one, two = await Tab(user).open(), await Tab(user).open()
    fake.add(text_script(["A1"]))
    await one.send(type="send", conversationId=None, text="Q1")
    await _turn_done(one)
    cid = one.frames[0]["conversation"]["id"]
    await two.send(type="subscribe", conversationId=cid)
    snapshot = await two.until(lambda f: f["type"] == "snapshot")
    assert _contents(snapshot) == ["Q1", "A1"] and _branch(snapshot, "Q1") == (1, 1)
    return one, two, cid, snapshot


async def test_edit_switch_and_regenerate_reach_every_tab(user: Any, fake: FakeProvider, hub: Any) -> None:
    one, two, cid, first = await _two_tabs_on_one_exchange(user, fake)
    q1, a1 = (m["id"] for m in first["messages"])

    fake.add(text_script(["A1 ", "edited"]))
    await two.send(type="edit", conversationId=cid, messageId=q1, text="Q1 edited", model=None)
    for tab in (one, two):
        branch = await tab.until(lambda f: f["type"] == "snapshot" and f.get("turn") is not None)
        assert _contents(branch) == ["Q1 edited"] and _branch(branch, "Q1 edited") == (2, 2)
        assert branch["turn"]["lastSeq"] == 0 and branch["conversation"]["status"] == "streaming"
    await _turn_done(one, two)
    assert one.text(branch["turn"]["turnId"]) == two.text(branch["turn"]["turnId"]) == "A1 edited"
    assert fake.requests[-1].json["messages"][-1] == {"role": "user", "content": "Q1 edited"}
    assert len([m for m in fake.requests[-1].json["messages"] if m["role"] == "user"]) == 1

    await one.send(type="switch_branch", conversationId=cid, messageId=q1)
    for tab in (one, two):
        back = await tab.until(lambda f: f["type"] == "snapshot" and f["messages"][0]["id"] == q1)
        assert _contents(back) == ["Q1", "A1"] and _branch(back, "Q1") == (1, 2) and back["turn"] is None

    fake.add(text_script(["A1 ", "again"]))
    await one.send(type="regenerate", conversationId=cid, messageId=a1, model=MODEL)
    for tab in (one, two):
        again = await tab.until(lambda f: f["type"] == "snapshot" and f.get("turn") is not None)
        assert _contents(again) == ["Q1"]
    saved = await two.until(lambda f: f["type"] == "message_saved" and f["message"]["content"] == "A1 again")
    assert saved["message"]["branch"] == {"index": 1, "count": 2, "prev": a1, "next": None}
    assert saved["message"]["parentId"] == q1
    await _turn_done(one, two)
    await two.send(type="subscribe", conversationId=cid)
    final = await two.until(lambda f: f["type"] == "snapshot")
    assert _contents(final) == ["Q1", "A1 again"] and _branch(final, "A1 again") == (2, 2)
    assert await sync_to_async(Message.objects.filter(conversation_id=cid).count)() == 5, "every branch is kept"
    await one.close()
    await two.close()


async def test_branch_frames_are_refused_while_a_turn_runs(user: Any, fake: FakeProvider, hub: Any) -> None:
    one, two, cid, first = await _two_tabs_on_one_exchange(user, fake)
    q1, a1 = (m["id"] for m in first["messages"])
    fake.add(text_script([f"w{i} " for i in range(40)], delay=0.05))
    await one.send(type="send", conversationId=cid, text="Q2")
    await two.until_event("delta")
    for frame in ({"type": "edit", "messageId": q1, "text": "x"}, {"type": "regenerate", "messageId": a1},
                  {"type": "switch_branch", "messageId": q1}):
        await two.send(conversationId=cid, **frame)
        refusal = await two.until(lambda f: f["type"] == "error")
        assert (refusal["code"], refusal["request"]) == ("conflict", frame["type"])
    for bad in ("1", 0, True, None):
        await two.send(type="switch_branch", conversationId=cid, messageId=bad)
        refusal = await two.until(lambda f: f["type"] == "error")
        assert refusal["code"] == "invalid-request" and "messageId" in refusal["message"]
    await one.send(type="cancel", conversationId=cid)
    await _turn_done(one, two)
    await one.send(type="switch_branch", conversationId=cid, messageId=10**9)
    assert (await one.until(lambda f: f["type"] == "error"))["code"] == "not-found"
    await one.close()
    await two.close()


async def test_a_failed_regenerate_keeps_the_answer_and_retry_loses_nothing(user: Any, fake: FakeProvider,
                                                                          hub: Any) -> None:
    one, two, cid, first = await _two_tabs_on_one_exchange(user, fake)
    _, a1 = (m["id"] for m in first["messages"])
    await one.send(type="regenerate", conversationId=cid, messageId=a1, model=DOWN_MODEL)
    await one.until_event("error", timeout=15)
    await _turn_done(one)
    await one.send(type="retry", conversationId=cid)  # the conversation's model is the down one now
    # the failed exchange dropped, its question sent again beside the one that keeps A1 (a new branch)
    await one.until(lambda f: f["type"] == "snapshot" and f["turn"] is not None
                    and [m["content"] for m in f["messages"]] == ["Q1"])
    await one.until_event("error", timeout=15)
    await _turn_done(one)
    saved = await sync_to_async(lambda: list(Message.objects.filter(conversation_id=cid).order_by("position")
                                             .values_list("role", "content")))()
    assert saved == [("user", "Q1"), ("assistant", "A1"), ("user", "Q1")], "the first answer is kept"
    await one.close()
    await two.close()


async def test_a_stop_that_saved_no_answer_marks_the_question_for_every_tab(user: Any, fake: FakeProvider,
                                                                            hub: Any) -> None:
    one, two, cid, _ = await _two_tabs_on_one_exchange(user, fake)
    fake.add(text_script([f"w{i} " for i in range(40)], delay=0.05))
    await one.send(type="send", conversationId=cid, text="Q2")
    await two.until_event("delta")
    await two.send(type="cancel", conversationId=cid)
    for tab in (one, two):
        marked = await tab.until(lambda f: f["type"] == "message_saved" and f["message"]["stopped"])
        assert marked["message"]["content"] == "Q2"
        await tab.until_event("turn_end", outcome="cancelled")
    await one.send(type="subscribe", conversationId=cid)
    snapshot = await one.until(lambda f: f["type"] == "snapshot")
    assert [(m["content"], m["stopped"]) for m in snapshot["messages"]] == [("Q1", False), ("A1", False),
                                                                             ("Q2", True)]
    await one.close()
    await two.close()
