"""A starting turn's request goes first (issue 4, time to first token): layer housekeeping
(``jxai_app.turns.starts``: the user's list notice, a socket's group join) waits for the
model's first output, at most 50 ms; the turn's opening frames go out once the request is
written, at most 20 ms after the start, and always before the first event."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from jxai_app import store
from jxai_app.core.streaming.events import DeltaEvent, DoneEvent
from jxai_app.turns import TurnHub, launch, start_turn
from jxai_app.turns.starts import StartingTurns
from tests.app.turns_support import MODEL, Recorder, fake, hub, text_script  # noqa: F401
from tests.support.fake_provider import FakeProvider


async def test_after_returns_at_once_when_no_turn_is_starting() -> None:
    await asyncio.wait_for(StartingTurns().after(limit=30), 1)


async def test_after_waits_until_every_starting_turn_has_output() -> None:
    starting = StartingTurns()
    first, second = object(), object()
    starting.add(first)
    starting.add(second)
    waiting = asyncio.ensure_future(starting.after(limit=30))
    await asyncio.sleep(0.02)
    assert not waiting.done()
    starting.discard(first)
    await asyncio.sleep(0.02)
    assert not waiting.done(), "one turn still waits for its first output"
    starting.discard(second)
    await asyncio.wait_for(waiting, 1)


async def test_after_gives_up_after_its_limit() -> None:
    starting = StartingTurns()
    starting.add(object())
    started = time.monotonic()
    await asyncio.wait_for(starting.after(limit=0.05), 2)
    assert time.monotonic() - started >= 0.04


class _Stamped(Recorder):
    """A Recorder that also notes when each frame came."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def deliver(self, frame: dict[str, Any]) -> None:
        self.times.append(time.monotonic())
        super().deliver(frame)

    def first(self, kind: str) -> float:
        return next(t for t, f in zip(self.times, self.frames) if f["type"] == kind)


async def _one_turn(user: Any, hub: TurnHub) -> tuple[_Stamped, _Stamped]:
    """Run one turn in a new conversation of ``user``; returns (the socket following it, the
    user's other socket), both stamped."""
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    origin, other = _Stamped(), _Stamped()
    hub.follow(conversation.pk, origin)
    hub.join_user(user.pk, other)
    await start_turn(user=user, conversation_id=conversation.pk, text="Hello?", hub=hub)
    await asyncio.wait_for(origin.ended.wait(), 10)
    return origin, other


@pytest.mark.django_db(transaction=True)
async def test_the_list_notice_to_the_user_s_other_socket_follows_the_first_output(
        user: Any, fake: FakeProvider, hub: TurnHub) -> None:
    fake.add(text_script(["Hel", "lo"]))
    origin, other = await _one_turn(user, hub)

    assert [f["type"] for f in origin.frames][:2] == ["conversation", "message_saved"]
    assert other.frames[0]["type"] == "conversation"
    assert other.first("conversation") >= origin.first("events"), "the notice went out before the first output"


@pytest.mark.django_db(transaction=True)
async def test_the_list_notice_waits_at_most_50_ms_for_a_slow_model(user: Any, fake: FakeProvider,
                                                                     hub: TurnHub) -> None:
    fake.add(text_script(["late"], delay=1.0))  # the first output comes after 1 s
    origin, other = await _one_turn(user, hub)

    events = [t for t, f in zip(origin.times, origin.frames) if f["type"] == "events"
              and any(i["event"]["type"] == "delta" for i in f["items"])]
    assert other.first("conversation") < events[0], "the notice waited for the slow model's output"


class _Stamping(Recorder):
    """A Recorder that notes, for each frame, whether the request was already written: it
    waits (blocking this loop, so nothing more can be written meanwhile) up to 1 s for the
    provider's thread to have received it."""

    def __init__(self, provider: FakeProvider) -> None:
        super().__init__()
        self.provider = provider
        self.request_seen: list[bool] = []

    def deliver(self, frame: dict[str, Any]) -> None:
        self.request_seen.append(self.provider.request_received.wait(1.0))
        super().deliver(frame)


@pytest.mark.django_db(transaction=True)
async def test_the_opening_frames_go_out_once_the_request_is_written(user: Any, fake: FakeProvider,
                                                                     hub: TurnHub) -> None:
    fake.add(text_script(["Hel", "lo"], delay=0.2))
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    origin = _Stamping(fake)
    hub.follow(conversation.pk, origin)

    await start_turn(user=user, conversation_id=conversation.pk, text="Hello?", hub=hub)
    await asyncio.wait_for(origin.ended.wait(), 10)

    assert [f["type"] for f in origin.frames][:3] == ["conversation", "message_saved", "events"]
    assert origin.frames[2]["items"][0]["seq"] == 1 and origin.frames[2]["items"][0]["event"]["type"] == "round_start"
    assert origin.request_seen[0], "the opening frames were published before the request was written"


class _SilentClient:
    """A model client that sends no HTTP request and answers only when released."""

    def __init__(self, release: asyncio.Event) -> None:
        self.release = release

    async def stream_chat(self, messages: Any, tools: Any, system_prompt: Any, *, signal: Any = None) -> Any:
        waits = [asyncio.ensure_future(self.release.wait()), asyncio.ensure_future(signal.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        if signal.is_set():
            yield DoneEvent(stop_reason="cancelled")
            return
        yield DeltaEvent(content="ok")
        yield DoneEvent(stop_reason="stop")


@pytest.mark.django_db(transaction=True)
async def test_the_opening_frames_go_out_within_20_ms_without_a_request_written(
        user: Any, hub: TurnHub, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    release = asyncio.Event()
    monkeypatch.setattr(launch, "client_factory", lambda alias: lambda: _SilentClient(release))
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    origin = Recorder()
    hub.follow(conversation.pk, origin)

    await start_turn(user=user, conversation_id=conversation.pk, text="Hello?", hub=hub)
    for _ in range(100):  # the timer's 20 ms, with room for a slow machine
        if len(origin.frames) >= 3:
            break
        await asyncio.sleep(0.01)
    assert [f["type"] for f in origin.frames] == ["conversation", "message_saved", "events"]
    assert [i["event"]["type"] for i in origin.items()] == ["round_start"]  # held until the opening
    release.set()
    await asyncio.wait_for(origin.ended.wait(), 10)
    assert "".join(i["event"]["content"] for i in origin.items() if i["event"]["type"] == "delta") == "ok"


@pytest.mark.django_db(transaction=True)
async def test_a_stop_before_the_request_is_written_keeps_every_frame_in_order(
        user: Any, hub: TurnHub, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "client_factory", lambda alias: lambda: _SilentClient(asyncio.Event()))
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    origin = Recorder()
    hub.follow(conversation.pk, origin)

    info = await start_turn(user=user, conversation_id=conversation.pk, text="Hello?", hub=hub)
    info.runner.cancel()  # before the opening frames' 20 ms
    await asyncio.wait_for(origin.ended.wait(), 10)

    kinds = [f["type"] for f in origin.frames]
    assert kinds[:2] == ["conversation", "message_saved"] and kinds[-1] == "conversation"
    items = origin.items()
    assert [i["seq"] for i in items] == list(range(1, len(items) + 1))
    assert items[-1]["event"]["type"] == "turn_end" and items[-1]["event"]["outcome"] == "cancelled"
    await asyncio.wait_for(hub.starting.after(limit=30), 1)  # the stopped turn no longer counts as starting
