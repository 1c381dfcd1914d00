"""The turn loop itself: rounds of one model request each, tool calls in between (docs/agent.md "Rounds").

See :mod:`jxai_app.core.agent` for the rules.
"""

from __future__ import annotations

import inspect
from contextlib import aclosing
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal

from jxai_app.core.agent.assembly import RoundAssembly
from jxai_app.core.agent.base import AgentPolicy, ChatClient, ContextFactory, Signal, ToolSource
from jxai_app.core.agent.calls import NOT_RUN, Tally, needs_approval, run_calls, run_decided, tool_message
from jxai_app.core.agent.events import (
    AgentEvent, Decision, Outcome, RoundEndEvent, RoundStartEvent, ToolApprovalRequestEvent, ToolResultEvent,
    TurnEndEvent, TurnUsage,
)
from jxai_app.core.problems import problem
from jxai_app.core.repair import is_empty_assistant, repair_history
from jxai_app.core.streaming.events import (
    DeltaEvent, DoneEvent, ErrorEvent, ReasoningEvent, ToolCallDeltaEvent, ToolCallEndEvent,
    ToolCallStartEvent, UsageEvent,
)

__all__ = ["EMPTY_REPLY", "STOPPED", "cap_text", "run_turn"]

EMPTY_REPLY = "The model sent back an empty reply."
"""``turn_end.message`` of an ``empty`` turn (docs/agent.md "How a turn ends")."""
STOPPED = "The turn was stopped."
"""``turn_end.message`` of a ``cancelled`` turn."""

_STREAM_TYPES = (DeltaEvent, ReasoningEvent, ToolCallStartEvent, ToolCallDeltaEvent, ToolCallEndEvent,
                 UsageEvent, DoneEvent, ErrorEvent)


def cap_text(*, budget: Literal["tool_rounds", "rounds"], limit: int, done: Sequence[str],
             errors: Sequence[str]) -> str:
    """The message for a turn that ran out of budget (docs/agent.md "Budgets"; model- and user-visible).

    Args:
        budget: which budget ran out. limit: its size.
        done: summaries of successful calls. errors: error texts of failed calls.
            Both are de-duplicated in first-seen order.
    """
    what = "tool-call rounds" if budget == "tool_rounds" else "model rounds"
    text = f"I ran out of {what} ({limit}) before finishing."
    if done:
        text += "\n\nDone so far:\n- " + "\n- ".join(dict.fromkeys(done))
    if errors:
        text += "\n\nErrors encountered:\n- " + "\n- ".join(dict.fromkeys(errors))
    return text + "\n\nYou can continue by sending another message, or try a more specific request."


def _drawn_since_last_user(history: Sequence[Any]) -> bool:
    """Whether something was drawn before this turn: a non-empty assistant message after the last
    user message (or anywhere, with none) (docs/agent.md "How a turn ends")."""
    for message in reversed(history):
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "user":
            return False
        if message.get("role") == "assistant" and not is_empty_assistant(message):
            return True
    return False


def _internal_error(what: str, exc: BaseException) -> ErrorEvent:
    detail = f"{what} failed unexpectedly ({type(exc).__name__})."
    return ErrorEvent(message=detail, code="internal_error", problem=problem("internal-error", detail))


