"""The agent loop's side of tool approval (docs/agent.md "Approval"): a call that needs a
person's approval does not run, the round's other calls do, the turn ends
``awaiting_approval``; ``run_turn(decided=…)`` answers the decisions before its first request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from jxai_app.core.agent import CUT_OFF, NOT_RUN, Decision, ToolApprovalRequestEvent, ToolResultEvent, run_turn
from jxai_app.core.streaming.events import DeltaEvent, DoneEvent
from tests.core.agent.scripted import FakeTools, ScriptedClient, Turn, context_factory_for, ok, play, tool_round

USER = {"role": "user", "content": "Save a note and add 2 and 2."}


@dataclass
class ApprovingTools(FakeTools):
    """FakeTools whose ``needs`` tools wait for approval."""

    needs: set[str] = field(default_factory=set)

    def requires_approval(self, name: str) -> bool:
        return name in self.needs


def _tools() -> ApprovingTools:
    return ApprovingTools({"save": lambda a, c: ok({"saved": a["text"]}), "add": lambda a, c: ok(4)}, needs={"save"})


async def test_a_call_that_needs_approval_pauses_the_turn_and_the_others_run() -> None:
    client = ScriptedClient([tool_round(("c1", "save", '{"text":"milk"}'), ("c2", "add", '{"a":2}'),
                                        ("c3", "save", '{"text":'))])  # c3's arguments are cut off
    tools = _tools()
    turn = await play(client, tools, history=[USER])

    assert turn.end.outcome == "awaiting_approval" and turn.end.message is None
    assert turn.of(ToolApprovalRequestEvent) == [ToolApprovalRequestEvent(call_id="c1", name="save",
                                                                          arguments='{"text":"milk"}')]
    assert [name for name, _, _ in tools.executed] == ["add"]  # c1 waits, c3 fails without running
    results = {r.call_id: r for r in turn.of(ToolResultEvent)}
    assert set(results) == {"c2", "c3"} and results["c3"].result["error"] == CUT_OFF
    assert turn.types[-2:] == ["tool_approval_request", "turn_end"] and len(client.requests) == 1
    assert [m["role"] for m in turn.end.appended] == ["assistant", "tool", "tool"]  # nothing for c1


async def test_stop_before_the_pause_answers_the_waiting_call_as_not_run() -> None:
    signal = asyncio.Event()

    def add(args: Any, context: Any) -> Any:
        signal.set()
        return ok(4)

    tools = ApprovingTools({"save": lambda a, c: ok(), "add": add}, needs={"save"})
    turn = await play(ScriptedClient([tool_round(("c1", "save", "{}"), ("c2", "add", "{}"))]), tools,
                      history=[USER], signal=signal)
    assert turn.end.outcome == "cancelled" and not turn.of(ToolApprovalRequestEvent)
    waiting = next(r for r in turn.of(ToolResultEvent) if r.call_id == "c1")
    assert waiting.result == {"success": False, "error": NOT_RUN}


async def test_decisions_are_answered_before_the_first_request_of_the_resumed_turn() -> None:
    paused = [USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "save", "arguments": '{"text":"milk"}'}},
        {"id": "c2", "type": "function", "function": {"name": "save", "arguments": '{"text":"eggs"}'}}]}]
    client = ScriptedClient([[DeltaEvent(content="Saved milk."), DoneEvent(stop_reason="stop")]])
    tools = _tools()
    signal = asyncio.Event()
    decided = [Decision(call_id="c1", name="save", arguments='{"text":"milk"}', approved=True),
               Decision(call_id="c2", name="save", arguments='{"text":"eggs"}', approved=False,
                        refusal="The user denied this call: no eggs")]
    turn = Turn([event async for event in run_turn(
        client=client, tools=tools, history=paused, system_prompt="", signal=signal,
        context_factory=context_factory_for(signal), decided=decided)])

    assert turn.end.outcome == "complete"
    assert [name for name, _, _ in tools.executed] == ["save"]  # only the approved call ran
    assert turn.types.index("tool_result") < turn.types.index("round_start")
    (request,) = client.requests
    replies = {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}
    assert replies == {"c1": '{"success":true,"data":{"saved":"milk"}}',
                       "c2": '{"success":false,"error":"The user denied this call: no eggs"}'}
