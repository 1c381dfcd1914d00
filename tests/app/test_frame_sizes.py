"""Outgoing frame sizes and what a frame that cannot be sent does (docs/websocket.md
"Frame size"), and the answer cap ``JXAI_MAX_ANSWER_CHARS`` (docs/turns.md "Settings").

The slicing and batching helpers are checked on text made to be hard to slice (quotes,
backslashes, non-ASCII, a non-BMP character); the layer's pieces travel between two real
:class:`LayerDelivery` on Channels' in-memory layer; the socket paths run through the real
consumer (``Tab``), hub and session. The end-to-end run with real daphne workers is
``test_big_answers.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer

from jxai_app import store
from jxai_app.consumers import ChatConsumer
from jxai_app.turns.hub import TurnHub
from jxai_app.turns.delivery import LayerDelivery, layer_batches, reply_messages
from jxai_app.turns.framing import Outbox, json_bytes, pieces, wire_texts
from jxai_app.turns.session import UNSENDABLE_CLOSE_CODE
from tests.app.turns_support import MODEL, Recorder, Tab, fake, hub, text_script  # noqa: F401 (fixtures)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)

HARD = 'a "quote", a \\ backslash, é, 😀, \t\n' * 40


def test_pieces_join_back_and_each_fits_its_budget() -> None:
    for budget in (8, 9, 64, 1000):
        parts = pieces(HARD, budget)
        assert "".join(parts) == HARD
        assert all(json_bytes(p) <= budget for p in parts)


def test_a_frame_over_the_limit_becomes_chunks_that_join_into_it() -> None:
    frame = {"type": "message_saved", "conversationId": "c", "message": {"content": HARD * 10}}
    texts = wire_texts(frame, limit=512)
    assert len(texts) > 1 and all(len(t.encode("utf-8")) <= 512 for t in texts)
    chunks = [json.loads(t) for t in texts]
    assert [(c["type"], c["index"], c["count"]) for c in chunks] == [("chunk", i, len(texts)) for i in range(len(texts))]
    assert json.loads("".join(c["data"] for c in chunks)) == frame
    assert wire_texts({"type": "list"}, limit=512) == ['{"type":"list"}']


def test_events_are_merged_only_while_the_frame_fits() -> None:
    outbox = Outbox(limit=600)
    items = [{"seq": i, "messageId": 1, "event": {"type": "delta", "content": "é" * 40}} for i in range(1, 31)]
    for item in items:
        outbox.add({"type": "events", "conversationId": "c", "turnId": "t", "items": [item]})
    outbox.add({"type": "conversation", "conversation": {}})
    outbox.add({"type": "events", "conversationId": "c", "turnId": "t", "items": items[:1]})
    frames = outbox.take()
    assert frames[-2]["type"] == "conversation" and frames[-1]["items"] == items[:1]
    batches = frames[:-2]
    assert len(batches) > 1 and all(json_bytes(f) <= 600 for f in batches)
    assert [i for f in batches for i in f["items"]] == items
    assert outbox.take() == []


def test_layer_batches_are_bounded_and_a_large_entry_goes_in_pieces() -> None:
    small = [{"conversationId": "c", "frame": {"type": "events", "items": [i]}} for i in range(50)]
    large = {"conversationId": "c", "frame": {"type": "message_saved", "message": {"content": HARD * 20}}}
    batches = layer_batches([*small, large, *small], limit=1000)
    assert all(json_bytes(b) <= 1000 + 2 * len(b) for b in batches)  # entries within the limit, plus list syntax
    entries = [e for b in batches for e in b]
    assert entries[:50] == small and entries[-50:] == small
    middle = entries[50:-50]
    assert len(middle) > 1 and all("piece" in e for e in middle)
    assert json.loads("".join(e["piece"] for e in middle)) == large


@pytest.fixture
async def two_workers() -> Any:
    """Two started :class:`LayerDelivery` on one in-memory layer; the second answers every
    control request with a replay of about 1 MB."""
    layer = InMemoryChannelLayer()
    sender, receiver = LayerDelivery(layer, worker_id="a"), LayerDelivery(layer, worker_id="b")

    async def no_control(message: dict[str, Any]) -> None:
        return None

    async def long_replay(message: dict[str, Any]) -> dict[str, Any]:
        return {"turnId": "t", "items": [{"seq": 1, "event": {"type": "delta", "content": HARD * 800}}]}

    await sender.start(no_control)
    await receiver.start(long_replay)
    for _ in range(100):  # both have joined once their pings go round
        if sender.up and receiver.up:
            break
        await asyncio.sleep(0.02)
    yield sender, receiver
    await sender.stop()
    await receiver.stop()


async def test_a_large_frame_crosses_the_layer_whole_and_in_order(two_workers: Any) -> None:
    sender, receiver = two_workers
    cid = uuid.uuid4()
    follower = Recorder()
    receiver.follow(cid, follower)
    frames = [{"type": "message_saved", "conversationId": str(cid), "message": {"content": HARD * n}}
              for n in (1, 800, 2)]  # the middle one is about 1 MB
    for frame in frames:
        sender.publish(cid, frame)
    await sender.flush()
    for _ in range(200):
        if len(follower.frames) == 3:
            break
        await asyncio.sleep(0.02)
    assert follower.frames == frames


async def test_a_large_control_reply_crosses_the_layer_in_pieces(two_workers: Any) -> None:
    sender, _ = two_workers
    assert len(reply_messages({"type": "jxai.reply", "request": "r", "items": [HARD * 800]})) > 1
    answer = await sender.ask({"op": "replay", "conversationId": str(uuid.uuid4())})
    assert answer is not None and answer["items"][0]["event"]["content"] == HARD * 800
    assert sender._pieces == {}


async def test_a_frame_that_cannot_be_sent_becomes_an_error_and_a_snapshot(
        user: Any, hub: TurnHub, caplog: pytest.LogCaptureFixture) -> None:
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    cid = str(conversation.pk)
    tab = await Tab(user).open()
    await tab.send(type="subscribe", conversationId=cid)
    await tab.until(lambda f: f["type"] == "snapshot")
    with caplog.at_level(logging.ERROR, logger="jxai_app.turns"):
        hub.delivery.publish(conversation.pk, {"type": "message_saved", "conversationId": cid,
                                               "message": {"content": object()}})  # not JSON
        error = await tab.until(lambda f: f["type"] == "error")
    assert error["code"] == "internal-error" and error["conversationId"] == cid
    assert "message_saved frame could not be sent" in error["message"]
    assert any("cannot send a message_saved frame" in r.getMessage() for r in caplog.records)
    await tab.until(lambda f: f["type"] == "snapshot")
    await tab.send(type="list")
    await tab.until(lambda f: f["type"] == "conversations")
    await tab.close()


class _BrokenTransport(ChatConsumer):
    """A consumer whose socket takes no message at all (its close still goes out)."""

    async def send(self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False) -> None:
        raise RuntimeError("the transport refuses every message")


async def test_a_socket_that_takes_nothing_is_closed_not_left_silent(user: Any, hub: TurnHub) -> None:
    tab = await Tab(user, _BrokenTransport).open()
    await tab.send(type="list")
    closed = await tab.comm.receive_output(5)
    assert closed == {"type": "websocket.close", "code": UNSENDABLE_CLOSE_CODE}
    await tab.close()


async def test_an_answer_over_the_cap_is_cut_saved_and_marked(
        user: Any, fake: FakeProvider, hub: TurnHub, settings: Any) -> None:
    settings.JXAI_MAX_ANSWER_CHARS = 10
    fake.add(text_script(["hello ", "world, ", "and more ", "and more"], delay=0.05))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Say a lot.")
    end = await tab.until_event("turn_end")
    assert end["event"]["outcome"] == "complete"
    assert tab.text() == "hello worl"
    assert [e["event"]["stopReason"] for e in tab.events() if e["event"]["type"] == "done"] == ["length"]
    saved = [f["message"] for f in tab.of_type("message_saved") if f["message"]["role"] == "assistant"]
    assert [(m["content"], m["stopReason"]) for m in saved] == [("hello worl", "length")]
    assert await asyncio.to_thread(fake.wait_closed, 2.0)  # the provider's stream was closed at the cut
    await tab.close()
