"""The in-memory buffer of one streaming round (memory only, never touches the database).

The turn runner appends fragments on its event loop while a flush may read the buffer in a
worker thread (``sync_to_async``); one lock guards the lists. Text is kept as a
list of fragments and compacted to one string on each read, so appending stays O(1).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone


@dataclass(slots=True)
class PendingCall:
    """A tool call of the streaming round, saved when the round finishes."""

    call_id: str
    """The provider's call id."""
    name: str
    """Function name (``""`` when the provider never named it)."""
    started_at: datetime
    """When ``tool_call_start`` arrived."""
    parts: list[str] = field(default_factory=list)
    """Argument fragments in arrival order."""
    ended: bool = False
    """``tool_call_end`` arrived (a length cut-off leaves it False)."""

    @property
    def arguments(self) -> str:
        """The argument text so far."""
        return "".join(self.parts)


class RoundBuffer:
    """Text, reasoning and calls of the round in flight."""

    __slots__ = ("lock", "text", "reasoning", "calls", "dirty")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.text: list[str] = []
        self.reasoning: list[str] | None = None
        """``None`` until a reasoning fragment arrives (CS-31: replayed only where streamed)."""
        self.calls: dict[str, PendingCall] = {}
        self.dirty = False
        """Text or reasoning arrived since the last :meth:`take_text`."""

    def add_text(self, content: str) -> None:
        with self.lock:
            self.text.append(content)
            self.dirty = True

    def add_reasoning(self, content: str) -> None:
        with self.lock:
            if self.reasoning is None:
                self.reasoning = []
            self.reasoning.append(content)
            self.dirty = True

    def start_call(self, call_id: str, name: str) -> None:
        """Open a call; a repeated start of an open id is ignored (one call, RP-10)."""
        with self.lock:
            if call_id not in self.calls:
                self.calls[call_id] = PendingCall(call_id=call_id, name=name, started_at=timezone.now())

    def add_args(self, call_id: str, args: str) -> None:
        """Append an argument fragment; unknown ids are ignored (CS-8)."""
        with self.lock:
            call = self.calls.get(call_id)
            if call is not None:
                call.parts.append(args)

    def end_call(self, call_id: str) -> None:
        with self.lock:
            call = self.calls.get(call_id)
            if call is not None:
                call.ended = True

    def _joined(self) -> tuple[str, str | None]:
        """Join and compact the lists, mark clean; call with the lock held."""
        text = "".join(self.text)
        self.text = [text] if text else []
        reasoning = None if self.reasoning is None else "".join(self.reasoning)
        if reasoning is not None:
            self.reasoning = [reasoning] if reasoning else []
        self.dirty = False
        return text, reasoning

    def take_text(self) -> tuple[str, str | None]:
        """``(text, reasoning)`` so far; compacts the lists and marks the buffer clean."""
        with self.lock:
            return self._joined()

    def close(self) -> tuple[str, str | None, list[PendingCall]]:
        """Text, reasoning and calls at the round's end, then empty (one critical section)."""
        with self.lock:
            text, reasoning = self._joined()
            calls = list(self.calls.values())
            self.text, self.reasoning, self.calls = [], None, {}
            return text, reasoning, calls

    def clear(self) -> None:
        with self.lock:
            self.text, self.reasoning, self.calls, self.dirty = [], None, {}, False

    def snapshot(self) -> dict[str, Any]:
        """``{"content", "reasoning", "toolCalls": [{"id", "name", "arguments"}]}`` so far."""
        with self.lock:
            return {
                "content": "".join(self.text),
                "reasoning": None if self.reasoning is None else "".join(self.reasoning),
                "toolCalls": [{"id": c.call_id, "name": c.name, "arguments": c.arguments}
                              for c in self.calls.values()],
            }
