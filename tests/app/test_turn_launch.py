"""The model request starts once the send is decided, while its writes commit
(jxai_app.turns.launch; issue 4, time to first token) — and that changes none of the rules:
nothing is published or run for a turn that is not saved, and a send whose transaction fails
after the decision closes its request and leaves nothing behind."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from jxai_app import store
from jxai_app.models import Conversation, ConversationStatus, Message
from jxai_app.store import turn as turn_store
from jxai_app.tools import ToolRegistry, tool
from jxai_app.turns import TurnHub, launch, start_turn
from tests.app.turns_support import MODEL, Recorder, fake, hub, text_script, tool_script  # noqa: F401
from tests.support.fake_provider import FakeProvider, Script

pytestmark = pytest.mark.django_db(transaction=True)


def _insert_after(fake: FakeProvider, monkeypatch: pytest.MonkeyPatch, *, then: Any = None,
                  hold: float = 0.0) -> dict[str, Any]:
    """Make the send's INSERT (its last write, in the database thread) wait until the
    provider has received the model request, then (optionally) hold ``hold`` seconds or
    raise ``then``. Returns what it saw."""
    seen: dict[str, Any] = {}
    real_insert = turn_store.sql.insert

    def insert(rows: list[Any]) -> Any:
        seen["request_before_commit"] = fake.request_received.wait(5.0)
        seen["thread"] = threading.current_thread().name
        if hold:
            time.sleep(hold)
        seen["committing_at"] = time.monotonic()
        if then is not None:
            raise then
        return real_insert(rows)

    monkeypatch.setattr(turn_store.sql, "insert", insert)
    return seen


async def test_the_model_request_goes_out_before_the_send_commits(user: Any, fake: FakeProvider, hub: TurnHub,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake.add(text_script(["Hel", "lo"]))
    seen = _insert_after(fake, monkeypatch)
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    follower = Recorder()
    hub.follow(conversation.pk, follower)

    info = await start_turn(user=user, conversation_id=conversation.pk, text="Say hello.", hub=hub)
    await asyncio.wait_for(follower.ended.wait(), 10)

    assert seen["request_before_commit"], "the request waited for the commit"
    assert fake.requests[0].json["messages"][-1] == {"role": "user", "content": "Say hello."}
    kinds = [f["type"] for f in follower.frames]
    assert kinds[:2] == ["conversation", "message_saved"] and "events" in kinds
    text = "".join(i["event"]["content"] for f in follower.frames if f["type"] == "events"
                   for i in f["items"] if i["event"]["type"] == "delta")
    assert text == "Hello"
    rows = await sync_to_async(lambda: list(Message.objects.filter(conversation_id=info.conversation_id)
                                            .order_by("position").values_list("role", "content", "status")))()
    assert rows == [("user", "Say hello.", "complete"), ("assistant", "Hello", "complete")]


async def test_a_send_failing_after_the_decision_closes_its_request_and_leaves_nothing(
        user: Any, fake: FakeProvider, hub: TurnHub, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.add(Script(writes=[], hold=True))  # the provider answers nothing until the client leaves
    seen = _insert_after(fake, monkeypatch, then=RuntimeError("disk full"))
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    follower = Recorder()
    hub.follow(conversation.pk, follower)

    with pytest.raises(RuntimeError, match="disk full"):
        await start_turn(user=user, conversation_id=conversation.pk, text="Hi", hub=hub)

    assert seen["request_before_commit"]
    assert await asyncio.to_thread(fake.wait_closed, 5.0), "the abandoned request was not closed"
    assert await hub.wait_idle(5)
    assert hub.runner(conversation.pk) is None
    assert follower.frames == []  # no socket saw a turn that was never saved
    saved = await sync_to_async(Conversation.objects.get)(pk=conversation.pk)
    assert saved.status == ConversationStatus.IDLE and saved.turn_id is None
    assert await sync_to_async(Message.objects.filter(conversation=conversation).count)() == 0

    # the conversation is usable at once: the next send runs normally
    monkeypatch.undo()
    fake.add(text_script(["fine"]))
    await start_turn(user=user, conversation_id=conversation.pk, text="Again", hub=hub)
    await asyncio.wait_for(follower.ended.wait(), 10)
    assert (await sync_to_async(Conversation.objects.get)(pk=conversation.pk)).status == ConversationStatus.IDLE


async def test_no_tool_runs_before_the_send_commits(user: Any, fake: FakeProvider, hub: TurnHub,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[float] = []

    @tool(timeout=5.0)
    def stamp() -> str:
        """Record when the tool ran."""
        ran.append(time.monotonic())
        return "ok"

    registry = ToolRegistry()
    registry.register(stamp)
    monkeypatch.setattr(launch, "tool_view", lambda user, model, rules=None: registry.gated(lambda defn: True))
    fake.add(tool_script("call_1", "stamp", {}), text_script(["done"]))
    seen = _insert_after(fake, monkeypatch, hold=0.3)  # a slow commit, the tool call already there
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    follower = Recorder()
    hub.follow(conversation.pk, follower)

    await start_turn(user=user, conversation_id=conversation.pk, text="Stamp it.", hub=hub)
    await asyncio.wait_for(follower.ended.wait(), 10)

    assert seen["request_before_commit"]
    assert len(ran) == 1 and ran[0] > seen["committing_at"], "the tool ran before the send was saved"
    roles = await sync_to_async(lambda: list(Message.objects.filter(conversation=conversation)
                                             .order_by("position").values_list("role", flat=True)))()
    assert roles == ["user", "assistant", "tool", "assistant"]