# -- the loop -------------------------------------------------------------------------------
async def run_turn(*, client: ChatClient, tools: ToolSource | None, history: Sequence[dict[str, Any]],
                   system_prompt: str, policy: AgentPolicy = AgentPolicy(), signal: Signal | None = None,
                   context_factory: ContextFactory, decided: Sequence[Decision] = ()) -> AsyncIterator[AgentEvent]:
    """Run one turn of the agent loop (see the module docstring for every rule).

    Args:
        client: the streaming client; ``client.stream_chat`` is looked up afresh each round.
        tools: the registry or gated view (``None``: no tools); its listing is re-read each round.
        history: OpenAI wire-shape messages so far, ending with the new user message. Not mutated.
        system_prompt: passed to the client unchanged.
        policy: budgets and tool concurrency.
        signal: the turn's Stop signal (``asyncio.Event`` or anything with ``is_set()``).
        context_factory: ``(call_id, name) -> ToolContext`` for each call that runs.
        decided: resuming a paused turn (docs/agent.md "Approval"): the decisions on the calls
            the history left waiting; they are answered (approved ones run) before the first
            round, whose request then carries their results.

    Yields:
        The client's events as they arrive, plus :data:`LoopEvent` s; the last event is one
        :class:`TurnEndEvent`. Never raises (except the caller's own task cancellation).
    """
    stopped: Callable[[], bool] = (lambda: False) if signal is None else signal.is_set
    appended: list[dict[str, Any]] = []
    usage = {"input": 0, "output": 0, "rounds": 0, "tool_rounds": 0}
    last_usage: UsageEvent | None = None
    done: list[str] = []
    errors: list[str] = []
    drawn = _drawn_since_last_user(history)

    def end(outcome: Outcome, message: str | None) -> TurnEndEvent:
        return TurnEndEvent(outcome=outcome, message=message, appended=tuple(appended), usage=TurnUsage(
            input_tokens=usage["input"], output_tokens=usage["output"], rounds=usage["rounds"],
            tool_rounds=usage["tool_rounds"], last=last_usage))

    if decided:
        tally = Tally()
        async with aclosing(run_decided(list(decided), tools, context_factory, policy, stopped, tally)) as answers:
            async for item in answers:
                if isinstance(item, ToolResultEvent):
                    appended.append(item.message)
                yield item
        done += [text for _, text in sorted(tally.done)]
        errors += [text for _, text in sorted(tally.errors)]

    while True:
        if stopped():
            yield end("cancelled", STOPPED)
            return
        if usage["rounds"] >= policy.max_rounds or usage["tool_rounds"] >= policy.max_tool_rounds:
            by_tools = usage["tool_rounds"] >= policy.max_tool_rounds
            text = cap_text(budget="tool_rounds" if by_tools else "rounds",
                            limit=policy.max_tool_rounds if by_tools else policy.max_rounds,
                            done=done, errors=errors)
            if not done:
                yield end("cap_failed", text)
                return
            appended.append({"role": "assistant", "content": text})
            yield end("cap_partial", text)
            return

        usage["rounds"] += 1
        number = usage["rounds"]
        yield RoundStartEvent(round=number)
        current = RoundAssembly()
        stream: Any = None
        try:
            messages = repair_history([*history, *appended]).messages
            listing = list(tools.list_for_llm()) if tools is not None else []
            stream = client.stream_chat(messages, listing, system_prompt, signal=signal)
            if inspect.isawaitable(stream):
                stream = await stream
            async for ev in stream:
                if not isinstance(ev, _STREAM_TYPES):
                    continue  # unknown event types are ignored (docs/agent.md "Rounds")
                current.feed(ev)
                yield ev
                if current.terminal is not None:
                    break
        except Exception as exc:
            failure = _internal_error("The model request", exc)
            current.feed(failure)
            yield failure
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                try:
                    await closer()
                except Exception:
                    pass
        if current.terminal is None:
            failure = ErrorEvent(message="The model stream ended without finishing.", code="incomplete_stream",
                                 problem=problem("upstream-failure", "The model stream ended without finishing."))
            current.feed(failure)
            yield failure
        if current.usage is not None:
            last_usage = current.usage
            usage["input"] += current.usage.input_tokens
            usage["output"] += current.usage.output_tokens

        terminal = current.terminal
        assert terminal is not None
        if stopped() or (isinstance(terminal, DoneEvent) and terminal.stop_reason == "cancelled"):
            yield RoundEndEvent(round=number, stop_reason="cancelled", message=None)
            yield end("cancelled", STOPPED)
            return
        if isinstance(terminal, ErrorEvent):
            yield RoundEndEvent(round=number, stop_reason="error", message=None)
            yield end("error", terminal.message or "The model request failed.")
            return
        message = current.message()
        if message is not None:
            appended.append(message)
        yield RoundEndEvent(round=number, stop_reason=terminal.stop_reason, message=message)
        if message is None:
            yield end("complete", None) if drawn else end("empty", EMPTY_REPLY)
            return
        drawn = True
        if not current.calls:
            yield end("complete", None)
            return

        if terminal.stop_reason == "length":  # a call that does not parse was cut off, not written wrong
            for call in current.calls:
                call.cut = True
        # a call past the round's cap never runs, so it never waits for approval either
        waiting = [call for call in current.calls[:policy.max_tool_calls_per_round] if needs_approval(call, tools)]
        tally = Tally()
        runnable = [call for call in current.calls if call not in waiting]
        async with aclosing(run_calls(runnable, tools, context_factory, policy, stopped, tally,
                                      held=len(waiting))) as events:
            async for item in events:
                if isinstance(item, ToolResultEvent):
                    appended.append(item.message)
                yield item
        done += [text for _, text in sorted(tally.done)]
        errors += [text for _, text in sorted(tally.errors)]
        if tally.handled:
            usage["tool_rounds"] += 1
        if stopped():  # after the last call: Stop never opens a round (docs/agent.md "Stop")
            for call in waiting:  # a waiting call never asked is answered like any call not run
                result = {"success": False, "error": NOT_RUN}
                message = tool_message(call.id, result)
                appended.append(message)
                yield ToolResultEvent(call_id=call.id, name=call.name, success=False, result=result, message=message)
            yield end("cancelled", STOPPED)
            return
        if waiting:  # the turn pauses: no request is open, the host saves and waits (docs/agent.md "Approval")
            for call in waiting:
                yield ToolApprovalRequestEvent(call_id=call.id, name=call.name, arguments=call.arguments)
            yield end("awaiting_approval", None)
            return
