"""Cancellation and deadlines for network waits (docs/streaming.md "Cancellation";
timeouts: "The client interface").

A :class:`Guard` lives for one ``stream_chat`` call. One watcher task waits on the caller's
signal; when it fires, it expires the ``asyncio.timeout`` around the network wait in progress,
so a silent provider is abandoned at once (well within the 100 ms that docs/streaming.md
"Cancellation" promises) and the wait reports :class:`Cancelled` instead of a timeout. Waits
that reach their own deadline raise a ``timeout``
:class:`~jxai_app.core.streaming.fault.UpstreamFault` (problem ``upstream-timeout``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Awaitable, Final, Protocol, runtime_checkable

from jxai_app.core.streaming.fault import UpstreamFault

logger = logging.getLogger(__name__)

_POLL: Final[float] = 0.02
"""Seconds between looks at a signal whose ``wait()`` is not a coroutine (threading.Event)."""


@runtime_checkable
class Signal(Protocol):
    """A cancel signal: ``asyncio.Event`` or anything with ``is_set()`` and an async ``wait()``.

    A ``threading.Event`` (set from another thread) also works: its blocking ``wait()`` is
    never called; ``is_set()`` is polled every 20 ms instead."""

    def is_set(self) -> bool: ...

    def wait(self) -> Awaitable[Any]: ...


class Cancelled(Exception):
    """Internal: the signal was set; becomes ``done: cancelled`` at the boundary."""


class Guard:
    """Races network waits against the cancel signal and a deadline.

    One watcher task waits on the signal for the whole stream; when it fires it expires the
    ``asyncio.timeout`` around the wait in progress, so the wait ends at once and is reported
    as :class:`Cancelled` rather than a timeout.
    """

    __slots__ = ("signal", "_cm", "_task")

    def __init__(self, signal: Signal | None) -> None:
        self.signal = signal
        self._cm: asyncio.Timeout | None = None
        self._task: asyncio.Future[None] | None = None

    def start(self) -> None:
        if self.signal is not None and self._task is None:
            self._task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        signal = self.signal
        assert signal is not None
        try:
            if inspect.iscoroutinefunction(signal.wait):
                await signal.wait()
            else:  # e.g. threading.Event, whose wait() would block the loop: poll instead
                while not signal.is_set():
                    await asyncio.sleep(_POLL)
        except Exception:  # a broken signal must not take the stream down
            logger.exception("cancel signal wait() failed")
            return
        self.expire(asyncio.get_running_loop().time())

    def expire(self, when: float) -> None:
        """Move the deadline of the wait in progress (if any) to ``when`` (loop time)."""
        cm = self._cm
        if cm is not None and not cm.expired():
            try:
                cm.reschedule(when)
            except RuntimeError:  # already leaving the block
                pass

    @property
    def cancelled(self) -> bool:
        return self.signal is not None and self.signal.is_set()

    async def wait(self, awaitable: Awaitable[Any], when: float | None, message: str) -> Any:
        """Await ``awaitable`` until loop time ``when``; raise ``Cancelled`` when the signal is
        set, or a ``timeout`` fault (problem ``upstream-timeout``) with ``message`` at the deadline."""
        cm = asyncio.timeout_at(when)
        try:
            async with cm:
                self._cm = cm
                if self.cancelled:
                    cm.reschedule(asyncio.get_running_loop().time())
                return await awaitable
        except TimeoutError:
            if not cm.expired():
                raise
            if self.cancelled:
                raise Cancelled() from None
            raise UpstreamFault("timeout", message, slug="upstream-timeout") from None
        finally:
            self._cm = None

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
