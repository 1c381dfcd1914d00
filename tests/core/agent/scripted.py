"""Scripted fakes for the agent loop's tests: a client that plays rounds and records every
request, and a tool source with programmable tools. Real parts (the OpenAI client, the
tool registry) are exercised in their own tests in this directory."""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Sequence

from jxai_app.core.agent import AgentEvent, AgentPolicy, TurnEndEvent, run_turn
from jxai_app.core.streaming.events import (
    DeltaEvent, DoneEvent, ErrorEvent, StreamEvent, ToolCallDeltaEvent, ToolCallEndEvent, ToolCallStartEvent,
    UsageEvent, event_from_dict,
)
from jxai_app.core.tools import ToolContext


@dataclass(frozen=True)
class Sleep:
    """Script step: pause the stream."""

    seconds: float


@dataclass(frozen=True)
class Stop:
    """Script step: press Stop (set the turn's signal) at this point of the stream."""


@dataclass(frozen=True)
class Raise:
    """Script step: the client raises."""

    exc: BaseException


Step = StreamEvent | Sleep | Stop | Raise


def text_round(*parts: str, stop: str = "stop") -> list[Step]:
    """A round that answers with text."""
    return [*(DeltaEvent(content=p) for p in parts), DoneEvent(stop_reason=stop)]  # type: ignore[arg-type]


def call_events(call_id: str, name: str, *fragments: str, end: bool = True) -> list[Step]:
    """The events of one streamed tool call."""
    out: list[Step] = [ToolCallStartEvent(id=call_id, name=name)]
    out += [ToolCallDeltaEvent(id=call_id, args=f) for f in fragments]
    if end:
        out.append(ToolCallEndEvent(id=call_id))
    return out


def tool_round(*calls: tuple[str, str, str], stop: str = "tool_calls", text: str = "") -> list[Step]:
    """A round making calls ``(id, name, arguments)``, optionally after some text."""
    out: list[Step] = [DeltaEvent(content=text)] if text else []
    for call_id, name, args in calls:
        out += call_events(call_id, name, args)
    out.append(DoneEvent(stop_reason=stop))  # type: ignore[arg-type]
    return out


def step_from_json(item: Mapping[str, Any]) -> Step:
    """A script step from a fixture: an event's wire form, ``{"type":"_stop"}`` or
    ``{"type":"_sleep","seconds":s}``."""
    if item.get("type") == "_stop":
        return Stop()
    if item.get("type") == "_sleep":
        return Sleep(float(item["seconds"]))
    return event_from_dict(dict(item))


class ScriptedClient:
    """Plays one scripted round per request and records each request (deep copies).

    Like the real clients, once the signal is set it yields only ``done: cancelled``
    (unless ``honour_signal=False``); with the script exhausted it answers an error.
    """

    def __init__(self, rounds: Sequence[Sequence[Step] | Callable[[list[dict[str, Any]]], Sequence[Step]]],
                 *, honour_signal: bool = True) -> None:
        self.rounds = list(rounds)
        self.requests: list[dict[str, Any]] = []
        self.honour_signal = honour_signal
        self.closed = 0

    async def stream_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], system_prompt: str,
                          *, signal: Any = None) -> AsyncIterator[StreamEvent]:
        self.requests.append({"messages": copy.deepcopy(messages), "tools": copy.deepcopy(tools),
                              "system_prompt": system_prompt, "raw_messages": messages})
        try:
            if signal is not None and signal.is_set() and self.honour_signal:
                yield DoneEvent(stop_reason="cancelled")
                return
            index = len(self.requests) - 1
            if index >= len(self.rounds):
                yield ErrorEvent(message=f"no script for request {index + 1}", code="test")
                return
            script = self.rounds[index]
            steps = script(messages) if callable(script) else script
            for step in steps:
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    continue
                if isinstance(step, Stop):
                    signal.set()
                    continue
                if isinstance(step, Raise):
                    raise step.exc
                if signal is not None and signal.is_set() and self.honour_signal:
                    yield DoneEvent(stop_reason="cancelled")
                    return
                yield step
        finally:
            self.closed += 1

    def sent(self, n: int) -> list[dict[str, Any]]:
        """The messages of request ``n`` (0-based)."""
        return self.requests[n]["messages"]


ToolFn = Callable[[dict[str, Any], ToolContext], Any]


@dataclass
class FakeTools:
    """A tool source: ``fns[name](args, context)`` (sync or async) returns the result dict.

    Unknown names answer like the registry (``Unknown tool: "<name>"``). Records every
    execution as ``(name, arguments_json, context)`` and counts listings."""

    fns: dict[str, ToolFn] = field(default_factory=dict)
    executed: list[tuple[str, str, ToolContext]] = field(default_factory=list)
    listings: int = 0
    names_by_listing: list[list[str]] | None = None

    def list_for_llm(self) -> list[dict[str, Any]]:
        self.listings += 1
        names = list(self.fns)
        if self.names_by_listing is not None:
            names = self.names_by_listing[min(self.listings, len(self.names_by_listing)) - 1]
        return [{"type": "function", "function": {"name": n, "description": f"The {n} tool.",
                                                  "parameters": {"type": "object", "properties": {}}}}
                for n in names]

    async def execute(self, name: str, arguments_json: str, context: Any) -> Mapping[str, Any]:
        self.executed.append((name, arguments_json, context))
        fn = self.fns.get(name)
        if fn is None:
            return {"success": False, "error": f'Unknown tool: "{name}"'}
        out = fn(json.loads(arguments_json), context)
        if isinstance(out, Awaitable):
            out = await out
        return out  # type: ignore[no-any-return]


def ok(data: Any = None, summary: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"success": True, "data": data}
    if summary is not None:
        out["summary"] = summary
    return out


@dataclass
class Turn:
    """A finished turn: every event, the final one, and the pieces tests look at."""

    events: list[AgentEvent]

    @property
    def end(self) -> TurnEndEvent:
        last = self.events[-1]
        assert isinstance(last, TurnEndEvent)
        return last

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


def context_factory_for(signal: asyncio.Event | None, seen: list[tuple[str, str]] | None = None
                        ) -> Callable[[str, str], ToolContext]:
    def factory(call_id: str, name: str) -> ToolContext:
        if seen is not None:
            seen.append((call_id, name))
        return ToolContext(user="alice", conversation_id=7, call_id=call_id, signal=signal, model="m")
    return factory


async def play(client: Any, tools: Any = None, *, history: Sequence[dict[str, Any]] | None = None,
               policy: AgentPolicy = AgentPolicy(), signal: asyncio.Event | None = None,
               system_prompt: str = "You are helpful.", factory: Callable[[str, str], ToolContext] | None = None,
               ) -> Turn:
    """Run one turn to its end and collect the events."""
    signal = signal if signal is not None else asyncio.Event()
    events = [ev async for ev in run_turn(
        client=client, tools=tools, history=list(history or [{"role": "user", "content": "hi"}]),
        system_prompt=system_prompt, policy=policy, signal=signal,
        context_factory=factory or context_factory_for(signal))]
    return Turn(events)


def usage(i: int, o: int) -> UsageEvent:
    return UsageEvent(input_tokens=i, output_tokens=o)
