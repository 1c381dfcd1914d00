"""Tool calls inside the loop: bad input, concurrency and order, Stop, budgets (docs/agent.md "Tool calls",
"Stop", "Budgets")."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import pytest

from jxai_app.core.agent import CUT_OFF, NOT_RUN, STOPPED, AgentPolicy, ToolResultEvent, ToolStartEvent, cap_text
from jxai_app.core.streaming.events import DoneEvent, ToolCallDeltaEvent, ToolCallStartEvent
from jxai_app.core.tools import ToolContext
from tests.core.agent.scripted import (
    FakeTools, ScriptedClient, call_events, context_factory_for, ok, play, text_round, tool_round,
)


def _raise(args: Any, ctx: Any) -> Any:
    raise RuntimeError("disk on fire")


async def _hang(args: Any, ctx: Any) -> Any:
    await asyncio.sleep(30)


def _circular(args: Any, ctx: Any) -> Any:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return ok(loop)


BAD_INPUT = [
    ("args-not-json", "echo", "{not json", "Failed to parse arguments: "),
    ("args-null", "echo", "null", "Failed to parse arguments: arguments must be a JSON object, got null"),
    ("args-array", "echo", "[1,2]", "Failed to parse arguments: arguments must be a JSON object, got array"),
    ("args-number", "echo", "42", "Failed to parse arguments: arguments must be a JSON object, got number"),
    ("args-string", "echo", '"x"', "Failed to parse arguments: arguments must be a JSON object, got string"),
    ("tool-raises", "boom", "{}", 'Tool "boom" execution error: disk on fire'),
    ("tool-hangs", "hang", "{}", 'Tool "hang" timed out after 0.2 seconds'),
    ("unserialisable", "circular", "{}", 'Tool "circular" returned a result that cannot be serialized: '),
    ("not-finite", "nan", "{}", 'Tool "nan" returned a result that cannot be serialized: '),
    ("object-result", "weird", "{}", 'Tool "weird" returned a malformed result'),
    ("malformed-result", "nosuccess", "{}", 'Tool "nosuccess" returned a malformed result'),
    ("unknown-tool", "nope", "{}", 'Unknown tool: "nope"'),
]


@pytest.mark.parametrize(("case", "name", "args", "error"), BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
async def test_bad_input_becomes_a_failed_result_the_model_sees(case: str, name: str, args: str, error: str) -> None:
    tools = FakeTools({"echo": lambda a, c: ok(a), "boom": _raise, "hang": _hang, "circular": _circular,
                       "nan": lambda a, c: ok(math.nan), "weird": lambda a, c: object(),
                       "nosuccess": lambda a, c: {"data": 1}})
    client = ScriptedClient([tool_round(("c1", name, args)), text_round("Sorry, that failed.")])
    turn = await play(client, tools, policy=AgentPolicy(tool_timeout=0.2))
    (result,) = turn.of(ToolResultEvent)
    assert result.success is False and result.result["error"].startswith(error)
    assert set(result.result) == {"success", "error"}
    reply = client.sent(1)[-1]
    assert reply == {"role": "tool", "tool_call_id": "c1", "content": json.dumps(result.result, separators=(",", ":"),
                                                                                 ensure_ascii=False)}
    assert turn.end.outcome == "complete"
    assert turn.end.appended[-1] == {"role": "assistant", "content": "Sorry, that failed."}
    if case.startswith("args"):
        assert tools.executed == []  # unparseable arguments never reach the tools


@pytest.mark.parametrize("args", ["", "   "])
async def test_empty_arguments_mean_an_empty_object(args: str) -> None:
    tools = FakeTools({"echo": lambda a, c: ok(a)})
    turn = await play(ScriptedClient([tool_round(("c1", "echo", args)), text_round("ok")]), tools)
    assert tools.executed[0][1] == "{}"
    assert turn.of(ToolResultEvent)[0].result == {"success": True, "data": {}}
    # the argument text the model sent stays verbatim in its own message
    assert turn.end.appended[0]["tool_calls"][0]["function"]["arguments"] == args


async def test_a_call_cut_off_by_length_runs_and_fails_then_the_model_corrects_itself() -> None:
    tools = FakeTools({"get_weather": lambda a, c: ok({"city": a["city"], "temp": 21})})
    client = ScriptedClient([
        [ToolCallStartEvent(id="c1", name="get_weather"), ToolCallDeltaEvent(id="c1", args='{"city":"Os'),
         DoneEvent(stop_reason="length")],
        tool_round(("c2", "get_weather", '{"city":"Oslo"}')),
        text_round("21 °C in Oslo."),
    ])
    turn = await play(client, tools)
    results = turn.of(ToolResultEvent)
    assert [r.success for r in results] == [False, True]
    assert results[0].result["error"] == CUT_OFF
    assert client.sent(1)[1]["tool_calls"][0]["function"]["arguments"] == '{"city":"Os'
    assert turn.end.outcome == "complete" and [n for n, _, _ in tools.executed] == ["get_weather"]


async def test_a_duplicate_call_id_in_one_round_is_renamed_and_answered_without_running() -> None:
    tools = FakeTools({"f": lambda a, c: ok(a)})
    client = ScriptedClient([
        [*call_events("c1", "f", '{"n":1}'), *call_events("c1", "f", '{"n":2}'), *call_events("c1", "f", "{}"),
         DoneEvent(stop_reason="tool_calls")],
        text_round("ok"),
    ])
    turn = await play(client, tools)
    request = turn.end.appended[0]
    assert [c["id"] for c in request["tool_calls"]] == ["c1", "c1_dup1", "c1_dup2"]
    assert [c["function"]["arguments"] for c in request["tool_calls"]] == ['{"n":1}', '{"n":2}', "{}"]
    assert [a for _, a, _ in tools.executed] == ['{"n":1}']
    results = turn.of(ToolResultEvent)
    assert [(r.call_id, r.success) for r in results] == [("c1", True), ("c1_dup1", False), ("c1_dup2", False)]
    assert results[1].result["error"] == 'Duplicate tool call id "c1" in one reply: this call was not run.'
    # the wire history stays valid: every call answered once, in call order
    assert [m["tool_call_id"] for m in client.sent(1) if m["role"] == "tool"] == ["c1", "c1_dup1", "c1_dup2"]


async def test_calls_run_concurrently_up_to_the_limit_but_results_keep_call_order() -> None:
    running = 0
    peak = 0
    finished: list[str] = []

    async def work(args: Any, ctx: ToolContext) -> Any:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(args["s"])
        running -= 1
        finished.append(ctx.call_id)
        return ok(ctx.call_id)

    calls = [(f"c{i}", "work", json.dumps({"s": s})) for i, s in enumerate([0.12, 0.08, 0.04, 0.0, 0.02])]
    client = ScriptedClient([tool_round(*calls), text_round("ok")])
    turn = await play(client, FakeTools({"work": work}), policy=AgentPolicy(tool_concurrency=2))
    assert peak == 2
    assert finished != [c[0] for c in calls]  # they really completed out of order
    assert [r.call_id for r in turn.of(ToolResultEvent)] == ["c0", "c1", "c2", "c3", "c4"]
    assert [m["tool_call_id"] for m in turn.end.appended if m["role"] == "tool"] == ["c0", "c1", "c2", "c3", "c4"]
    starts = [i for i, e in enumerate(turn.events) if isinstance(e, ToolStartEvent)]
    results = [i for i, e in enumerate(turn.events) if isinstance(e, ToolResultEvent)]
    assert len(starts) == 5 and starts[1] < results[0]  # the second call started before the first finished


async def test_each_call_gets_its_own_context_from_the_factory() -> None:
    seen: list[tuple[str, str]] = []
    contexts: list[ToolContext] = []
    signal = asyncio.Event()

    def record(args: Any, ctx: ToolContext) -> Any:
        contexts.append(ctx)
        return ok()

    client = ScriptedClient([tool_round(("a", "f", "{}"), ("b", "g", "{}")), text_round("ok")])
    await play(client, FakeTools({"f": record, "g": record}), signal=signal,
               factory=context_factory_for(signal, seen))
    assert sorted(seen) == [("a", "f"), ("b", "g")]
    assert sorted(c.call_id for c in contexts) == ["a", "b"]
    assert all(c.signal is signal and c.user == "alice" for c in contexts)


async def test_a_context_factory_that_raises_gives_a_failed_result() -> None:
    def factory(call_id: str, name: str) -> ToolContext:
        raise PermissionError("no user")

    client = ScriptedClient([tool_round(("a", "f", "{}")), text_round("ok")])
    turn = await play(client, FakeTools({"f": lambda a, c: ok()}), factory=factory)
    assert turn.of(ToolResultEvent)[0].result == {"success": False, "error": 'Tool "f" execution error: no user'}
    assert turn.end.outcome == "complete"


# -- Stop -------------------------------------------------------------------------------------
async def test_stop_while_a_slow_tool_runs_keeps_its_result_runs_nothing_more_and_opens_no_round() -> None:
    signal = asyncio.Event()
    ran: list[str] = []

    async def slow(args: Any, ctx: ToolContext) -> Any:
        ran.append("slow")
        await asyncio.sleep(0.3)  # Stop arrives meanwhile; this tool chooses to finish
        return ok("slow result", summary="Slow work done")

    def second(args: Any, ctx: Any) -> Any:
        ran.append("second")
        return ok()

    async def press_stop() -> None:
        while not ran:
            await asyncio.sleep(0.005)
        signal.set()

    client = ScriptedClient([tool_round(("c1", "slow", "{}"), ("c2", "second", "{}")), text_round("never")])
    presser = asyncio.create_task(press_stop())
    start = time.monotonic()
    turn = await play(client, FakeTools({"slow": slow, "second": second}), signal=signal,
                      policy=AgentPolicy(tool_concurrency=1))
    elapsed = time.monotonic() - start
    await presser
    assert ran == ["slow"]
    assert len(client.requests) == 1 and turn.types.count("round_start") == 1
    first, skipped = turn.of(ToolResultEvent)
    assert first.success and first.result == {"success": True, "data": "slow result", "summary": "Slow work done"}
    assert (skipped.call_id, skipped.success, skipped.result["error"]) == ("c2", False, NOT_RUN)
    assert [e.call_id for e in turn.of(ToolStartEvent)] == ["c1"]
    assert turn.end.outcome == "cancelled" and turn.end.message == STOPPED
    assert [m["role"] for m in turn.end.appended] == ["assistant", "tool", "tool"]
    assert elapsed < 1.0


async def test_stop_during_the_last_call_opens_no_further_round() -> None:
    signal = asyncio.Event()

    def stopper(args: Any, ctx: ToolContext) -> Any:
        assert ctx.signal is not None
        ctx.signal.set()
        return ok("kept")

    client = ScriptedClient([tool_round(("c1", "f", "{}"), ("c2", "stopper", "{}")), text_round("never")])
    turn = await play(client, FakeTools({"f": lambda a, c: ok(), "stopper": stopper}), signal=signal,
                      policy=AgentPolicy(tool_concurrency=1))
    assert len(client.requests) == 1 and turn.end.outcome == "cancelled"
    assert [r.success for r in turn.of(ToolResultEvent)] == [True, True]


async def test_stop_with_concurrent_calls_lets_every_started_call_finish() -> None:
    signal = asyncio.Event()

    async def work(args: Any, ctx: ToolContext) -> Any:
        await asyncio.sleep(0.02)
        if args["i"] == 0:
            signal.set()  # calls 0 and 1 are both running by now; 2 and 3 wait for a slot
        await asyncio.sleep(0.05)
        return ok(args["i"])

    calls = [(f"c{i}", "work", json.dumps({"i": i})) for i in range(4)]
    client = ScriptedClient([tool_round(*calls), text_round("never")])
    turn = await play(client, FakeTools({"work": work}), signal=signal, policy=AgentPolicy(tool_concurrency=2))
    results = turn.of(ToolResultEvent)
    assert [r.success for r in results] == [True, True, False, False]
    assert [r.result.get("error") for r in results[2:]] == [NOT_RUN, NOT_RUN]
    assert len(client.requests) == 1 and turn.end.outcome == "cancelled"


# -- budgets ----------------------------------------------------------------------------------
def _forever(tool: str = "lookup", args: str = "{}") -> Any:
    counter = iter(range(1000))
    return lambda messages: tool_round((f"call_{next(counter)}", tool, args))


async def test_a_model_calling_tools_forever_ends_cap_partial_after_max_tool_rounds() -> None:
    n = 0

    def lookup(args: Any, ctx: Any) -> Any:
        nonlocal n
        n += 1
        return ok(n, summary=f"Looked up page {n}")

    script = _forever()
    client = ScriptedClient([script] * 50)
    turn = await play(client, FakeTools({"lookup": lookup}))
    assert len(client.requests) == 5 and n == 5
    expected = cap_text(budget="tool_rounds", limit=5, done=[f"Looked up page {i}" for i in range(1, 6)], errors=[])
    assert expected.startswith("I ran out of tool-call rounds (5) before finishing.\n\nDone so far:\n- Looked up page 1")
    assert turn.end.outcome == "cap_partial" and turn.end.message == expected
    assert turn.end.appended[-1] == {"role": "assistant", "content": expected}
    assert len(turn.end.appended) == 5 * 2 + 1
    assert not any(e.type == "error" for e in turn.events)
    assert turn.end.usage.tool_rounds == 5 and turn.end.usage.rounds == 5
    # the cap message is ordinary history for the next turn
    nxt = ScriptedClient([text_round("continuing")])
    await play(nxt, history=[{"role": "user", "content": "go"}, *turn.end.appended, {"role": "user", "content": "more"}])
    assert nxt.sent(0)[-2] == {"role": "assistant", "content": expected}


async def test_running_out_with_nothing_succeeded_ends_cap_failed_and_appends_no_cap_message() -> None:
    client = ScriptedClient([_forever("broken")] * 10)
    tools = FakeTools({"broken": lambda a, c: {"success": False, "error": "backend down"}})
    turn = await play(client, tools, policy=AgentPolicy(max_tool_rounds=2))
    assert turn.end.outcome == "cap_failed" and len(client.requests) == 2
    assert turn.end.message == ("I ran out of tool-call rounds (2) before finishing.\n\nErrors encountered:\n"
                                "- backend down\n\nYou can continue by sending another message, or try a more "
                                "specific request.")
    assert all(m["role"] != "assistant" or m.get("tool_calls") for m in turn.end.appended)
    assert len(turn.end.appended) == 4


async def test_the_total_round_ceiling_stops_the_turn_and_is_named_in_the_text() -> None:
    client = ScriptedClient([_forever()] * 10)
    turn = await play(client, FakeTools({"lookup": lambda a, c: ok()}), policy=AgentPolicy(max_tool_rounds=10,
                                                                                          max_rounds=3))
    assert len(client.requests) == 3 and turn.end.outcome == "cap_partial"
    assert turn.end.message is not None and turn.end.message.startswith("I ran out of model rounds (3)")
    assert "- Ran lookup" in turn.end.message


async def test_parse_failures_count_as_tool_rounds_so_broken_json_forever_still_ends() -> None:
    client = ScriptedClient([_forever("lookup", '{"broken": nope}')] * 10)
    turn = await play(client, FakeTools({"lookup": lambda a, c: ok()}), policy=AgentPolicy(max_tool_rounds=3))
    assert len(client.requests) == 3 and turn.end.outcome == "cap_failed"
    assert "Errors encountered:\n- Failed to parse arguments: " in (turn.end.message or "")


def test_cap_text_deduplicates_in_first_seen_order() -> None:
    text = cap_text(budget="rounds", limit=25, done=["a", "b", "a"], errors=["x", "x", "y"])
    assert text == ("I ran out of model rounds (25) before finishing.\n\nDone so far:\n- a\n- b\n\n"
                    "Errors encountered:\n- x\n- y\n\nYou can continue by sending another message, or try a "
                    "more specific request.")
