"""Assembling a round's assistant wire message from its stream events (docs/agent.md "The round's assistant message")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jxai_app.core.streaming.events import (
    DeltaEvent, DoneEvent, ErrorEvent, ReasoningEvent, StreamEvent, ToolCallDeltaEvent,
    ToolCallStartEvent, UsageEvent,
)

__all__ = ["Call", "RoundAssembly"]


@dataclass
class Call:
    """One tool call as streamed in a round."""

    id: str
    """The id on the wire: the streamed id, or ``<id>_dup<k>`` for a repeated one."""
    name: str
    """The function name (``""`` when the stream never named it)."""
    streamed_id: str
    """The id the stream used."""
    duplicate: bool = False
    """True when an earlier call of the round already used ``streamed_id`` (never run)."""
    cut: bool = False
    """True when the round ended at the length limit (``done: length``): arguments that do not
    parse were cut off, not written wrong (docs/agent.md "Tool calls")."""
    parts: list[str] = field(default_factory=list)
    """Argument fragments in arrival order."""

    @property
    def arguments(self) -> str:
        """The concatenated argument text, exactly as streamed."""
        return "".join(self.parts)


class RoundAssembly:
    """Builds the assistant message from one round's events."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] | None = None
        self.calls: list[Call] = []
        self.latest: dict[str, Call] = {}
        self.terminal: DoneEvent | ErrorEvent | None = None
        self.usage: UsageEvent | None = None

    def feed(self, ev: StreamEvent) -> None:
        """Take one event. A delta for a call never started opens a nameless call (the
        text is never dropped); deltas go to the latest call started with their id."""
        if isinstance(ev, DeltaEvent):
            self.text.append(ev.content)
        elif isinstance(ev, ReasoningEvent):
            (self.reasoning if self.reasoning is not None else self._start_reasoning()).append(ev.content)
        elif isinstance(ev, ToolCallStartEvent):
            self._open(ev.id, ev.name)
        elif isinstance(ev, ToolCallDeltaEvent):
            (self.latest.get(ev.id) or self._open(ev.id, "")).parts.append(ev.args)
        elif isinstance(ev, UsageEvent):
            self.usage = ev
        elif isinstance(ev, (DoneEvent, ErrorEvent)):
            self.terminal = ev

    def _start_reasoning(self) -> list[str]:
        self.reasoning = []
        return self.reasoning

    def _open(self, streamed_id: str, name: str) -> Call:
        call = Call(id=streamed_id, name=name, streamed_id=streamed_id)
        if streamed_id in self.latest:
            taken = {c.id for c in self.calls}
            k = 1
            while f"{streamed_id}_dup{k}" in taken:
                k += 1
            call.id, call.duplicate = f"{streamed_id}_dup{k}", True
        self.calls.append(call)
        self.latest[streamed_id] = call
        return call

    def message(self) -> dict[str, Any] | None:
        """The assistant wire message, or ``None`` when the round drew nothing at all.

        Shape (docs/store.md "The OpenAI wire export"): ``{"role": "assistant", "content": text | None
        [, "reasoning_content": …][, "tool_calls": [{"id", "type": "function",
        "function": {"name", "arguments"}}]]}``; ``content`` is ``None`` only when the round
        made calls and wrote no text; ``reasoning_content`` only when reasoning streamed.
        """
        text = "".join(self.text)
        if not text and self.reasoning is None and not self.calls:
            return None
        msg: dict[str, Any] = {"role": "assistant", "content": text if text or not self.calls else None}
        if self.reasoning is not None:
            msg["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in self.calls]
        return msg
