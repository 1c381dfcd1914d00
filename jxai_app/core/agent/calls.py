"""Running one round's tool calls: parsing, execution, results in call order (docs/agent.md "Tool calls")."""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import aclosing
from dataclasses import dataclass, field
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from jxai_app.core.agent.assembly import Call
from jxai_app.core.agent.base import AgentPolicy, ContextFactory, ToolSource
from jxai_app.core.agent.events import Decision, ToolResultEvent, ToolStartEvent
from jxai_app.core.tools.invoke import parse_arguments

__all__ = ["CUT_OFF", "NOT_RUN", "Tally", "cut_off", "needs_approval", "over_cap", "run_calls", "run_decided"]

NOT_RUN = "Not run: the turn was stopped before this call started."
"""Error text of a call skipped because Stop arrived first."""
CUT_OFF = ("Not run: the model's reply ended before this call's arguments were complete (cut off at its "
           "length limit), so nothing was done. Ask again, perhaps for something shorter.")
"""Error text of a call whose arguments were cut off unfinished (model- and user-visible)."""


def over_cap(asked: int, cap: int) -> str:
    """Error text of a call past ``max_tool_calls_per_round`` (model- and user-visible)."""
    return (f"Not run: this reply asked for {asked} tool calls and at most {cap} run in one round; "
            "ask for fewer at a time.")


def _failed(error: str) -> dict[str, Any]:
    return {"success": False, "error": error}


async def execute_call(call: Call, tools: ToolSource | None, context_factory: ContextFactory,
                       timeout: float | None) -> dict[str, Any]:
    """Handle one call; never raises (docs/agent.md "Tool calls", "Execution never raises").

    Empty argument text means ``{}``; text that does not parse, or JSON that is not an
    object, never reaches the tools (``Failed to parse arguments: …``, or :data:`CUT_OFF` for
    text that is only the start of a JSON document, or a call of a round cut at the length
    limit: :func:`cut_off`). A registry that
    raises, times out (``timeout`` seconds, ``None`` for none), or returns something that
    is not ``{"success": bool, …}`` or cannot be serialised gives a failed result.

    Returns:
        The result normalised by a JSON round trip: ``{"success": True, "data": …}`` or
        ``{"success": False, "error": "<sentence>"}``.
    """
    if call.duplicate:
        return _failed(f'Duplicate tool call id "{call.streamed_id}" in one reply: this call was not run.')
    text = call.arguments if call.arguments.strip() else "{}"
    parsed = parse_arguments(text, sys.maxsize)  # the registry bounds the length itself
    if isinstance(parsed, str):
        return _failed(CUT_OFF if call.cut or cut_off(text) else parsed)
    if tools is None:
        return _failed(f'Unknown tool: "{call.name}"')
    try:
        context = context_factory(call.id, call.name)
        pending = tools.execute(call.name, text, context)
        result = await (asyncio.wait_for(pending, timeout) if timeout else pending)
    except asyncio.TimeoutError:
        return _failed(f'Tool "{call.name}" timed out after {timeout:g} seconds')
    except Exception as exc:  # the registry should never raise; if it does, the model hears it
        return _failed(f'Tool "{call.name}" execution error: {exc}')
    if not isinstance(result, Mapping) or not isinstance(result.get("success"), bool):
        return _failed(f'Tool "{call.name}" returned a malformed result (expected {{"success": true|false, …}}).')
    try:
        return dict(json.loads(json.dumps(result, ensure_ascii=False, allow_nan=False)))
    except (TypeError, ValueError, RecursionError) as exc:
        return _failed(f'Tool "{call.name}" returned a result that cannot be serialized: {exc}')


def cut_off(text: str) -> bool:
    """Whether argument text that does not parse is the start of a JSON document that ended too
    early (``{"text": "Buy mi``, ``{"a": 1``) rather than text written wrong (docs/agent.md "Tool
    calls"): the decoder stopped in an unterminated string or at the very end of the text.
    llama-cpp-python reports ``tool_calls`` for a forced call the token limit cut, so the text is
    the only witness."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc.msg.startswith("Unterminated string") or exc.pos >= len(text.rstrip())
    return False


def needs_approval(call: Call, tools: ToolSource | None) -> bool:
    """Whether ``call`` waits for a person's approval (docs/agent.md "Approval"): its tool is
    offered and requires approval, and its arguments parse (a call that would fail anyway,
    or a duplicate, is answered at once). A ``requires_approval`` that raises counts as yes."""
    ask = getattr(tools, "requires_approval", None)
    if call.duplicate or ask is None:
        return False
    if isinstance(parse_arguments(call.arguments if call.arguments.strip() else "{}", sys.maxsize), str):
        return False
    try:
        return bool(ask(call.name))
    except Exception:
        return True


def tool_message(call_id: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tool`` wire message for a result: content is compact JSON, raw UTF-8."""
    content = json.dumps(result, separators=(",", ":"), ensure_ascii=False)
    return {"role": "tool", "tool_call_id": call_id, "content": content}


