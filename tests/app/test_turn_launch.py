"""A send's model request goes out only after its transaction committed
(jxai_app.turns.start): a send whose writes fail never contacts the provider and leaves
nothing behind, and no socket sees a turn that was not saved."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from jxai_app import store
from jxai_app.models import Conversation, ConversationStatus, Message
from jxai_app.turns.hub import TurnHub
from tests.app.turns_support import MODEL, Recorder, fake, hub, send_turn, text_script  # noqa: F401
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)


def _watch_insert(fake: FakeProvider, monkeypatch: pytest.MonkeyPatch, *, then: Any = None) -> dict[str, Any]:
    """Record, after the send's writes (in the database thread, before the commit), whether
    the provider had already received a request; then raise ``then`` if given."""
    seen: dict[str, Any] = {}
    real_write = Message.objects.bulk_create

    def write(*args: Any, **kwargs: Any) -> Any:
        saved = real_write(*args, **kwargs)  # the send's last write, inside its transaction
        seen["request_before_commit"] = fake.request_received.wait(0.2)
        if then is not None:
            raise then
        return saved

    monkeypatch.setattr(Message.objects, "bulk_create", write)
    return seen


async def test_the_model_request_goes_out_after_the_send_commits(user: Any, fake: FakeProvider, hub: TurnHub,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake.add(text_script(["Hel", "lo"]))
    seen = _watch_insert(fake, monkeypatch)
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    follower = Recorder()
    hub.delivery.follow(conversation.pk, follower)

    info, _ = await send_turn(hub, user=user, conversation_id=conversation.pk, text="Say hello.")
    await asyncio.wait_for(follower.ended.wait(), 10)

    assert seen["request_before_commit"] is False, "the request went out before the send was saved"
    assert fake.requests[0].json["messages"][-1] == {"role": "user", "content": "Say hello."}
    kinds = [f["type"] for f in follower.frames]
    assert kinds[:2] == ["conversation", "message_saved"] and "events" in kinds
    text = "".join(i["event"]["content"] for f in follower.frames if f["type"] == "events"
                   for i in f["items"] if i["event"]["type"] == "delta")
    assert text == "Hello"
    rows = await sync_to_async(lambda: list(Message.objects.filter(conversation_id=info.conversation_id)
                                            .order_by("position").values_list("role", "content", "status")))()
    assert rows == [("user", "Say hello.", "complete"), ("assistant", "Hello", "complete")]


async def test_a_send_whose_writes_fail_contacts_no_provider_and_leaves_nothing(
        user: Any, fake: FakeProvider, hub: TurnHub, monkeypatch: pytest.MonkeyPatch) -> None:
    _watch_insert(fake, monkeypatch, then=RuntimeError("disk full"))
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    follower = Recorder()
    hub.delivery.follow(conversation.pk, follower)

    with pytest.raises(RuntimeError, match="disk full"):
        await send_turn(hub, user=user, conversation_id=conversation.pk, text="Hi")

    assert fake.requests == []
    assert hub.runner(conversation.pk) is None
    assert follower.frames == []  # no socket saw a turn that was never saved
    saved = await sync_to_async(Conversation.objects.get)(pk=conversation.pk)
    assert saved.status == ConversationStatus.IDLE and saved.turn_id is None
    assert await sync_to_async(Message.objects.filter(conversation=conversation).count)() == 0

    # the conversation is usable at once: the next send runs normally
    monkeypatch.undo()
    fake.add(text_script(["fine"]))
    await send_turn(hub, user=user, conversation_id=conversation.pk, text="Again")
    await asyncio.wait_for(follower.ended.wait(), 10)
    assert (await sync_to_async(Conversation.objects.get)(pk=conversation.pk)).status == ConversationStatus.IDLE
    assert len(fake.requests) == 1
