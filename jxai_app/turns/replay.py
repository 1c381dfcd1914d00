"""The replay log of a running turn: every published event, kept compact.

A tab that subscribes mid-turn gets every event so far (``snapshot``); a tab that saw a gap
gets the events after its last sequence number (``replay``). The log answers both with the
exact items that were published (one item per ``seq``, never merged), but stores runs of
consecutive text fragments — ``delta``, ``reasoning``, or ``tool_call_delta`` of one call,
in one assistant message — as one string plus an array of end offsets (4 bytes a fragment),
so 5,000 one-character deltas cost about 25 KB instead of several hundred.

Item shape (the protocol's, ``docs/websocket.md``)::

    {"seq": 7, "messageId": 42 | None, "event": {"type": "delta", "content": "Hi"}}
"""

from __future__ import annotations

import sys
from array import array
from typing import Any

__all__ = ["ReplayLog"]

_TEXT_MEMBER = {"delta": "content", "reasoning": "content", "tool_call_delta": "args"}
"""Event types whose fragments are merged in storage, and the member holding the text."""
_JOIN_EVERY = 32
"""Pending fragments are joined into the run's string this often (amortised appends)."""


class _Run:
    """Consecutive fragments of one kind, one message (and one call) with consecutive seqs."""

    __slots__ = ("first_seq", "message_id", "kind", "call_id", "text", "parts", "ends")

    def __init__(self, first_seq: int, message_id: int | None, kind: str, call_id: str | None) -> None:
        self.first_seq = first_seq
        self.message_id = message_id
        self.kind = kind
        self.call_id = call_id
        self.text = ""
        self.parts: list[str] = []
        self.ends = array("I")

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.ends) - 1

    def add(self, fragment: str) -> None:
        end = (self.ends[-1] if self.ends else 0) + len(fragment)
        self.ends.append(end)
        self.parts.append(fragment)
        if len(self.parts) >= _JOIN_EVERY:
            self.text += "".join(self.parts)
            self.parts.clear()

    def items(self, after_seq: int) -> list[dict[str, Any]]:
        if self.parts:
            self.text += "".join(self.parts)
            self.parts.clear()
        member = _TEXT_MEMBER[self.kind]
        out: list[dict[str, Any]] = []
        for index in range(max(0, after_seq - self.first_seq + 1), len(self.ends)):
            start = self.ends[index - 1] if index else 0
            event: dict[str, Any] = {"type": self.kind}
            if self.call_id is not None:
                event["id"] = self.call_id
            event[member] = self.text[start:self.ends[index]]
            out.append({"seq": self.first_seq + index, "messageId": self.message_id, "event": event})
        return out

    def size(self) -> int:
        return (sys.getsizeof(self) + sys.getsizeof(self.text) + sys.getsizeof(self.ends)
                + sum(map(sys.getsizeof, self.parts)) + sys.getsizeof(self.parts))


class ReplayLog:
    """Every item of one turn, in seq order, stored compactly (see module docstring).

    Items must be appended with consecutive ``seq`` starting at 1.
    """

    def __init__(self) -> None:
        self._entries: list[_Run | tuple[int, int | None, dict[str, Any]]] = []
        self._last_seq = 0

    @property
    def last_seq(self) -> int:
        """The highest seq appended (0 when empty)."""
        return self._last_seq

    def append(self, seq: int, message_id: int | None, event: dict[str, Any]) -> None:
        """Store one published item.

        Raises:
            ValueError: ``seq`` is not ``last_seq + 1``.
        """
        if seq != self._last_seq + 1:
            raise ValueError(f"replay log: seq {seq} after {self._last_seq}")
        self._last_seq = seq
        kind = event.get("type")
        member = _TEXT_MEMBER.get(kind) if isinstance(kind, str) else None
        text = event.get(member) if member else None
        if member is None or not isinstance(text, str):
            self._entries.append((seq, message_id, event))
            return
        call_id = event.get("id") if kind == "tool_call_delta" else None
        last = self._entries[-1] if self._entries else None
        if not (isinstance(last, _Run) and last.kind == kind and last.message_id == message_id
                and last.call_id == call_id):
            last = _Run(seq, message_id, str(kind), call_id if isinstance(call_id, str) else None)
            self._entries.append(last)
        last.add(text)

    def items_after(self, after_seq: int = 0) -> list[dict[str, Any]]:
        """The items with ``seq > after_seq``, in order, exactly as published."""
        out: list[dict[str, Any]] = []
        for entry in self._entries:
            if isinstance(entry, _Run):
                if entry.last_seq > after_seq:
                    out.extend(entry.items(after_seq))
            elif entry[0] > after_seq:
                out.append({"seq": entry[0], "messageId": entry[1], "event": entry[2]})
        return out

    def approx_bytes(self) -> int:
        """A rough size in bytes of what the log holds (runs measured, events estimated)."""
        total = sys.getsizeof(self._entries)
        for entry in self._entries:
            total += entry.size() if isinstance(entry, _Run) else 64 + sys.getsizeof(entry[2]) + 16 * len(entry[2])
        return total
