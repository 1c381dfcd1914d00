"""Giving a response's connection back (or closing it) without ever interrupting httpcore's
close, so that a worker's memory returns to its baseline after a load round (docs/streaming.md
"Connections").

httpcore 1.0 keeps every request of a pool in a list until the response's stream is closed
(``PoolByteStream.aclose``), and removes it only after the connection's own close has
finished. A cancellation that lands *inside* that close (at one of anyio's checkpoints)
skips the removal: the request, its connection, the socket and their buffers stay in the
pool for the life of the process. A deadline implemented with ``asyncio.timeout`` around the
read of an answer's last chunk does exactly that when the chunk is late and the provider
closes the connection at the end of the body (the close runs inside that read). Under load
(``bench/e2e.py``, 500 streams) about two in three streams would leak this way.

So a response is finished here without cancelling anything inside httpcore:

- the end of a complete pooled answer is read in a task of its own, which is never
  cancelled; if it has not ended within :data:`DRAIN_SECONDS`, the response is closed from
  here (the reader's read then fails and the reader ends);
- the close itself runs in a shielded task, so a cancellation of the caller (Stop, a
  timeout, a worker shutting down) cannot land inside it either.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Final

import httpx

__all__ = ["DRAIN_SECONDS", "finish_response"]

logger = logging.getLogger(__name__)

DRAIN_SECONDS: Final[float] = 0.25
"""After a pooled answer's last event, how long its body's end (the last chunk) may take to
arrive before the connection is closed instead of going back to the pool."""

_background: set[asyncio.Task[Any]] = set()
"""Strong references to readers and closes that outlive their caller (asyncio keeps only
weak ones)."""


def _keep(task: asyncio.Task[Any]) -> asyncio.Task[Any]:
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


async def _read_to_end(rest: AsyncIterator[Any]) -> None:
    """Read what is left of an answer and drop it; a failure only means the connection is
    closed rather than reused."""
    try:
        async for _ in rest:
            pass
    except Exception as exc:  # detached: nothing may escape unretrieved
        logger.debug("pooled answer not read to its end (%s); its connection is closed", type(exc).__name__)


async def finish_response(response: httpx.Response, rest: AsyncIterator[Any] | None = None) -> None:
    """Close ``response``; first, when ``rest`` is given (the remaining batches of a complete
    answer on a pooled connection), read it to its end for up to :data:`DRAIN_SECONDS` so
    httpcore can keep the connection. See the module docstring for why nothing here is
    ever cancelled mid-way.

    Raises:
        asyncio.CancelledError: the caller was cancelled; the close still completes in the
            background.
    """
    try:
        if rest is not None:
            reader = _keep(asyncio.ensure_future(_read_to_end(rest)))
            await asyncio.wait({reader}, timeout=DRAIN_SECONDS)
    finally:
        await asyncio.shield(_keep(asyncio.ensure_future(_close(response))))


async def _close(response: httpx.Response) -> None:
    try:
        await response.aclose()
    except Exception as exc:  # a broken connection is closed all the same
        logger.debug("closing a provider response failed (%s)", type(exc).__name__)
