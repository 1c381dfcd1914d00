"""Layer housekeeping gives way to starting turns (``TurnHub.after_starts``; issue 4, time to
first token): the user's list notice and a socket's group join wait for the model's first
output, at most 50 ms, instead of sharing the event loop with the request being sent."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from jxai_app import store
from jxai_app.turns import TurnHub, start_turn
from tests.app.turns_support import MODEL, Recorder, fake, hub, text_script  # noqa: F401
from tests.support.fake_provider import FakeProvider


async def test_after_starts_returns_at_once_when_no_turn_is_starting() -> None:
    hub = TurnHub(fanout=False, idle_trim=None)
    await asyncio.wait_for(hub.after_starts(limit=30), 1)


async def test_after_starts_waits_until_every_starting_turn_has_output() -> None:
    hub = TurnHub(fanout=False, idle_trim=None)
    first, second = object(), object()
    hub.starting(first)  # type: ignore[arg-type]
    hub.starting(second)  # type: ignore[arg-type]
    waiting = asyncio.ensure_future(hub.after_starts(limit=30))
    await asyncio.sleep(0.02)
    assert not waiting.done()
    hub.started(first)  # type: ignore[arg-type]
    await asyncio.sleep(0.02)
    assert not waiting.done(), "one turn still waits for its first output"
    hub.started(second)  # type: ignore[arg-type]
    await asyncio.wait_for(waiting, 1)


async def test_after_starts_gives_up_after_its_limit() -> None:
    hub = TurnHub(fanout=False, idle_trim=None)
    hub.starting(object())  # type: ignore[arg-type]
    started = time.monotonic()
    await asyncio.wait_for(hub.after_starts(limit=0.05), 2)
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
