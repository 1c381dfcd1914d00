"""RetryingClient: 429/5xx before any output are retried with bounded backoff, never after
output began; cancellation during a wait; closing closes the attempt (docs/streaming.md "Retries")."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Mapping, Sequence

import pytest

from jxai_app.core.streaming.events import DeltaEvent, DoneEvent, ErrorEvent, StreamEvent, UsageEvent
from jxai_app.core.streaming.retry import RetryingClient, RetryPolicy, is_retryable

FAST = RetryPolicy(retries=2, base_delay=0.01, max_delay=0.02)


def err(code: str | None) -> ErrorEvent:
    return ErrorEvent(message=f"failed {code}", code=code)


class Scripted:
    """A client whose n-th call yields the n-th list of events; records closes."""

    def __init__(self, *attempts: Sequence[StreamEvent], hang_after: bool = False) -> None:
        self.attempts = list(attempts)
        self.calls = 0
        self.closed = 0
        self.hang_after = hang_after

    async def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Any, system_prompt: str | None, *,
                          signal: Any = None) -> AsyncIterator[StreamEvent]:
        events = self.attempts[self.calls]
        self.calls += 1
        try:
            for event in events:
                yield event
            if self.hang_after:
                await asyncio.sleep(3600)
        finally:
            self.closed += 1


async def collect(client: RetryingClient, signal: Any = None) -> list[StreamEvent]:
    return [e async for e in client.stream_chat([], [], "", signal=signal)]


@pytest.mark.parametrize(("code", "retryable"), [
    ("429", True), ("500", True), ("502", True), ("503", True), ("599", True), ("400", False), ("401", False),
    ("404", False), ("timeout", False), ("network_error", False), ("incomplete_stream", False), (None, False),
])
def test_which_errors_are_retried(code: str | None, retryable: bool) -> None:
    assert is_retryable(err(code)) is retryable
    assert not is_retryable(DeltaEvent(content="429"))


async def test_a_refusal_then_success_yields_only_the_success() -> None:
    inner = Scripted([err("429")], [err("503")], [DeltaEvent(content="hi"), DoneEvent(stop_reason="stop")])
    assert await collect(RetryingClient(inner, FAST)) == [DeltaEvent(content="hi"), DoneEvent(stop_reason="stop")]
    assert inner.calls == 3 and inner.closed == 3


async def test_retries_are_bounded_and_the_last_error_is_yielded() -> None:
    inner = Scripted([err("500")], [err("500")], [err("502")], [DeltaEvent(content="never")])
    retries: list[tuple[int, str | None, float]] = []
    client = RetryingClient(inner, FAST, on_retry=lambda n, e, d: retries.append((n, e.code, d)))
    assert await collect(client) == [err("502")]
    assert inner.calls == 3
    assert [(n, c) for n, c, _ in retries] == [(1, "500"), (2, "500")]
    assert all(0 < d <= 0.02 for _, _, d in retries)


async def test_nothing_is_retried_after_output_began() -> None:
    inner = Scripted([DeltaEvent(content="par"), err("500")], [DeltaEvent(content="never")])
    assert await collect(RetryingClient(inner, FAST)) == [DeltaEvent(content="par"), err("500")]
    assert inner.calls == 1


async def test_a_usage_first_stream_is_output_too() -> None:
    usage = UsageEvent(input_tokens=1, output_tokens=0)
    inner = Scripted([usage, DoneEvent(stop_reason="stop")])
    assert await collect(RetryingClient(inner, FAST)) == [usage, DoneEvent(stop_reason="stop")]


async def test_zero_retries_passes_the_first_error_through() -> None:
    inner = Scripted([err("429")], [DeltaEvent(content="never")])
    assert await collect(RetryingClient(inner, RetryPolicy(retries=0))) == [err("429")]


async def test_a_cancel_during_the_backoff_ends_at_once_with_done_cancelled() -> None:
    inner = Scripted([err("429")], [DeltaEvent(content="never")])
    signal = asyncio.Event()
    client = RetryingClient(inner, RetryPolicy(retries=1, base_delay=30, max_delay=30, jitter=0))
    asyncio.get_running_loop().call_later(0.05, signal.set)
    started = time.monotonic()
    assert await collect(client, signal) == [DoneEvent(stop_reason="cancelled")]
    assert time.monotonic() - started < 1.0
    assert inner.calls == 1


async def test_a_set_signal_is_not_retried() -> None:
    signal = asyncio.Event()
    signal.set()
    inner = Scripted([err("429")], [DeltaEvent(content="never")])
    assert await collect(RetryingClient(inner, FAST), signal) == [err("429")]


async def test_closing_the_wrapper_closes_the_attempt_in_progress() -> None:
    inner = Scripted([DeltaEvent(content="a")], hang_after=True)
    stream = RetryingClient(inner, FAST).stream_chat([], [], "")
    assert await anext(stream) == DeltaEvent(content="a")
    await stream.aclose()
    assert inner.closed == 1


def test_the_backoff_doubles_up_to_the_ceiling() -> None:
    policy = RetryPolicy(retries=5, base_delay=0.5, max_delay=3.0, jitter=0.5)
    assert [policy.delay(n, lambda: 0.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert [policy.delay(n, lambda: 1.0) for n in range(1, 4)] == [0.25, 0.5, 1.0]
