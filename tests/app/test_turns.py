"""The turn runner: replay log, layer batching, failures, shutdown (docs/turns.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from jxai_app import conf, store
from jxai_app.models import Conversation, ConversationStatus, Message
from jxai_app.turns.control import cancel_turn
from jxai_app.turns.hub import TurnHub
from jxai_app.turns.replay import ReplayLog
from jxai_app.turns.delivery import BROADCAST_GROUP, FRAMES, LayerDelivery
from tests.app.conftest import start_streaming, watch_one_turn
from tests.app.turns_support import (  # noqa: F401
    MODEL, Recorder, Tab, assert_in_order, fake, hub, send_turn, text_script, tool_script,
)
from tests.support.fake_provider import FakeProvider
from tests.app.store_support import TurnFeed

pytestmark = pytest.mark.django_db(transaction=True)


def test_replay_log_returns_exactly_what_was_published_and_stays_small() -> None:
    log = ReplayLog()
    published: list[dict[str, Any]] = []

    def add(message_id: int | None, event: dict[str, Any]) -> None:
        item = {"seq": log.last_seq + 1, "messageId": message_id, "event": event}
        published.append(item)
        log.append(item["seq"], message_id, event)

    add(1, {"type": "round_start", "round": 1})
    for i in range(5000):
        add(1, {"type": "delta", "content": f"{i % 10}"})
    add(1, {"type": "reasoning", "content": "hm"})
    add(1, {"type": "delta", "content": "é"})
    add(1, {"type": "tool_call_start", "id": "c1", "name": "calculate"})
    add(1, {"type": "tool_call_delta", "id": "c1", "args": '{"expr'})
    add(1, {"type": "tool_call_delta", "id": "c1", "args": 'ession": "1"}'})
    add(1, {"type": "tool_call_delta", "id": "c2", "args": "{}"})
    add(2, {"type": "delta", "content": ""})
    add(2, {"type": "delta", "content": "next round"})
    add(2, {"type": "done", "stopReason": "stop"})

    assert log.items_after(0) == published
    for after in (0, 1, 17, 4999, 5001, 5002, 5005, 5008, len(published)):
        assert log.items_after(after) == published[after:]
    assert log.approx_bytes() < 48 * 1024
    with pytest.raises(ValueError):
        log.append(log.last_seq + 2, 1, {"type": "delta", "content": "x"})


async def test_events_are_numbered_and_batched_through_the_layer(user: Any, fake: FakeProvider, hub: TurnHub,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    layer = get_channel_layer()
    sent: list[dict[str, Any]] = []
    real_group_send = layer.group_send

    async def counting(group: str, message: dict[str, Any]) -> None:
        if group == BROADCAST_GROUP and message["type"] == FRAMES:
            sent.append(message)
        await real_group_send(group, message)

    monkeypatch.setattr(layer, "group_send", counting)
    hub.delivery = LayerDelivery(layer, worker_id=hub.worker_id)  # the in-memory layer plays Redis
    fake.add(text_script([f"d{i}" for i in range(500)], delay=0.0005))
    follower = Recorder()
    info, _ = await send_turn(hub, follower, user=user, conversation_id=None, text="Stream.")
    await asyncio.wait_for(follower.ended.wait(), 20)
    await hub.wait_idle(5)

    items = follower.items()
    assert_in_order(items)
    assert sum(1 for i in items if i["event"]["type"] == "delta") == 500
    layer_items = [i for m in sent for e in m["entries"] if e["frame"]["type"] == "events" for i in e["frame"]["items"]]
    assert layer_items == items  # the layer carries the same items, in order, once
    assert all(m["origin"] == hub.worker_id for m in sent)
    assert len(sent) < 60, f"{len(sent)} layer messages for {len(items)} events"
    assert info.turn.created and info.conversation["status"] == "streaming"


async def test_a_failing_runner_ends_the_turn_as_an_error(user: Any, fake: FakeProvider, hub: TurnHub,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(alias: str | None, **kwargs: Any) -> Any:
        raise RuntimeError("no client today")

    monkeypatch.setattr(conf, "build_client", broken)
    follower = Recorder()
    info, _ = await send_turn(hub, follower, user=user, conversation_id=None, text="Hello?")
    await asyncio.wait_for(follower.ended.wait(), 10)
    kinds = [i["event"]["type"] for i in follower.items()]
    assert kinds[-2:] == ["error", "turn_end"]
    assert follower.items()[-2]["event"]["problem"]["type"].endswith("/internal-error")
    conversation = await sync_to_async(Conversation.objects.get)(pk=info.conversation_id)
    assert conversation.status == ConversationStatus.ERROR and "RuntimeError" in conversation.last_error
    assert "no client today" not in conversation.last_error  # no internals leak to users
    assert await sync_to_async(Message.objects.filter(conversation=conversation).count)() == 1


async def test_shutdown_stops_running_turns_and_drops_their_partial(user: Any, fake: FakeProvider) -> None:
    hub = TurnHub()
    fake.add(text_script([f"w{i}" for i in range(1000)], delay=0.01))
    follower = Recorder()
    info, _ = await send_turn(hub, follower, user=user, conversation_id=None, text="Long answer.")
    while not any(i["event"]["type"] == "delta" for i in follower.items()):
        await asyncio.sleep(0.01)
    await hub.shutdown(timeout=5)
    assert hub.runners() == []
    assert follower.items()[-1]["event"]["outcome"] == "cancelled"
    conversation = await sync_to_async(Conversation.objects.get)(pk=info.conversation_id)
    assert conversation.status == ConversationStatus.IDLE
    roles = await sync_to_async(lambda: list(Message.objects.filter(conversation=conversation).values_list(
        "role", flat=True)))()
    assert roles == ["user"]
    assert await asyncio.to_thread(fake.wait_closed, 2.0)


async def test_a_refused_start_saves_nothing_and_a_followed_plan_misses_no_frame(user: Any, fake: FakeProvider,
                                                                                hub: TurnHub) -> None:
    from jxai_app.core.errors import ProblemError

    with pytest.raises(ProblemError) as excinfo:
        await send_turn(hub, user=user, conversation_id=None, text="")
    assert excinfo.value.slug == "invalid-request"
    assert await sync_to_async(Conversation.objects.count)() == 0
    fake.add(text_script(["ok"]))
    follower = Recorder()
    info, _ = await send_turn(hub, follower, user=user, conversation_id=None, text="hi")
    await hub.wait_idle(5)
    assert [f["type"] for f in follower.frames[:2]] == ["conversation", "message_saved"]
    assert follower.items()[0]["seq"] == 1
    assert await cancel_turn(hub, user=user, conversation_id=info.conversation_id) is False


# --------------------------------------------------------------------------- two workers
# Two hubs in one process share the channel layer exactly as two daphne workers share Redis:
# a tab on hub B only hears of a turn running on hub A through the layer.


def consumer_on(worker: TurnHub) -> type:
    from jxai_app.consumers import ChatConsumer

    class WorkerConsumer(ChatConsumer):
        def get_hub(self) -> TurnHub:
            return worker

    return WorkerConsumer


@pytest.fixture
async def worker_b(hub: TurnHub) -> Any:
    layer = get_channel_layer()  # the in-memory layer plays Redis between the two hubs
    hub.delivery = LayerDelivery(layer, worker_id=hub.worker_id, reply_timeout=0.5)
    other = TurnHub(worker_id="worker-b", delivery=LayerDelivery(layer, worker_id="worker-b", reply_timeout=0.5))
    yield other
    await other.shutdown(timeout=5)


async def _conversation(user: Any) -> str:
    return str((await sync_to_async(store.conversation_create)(user=user, model=MODEL)).pk)


async def test_a_tab_on_another_worker_sees_the_same_stream(user: Any, fake: FakeProvider, hub: TurnHub,
                                                            worker_b: TurnHub) -> None:
    cid = await _conversation(user)
    fake.add(text_script([f"b{i}" for i in range(300)], delay=0.001))
    a, b = await Tab(user).open(), await Tab(user, consumer_on(worker_b)).open()
    await watch_one_turn((a, b), cid, "To both workers.")
    assert a.items == b.items
    assert_in_order(b.events())
    assert [f["message"]["id"] for f in a.of_type("message_saved")] == [
        f["message"]["id"] for f in b.of_type("message_saved")]
    assert worker_b.runners() == []
    await a.close()
    await b.close()


async def test_stop_from_another_worker_stops_the_turn(user: Any, fake: FakeProvider, hub: TurnHub,
                                                       worker_b: TurnHub) -> None:
    cid = await _conversation(user)
    fake.add(text_script([f"s{i} " for i in range(500)], delay=0.01))
    a, b = await Tab(user).open(), await Tab(user, consumer_on(worker_b)).open()
    await b.send(type="subscribe", conversationId=cid)
    await b.until(lambda f: f["type"] == "snapshot")
    await a.send(type="send", conversationId=cid, text="Talk until stopped.")
    await b.until_event("delta")
    loop = asyncio.get_running_loop()
    asked = loop.time()
    await b.send(type="cancel", conversationId=cid)
    end = await b.until_event("turn_end", timeout=2)
    assert end["event"]["outcome"] == "cancelled" and loop.time() - asked < 1.0
    await a.until_event("turn_end", outcome="cancelled")
    assert await asyncio.to_thread(fake.wait_closed, 2.0)
    assert a.items == b.items
    roles = await sync_to_async(lambda: list(Message.objects.filter(conversation_id=cid).values_list(
        "role", flat=True)))()
    assert roles == ["user"]
    await a.close()
    await b.close()


async def test_subscribing_mid_turn_on_another_worker_replays_from_the_runner(
    user: Any, fake: FakeProvider, hub: TurnHub, worker_b: TurnHub
) -> None:
    parts = [f"m{i};" for i in range(150)]
    fake.add(text_script(parts, delay=0.01))
    a = await Tab(user).open()
    cid = await start_streaming(a, "Begin.", delta_frames=15)
    b = await Tab(user, consumer_on(worker_b)).open()
    await b.send(type="subscribe", conversationId=cid)
    snapshot = await b.until(lambda f: f["type"] == "snapshot")
    assert snapshot["turn"]["lastSeq"] >= 15 and [m["role"] for m in snapshot["messages"]] == ["user"]
    await b.until_event("turn_end")
    await a.until_event("turn_end")
    assert_in_order(b.events())
    assert b.events() == a.events() and b.text() == "".join(parts)
    await a.close()
    await b.close()


async def test_a_lost_layer_message_is_filled_from_the_runners_log(
    user: Any, fake: FakeProvider, hub: TurnHub, worker_b: TurnHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = await _conversation(user)
    dropped: list[int] = []
    layer = get_channel_layer()
    real = layer.group_send

    async def lossy(group: str, message: dict[str, Any]) -> None:
        entries = message.get("entries") or []
        has_events = any(e["frame"]["type"] == "events" and e["conversationId"] == cid for e in entries)
        if message["type"] == FRAMES and message["origin"] == hub.worker_id and has_events and len(dropped) < 2:
            dropped.append(len(entries))  # the layer silently drops this one, like a full channel
            return
        await real(group, message)

    monkeypatch.setattr(layer, "group_send", lossy)
    parts = [f"g{i}" for i in range(200)]
    fake.add(text_script(parts, delay=0.002))
    a, b = await Tab(user).open(), await Tab(user, consumer_on(worker_b)).open()
    await b.send(type="subscribe", conversationId=cid)
    await b.until(lambda f: f["type"] == "snapshot")
    await a.send(type="send", conversationId=cid, text="Lose some.")
    await a.until_event("turn_end")
    await b.until_event("turn_end")
    assert dropped, "the test dropped nothing"
    assert_in_order(b.events())
    assert b.events() == a.events() and b.text() == "".join(parts)
    await a.close()
    await b.close()


async def test_a_dead_runner_falls_back_to_the_database(user: Any, fake: FakeProvider, hub: TurnHub,
                                                       worker_b: TurnHub) -> None:
    cid = await _conversation(user)

    def orphan_turn() -> None:  # a turn whose worker died: rows say streaming, no runner anywhere
        turn = store.message_send(user=user, conversation_id=cid, text="Lost in a crash.")
        TurnFeed(turn).add_delta("half an ans")  # kept in memory: never reaches the rows

    await sync_to_async(orphan_turn)()
    b = await Tab(user, consumer_on(worker_b)).open()
    await b.send(type="subscribe", conversationId=cid)
    snapshot = await b.until(lambda f: f["type"] == "snapshot", timeout=5)
    assert snapshot["turn"] is None and snapshot["conversation"]["status"] == "streaming"
    assert [(m["role"], m["status"]) for m in snapshot["messages"]] == [("user", "complete"),
                                                                        ("assistant", "streaming")]
    assert snapshot["messages"][1]["content"] == ""
    await b.send(type="cancel", conversationId=cid)
    after = await b.until(lambda f: f["type"] == "snapshot", timeout=5)
    assert after["conversation"]["status"] == "idle" and [m["role"] for m in after["messages"]] == ["user"]
    fake.add(text_script(["fresh"]))
    await b.send(type="send", conversationId=cid, text="Again.")
    await b.until_event("turn_end", outcome="complete")
    await b.close()


async def test_the_frames_of_what_a_turn_wrote_are_what_the_database_holds(user: Any, fake: FakeProvider,
                                                                           hub: TurnHub) -> None:
    """``message_saved`` is built from the rows as the recorder wrote them (no read-back): a
    round with a tool call, the tool's reply and the answer read the same in a snapshot."""
    fake.add(tool_script("call_1", "calculate", {"expression": "6*7"}), text_script(["It is ", "42."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="What is 6*7?")
    await tab.until_event("turn_end", outcome="complete")
    cid = tab.of_type("conversation")[0]["conversation"]["id"]
    live = {f["message"]["id"]: f["message"] for f in tab.of_type("message_saved")}
    await tab.send(type="subscribe", conversationId=cid)
    snapshot = await tab.until(lambda f: f["type"] == "snapshot")
    saved = {m["id"]: m for m in snapshot["messages"]}
    assert [m["role"] for m in snapshot["messages"]] == ["user", "assistant", "tool", "assistant"]
    for pk, message in live.items():
        if message["role"] == "assistant" and message["toolCalls"]:  # the card's result came with the tool's reply
            message = {**message, "toolCalls": saved[pk]["toolCalls"]}
            assert [c["id"] for c in saved[pk]["toolCalls"]] == ["call_1"]
        assert message == saved[pk]
    await tab.close()


async def test_a_burst_of_sends_with_a_short_lease_keeps_every_turn(user: Any, fake: FakeProvider, hub: TurnHub,
                                                                    settings: Any) -> None:
    """A worker busy admitting a burst still renews its leases in time (its lease thread never
    queues behind the sends): another worker's watch, judging every turn with a 3 s lease,
    takes none of them for dead, and every answer is saved once. The lease is half the
    default's (6 s): shorter ones were missed now and then on a loaded 2-core machine, before
    and after the burst, as the renewal threads waited for the GIL."""
    from jxai_app.turns.recovery import LeaseWatch

    settings.JXAI_TURN_LEASE_SECONDS = 3
    settings.JXAI_TURNS_PER_MINUTE = settings.JXAI_TOKENS_PER_DAY = 0
    sends = 200
    for _ in range(sends):  # each answer outlives the lease: only renewals keep its turn
        fake.add(text_script([f"w{i} " for i in range(10)], delay=0.4))
    watcher = TurnHub(worker_id="watcher", jobs=(LeaseWatch(interval=0.2),))
    await watcher.ensure_started()
    try:
        await asyncio.sleep(3.1)  # the watch judges leases once the database answered for a lease period
        started = await asyncio.gather(*(send_turn(hub, user=user, conversation_id=None, text=f"q{i}")
                                         for i in range(sends)))
        assert await hub.wait_idle(60)
    finally:
        await watcher.shutdown(timeout=5)
    ids = [plan.conversation_id for plan, _ in started]
    rows = await sync_to_async(lambda: list(Conversation.objects.filter(pk__in=ids).values_list("status", "last_error")))()
    assert rows == [(ConversationStatus.IDLE, "")] * sends
    answers = await sync_to_async(lambda: list(Message.objects.filter(conversation_id__in=ids, role="assistant")
                                               .values_list("content", flat=True)))()
    assert sorted(answers) == ["".join(f"w{i} " for i in range(10))] * sends