@dataclass
class Tally:
    """What one round's calls did, for the budget and the cap text."""

    handled: bool = False
    done: list[tuple[int, str]] = field(default_factory=list)
    """(call index, summary) of successful calls."""
    errors: list[tuple[int, str]] = field(default_factory=list)
    """(call index, error text) of failed calls."""


async def run_calls(calls: list[Call], tools: ToolSource | None, context_factory: ContextFactory,
                    policy: AgentPolicy, stopped: Callable[[], bool], tally: Tally, *, held: int = 0
                    ) -> AsyncGenerator[ToolStartEvent | ToolResultEvent, None]:
    """Run one round's calls, at most ``tool_concurrency`` at a time; Stop is checked as each
    call acquires its slot (a call not started when Stop arrives gets :data:`NOT_RUN` at once;
    a running one finishes). Calls past ``max_tool_calls_per_round`` never run: each gets the
    failed result :func:`over_cap` at once. ``held``: calls of the round left out of ``calls``
    because they wait for approval, all within the cap (they count toward it; docs/agent.md
    "Tool calls"). Yields ``tool_start`` as calls start and ``tool_result`` in call order.
    Closing the iterator early cancels the calls still running."""
    queue: asyncio.Queue[tuple[int, dict[str, Any] | None]] = asyncio.Queue()
    slots = asyncio.Semaphore(policy.tool_concurrency)
    cap = policy.max_tool_calls_per_round
    limit = cap - held

    async def run(index: int, call: Call) -> None:
        if index >= limit:
            queue.put_nowait((index, _failed(over_cap(len(calls) + held, cap))))
            return
        async with slots:
            if stopped():
                queue.put_nowait((index, _failed(NOT_RUN)))
                return
            queue.put_nowait((index, None))
            result = await execute_call(call, tools, context_factory, policy.tool_timeout)
            tally.handled = True
            if result["success"]:
                summary = result.get("summary")
                tally.done.append((index, summary if isinstance(summary, str) and summary else f"Ran {call.name}"))
            else:
                tally.errors.append((index, str(result.get("error"))))
            queue.put_nowait((index, result))

    tasks = [asyncio.create_task(run(i, c)) for i, c in enumerate(calls)]
    results: list[dict[str, Any] | None] = [None] * len(calls)
    emitted = 0
    try:
        while emitted < len(calls):
            index, result = await queue.get()
            call = calls[index]
            if result is None:
                yield ToolStartEvent(call_id=call.id, name=call.name, arguments=call.arguments)
                continue
            results[index] = result
            while emitted < len(calls) and (ready := results[emitted]) is not None:
                done_call = calls[emitted]
                yield ToolResultEvent(call_id=done_call.id, name=done_call.name, success=bool(ready["success"]),
                                      result=ready, message=tool_message(done_call.id, ready))
                emitted += 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_decided(decisions: list[Decision], tools: ToolSource | None, context_factory: ContextFactory,
                      policy: AgentPolicy, stopped: Callable[[], bool], tally: Tally
                      ) -> AsyncGenerator[ToolStartEvent | ToolResultEvent, None]:
    """Answer the paused calls of a resumed turn (docs/agent.md "Approval"): each refused one
    at once with its failed result, then the approved ones run as any round's calls do
    (:func:`run_calls`: caps, concurrency, Stop)."""
    for decision in decisions:
        if not decision.approved:
            result = _failed(decision.refusal)
            tally.errors.append((-1, decision.refusal))
            yield ToolResultEvent(call_id=decision.call_id, name=decision.name, success=False, result=result,
                                  message=tool_message(decision.call_id, result))
    approved = [Call(id=d.call_id, name=d.name, streamed_id=d.call_id, parts=[d.arguments])
                for d in decisions if d.approved]
    if approved:
        async with aclosing(run_calls(approved, tools, context_factory, policy, stopped, tally)) as events:
            async for event in events:
                yield event
