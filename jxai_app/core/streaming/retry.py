"""Retry a provider's 429 and 5xx answers that arrive before any output (docs/streaming.md "Retries").

Framework-free. :class:`RetryingClient` wraps any streaming client (docs/streaming.md "The client
interface"). Each
attempt's **first** event decides: an ``error`` whose ``code`` is an HTTP status of 429 or
5xx means the provider refused before producing anything, so the attempt is dropped (its
stream closed) and, after a bounded exponential backoff with jitter, a fresh attempt is
made; anything else is passed through and the wrapper never retries again (a retry after
output began would duplicate text the caller has already shown). The wrapper yields nothing
for a dropped attempt, so the caller sees one ordinary stream. When the retries are used up
the last attempt's ``error`` is yielded as is.

The cancel signal is honoured during the backoff (``done: cancelled`` at once), and closing
the wrapper's iterator closes the attempt in progress and so its upstream connection.
"""

from __future__ import annotations

import asyncio
import random
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

from jxai_app.core.streaming.base import ChatClient, Signal
from jxai_app.core.streaming.events import DoneEvent, ErrorEvent, StreamEvent
from jxai_app.core.streaming.wrapper import WrapperClient

__all__ = ["RetryPolicy", "RetryingClient", "is_retryable"]


def is_retryable(event: StreamEvent) -> bool:
    """True for an ``error`` event whose ``code`` is the HTTP status 429 or 500 … 599.

    Only non-2xx answers carry a numeric code (docs/streaming.md "Errors and their codes"); timeouts, network
    failures and errors inside a 200 stream are not retried here.
    """
    if type(event) is not ErrorEvent or not event.code or not event.code.isdigit():
        return False
    status = int(event.code)
    return status == 429 or 500 <= status <= 599


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait.

    Attributes:
        retries: extra attempts after the first (0 disables retrying).
        base_delay: seconds before the first retry; doubled for each further one.
        max_delay: upper bound of one wait, in seconds.
        jitter: share of each wait that is random (0.5: a wait of ``d`` lies in ``[d/2, d]``).
    """

    retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.5

    def delay(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** (retry - 1))
        return max(0.0, ceiling * (1.0 - self.jitter * rand()))


async def _pause(seconds: float, signal: Signal | None) -> bool:
    """Sleep ``seconds``; True when the signal was set meanwhile (or already)."""
    if signal is None:
        await asyncio.sleep(seconds)
        return False
    if signal.is_set():
        return True
    try:
        async with asyncio.timeout(seconds):
            await signal.wait()
    except TimeoutError:
        pass
    return signal.is_set()


class RetryingClient(WrapperClient):
    """A streaming client that retries 429/5xx refusals made before any output.

    Args:
        inner: the client to call (anything with ``stream_chat``, docs/streaming.md "The client interface").
        policy: retries and backoff.
        on_retry: optional ``on_retry(retry_number, error_event, delay_seconds)`` hook
            (logging, metrics); exceptions from it are not caught.
        rand: random source in ``[0, 1)`` for the jitter (tests pass a constant).
    """

    def __init__(self, inner: ChatClient, policy: RetryPolicy | None = None, *,
                 on_retry: Callable[[int, ErrorEvent, float], None] | None = None,
                 rand: Callable[[], float] = random.random) -> None:
        super().__init__(inner)
        self.policy = policy or RetryPolicy()
        self.on_retry = on_retry
        self._rand = rand

    async def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                          system_prompt: str | None, *, signal: Signal | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one answer like the inner client, retrying refusals before output.

        Yields:
            The events of the one attempt that was not retried, ending with exactly one
            ``done`` or ``error`` (``done: cancelled`` when the signal is set during a wait).
        """
        retry = 0
        while True:
            attempt = self.inner_stream(messages, tools, system_prompt, signal=signal)
            async with aclosing(attempt) as events:
                first = await anext(events, None)
                if first is None:
                    return
                if not (retry < self.policy.retries and is_retryable(first)
                        and not (signal is not None and signal.is_set())):
                    yield first
                    if type(first) is DoneEvent or type(first) is ErrorEvent:
                        return
                    async for event in events:
                        yield event
                    return
            retry += 1
            delay = self.policy.delay(retry, self._rand)
            if self.on_retry is not None:
                assert type(first) is ErrorEvent
                self.on_retry(retry, first, delay)
            if await _pause(delay, signal):
                yield DoneEvent(stop_reason="cancelled")
                return
