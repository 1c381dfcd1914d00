"""Turns waiting for their model's first output, and work that gives way to them (issue 4,
time to first token).

A turn's first moments decide its time to first token: the model request is built and
written, then the provider's answer read. Work that can come a little later — the user's
list notice to their other sockets, a socket's channel-layer group join (each a Redis round
trip with scale-out) — would otherwise share the event loop with that request.
:class:`StartingTurns` counts the worker's turns that wait for their first output, and
:meth:`StartingTurns.after` lets such work wait until none does, for at most
``START_QUIET_SECONDS``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

__all__ = ["START_QUIET_SECONDS", "StartingTurns"]

START_QUIET_SECONDS: Final[float] = 0.05
"""Longest wait of :meth:`StartingTurns.after`."""


class StartingTurns:
    """The set of this worker's turns that wait for their model's first output (one per
    hub, on its event loop)."""

    def __init__(self) -> None:
        self._turns: set[Any] = set()
        self._none = asyncio.Event()
        self._none.set()

    def add(self, turn: Any) -> None:
        """``turn``'s model request is on its way and its first output not yet here."""
        self._turns.add(turn)
        self._none.clear()

    def discard(self, turn: Any) -> None:
        """``turn`` got its first output, or is ending (no error if it was not counted)."""
        self._turns.discard(turn)
        if not self._turns:
            self._none.set()

    async def after(self, limit: float = START_QUIET_SECONDS) -> None:
        """Return once no counted turn waits for its first output, or after ``limit`` seconds."""
        if self._turns:
            try:
                await asyncio.wait_for(self._none.wait(), limit)
            except asyncio.TimeoutError:
                pass
