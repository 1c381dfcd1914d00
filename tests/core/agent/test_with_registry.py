"""The loop with the real ToolRegistry and gated views (docs/agent.md "The tool registry"): bad input reaches the
model as failed results, the per-tool timeout holds, the gate is re-read every round."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Annotated, Any

from jxai_app.core.agent import CUT_OFF, AgentPolicy, ToolResultEvent
from jxai_app.core.tools import GatedToolRegistry, ToolContext, ToolRegistry, calculate, tool, tool_success
from tests.core.agent.scripted import ScriptedClient, play, text_round, tool_round


def _registry(log: list[Any]) -> ToolRegistry:
    @tool
    def get_weather(city: Annotated[str, "The city."], context: ToolContext) -> dict[str, Any]:
        """Current weather for a city."""
        log.append(("get_weather", city, context.call_id, context.user))
        return tool_success({"city": city, "temp_c": 21}, summary=f"Weather for {city}")

    @tool
    def explode() -> str:
        """Always fails."""
        raise RuntimeError("kaboom")

    @tool(timeout=0.2)
    async def stall() -> str:
        """Never answers in time."""
        await asyncio.sleep(30)
        return "late"

    @tool
    def opaque() -> Any:
        """Returns something JSON cannot carry."""
        return threading.Lock()

    return ToolRegistry([get_weather, explode, stall, opaque, calculate])


async def test_a_two_round_tool_conversation_through_the_real_registry() -> None:
    log: list[Any] = []
    client = ScriptedClient([tool_round(("call_1", "get_weather", '{"city":"Oslo"}'),
                                       ("call_2", "calculate", '{"expression":"6*7"}')),
                             text_round("It is 21 °C in Oslo, and 6×7 = 42.")])
    turn = await play(client, _registry(log))
    assert turn.end.outcome == "complete"
    assert log == [("get_weather", "Oslo", "call_1", "alice")]
    weather, calc = turn.of(ToolResultEvent)
    assert weather.result == {"success": True, "data": {"city": "Oslo", "temp_c": 21}, "summary": "Weather for Oslo"}
    assert calc.success and calc.result["data"]["result"] == 42
    sent = client.sent(1)
    assert sent[-2] == {"role": "tool", "tool_call_id": "call_1",
                        "content": '{"success":true,"data":{"city":"Oslo","temp_c":21},"summary":"Weather for Oslo"}'}
    assert sent[-1]["tool_call_id"] == "call_2" and json.loads(sent[-1]["content"]) == calc.result
    names = [t["function"]["name"] for t in client.requests[0]["tools"]]
    assert names == ["get_weather", "explode", "stall", "opaque", "calculate"]


async def test_every_kind_of_bad_call_reaches_the_model_as_a_failed_result() -> None:
    calls = [("a", "explode", "{}"), ("b", "stall", "{}"), ("c", "opaque", "{}"), ("d", "nope", "{}"),
             ("e", "get_weather", "{}"), ("f", "get_weather", '{"city": Oslo}'), ("g", "get_weather", "[1]"),
             ("h", "get_weather", '{"city": 3}'), ("i", "get_weather", '{"city": "Os')]
    client = ScriptedClient([tool_round(*calls), text_round("Several tools failed.")])
    turn = await play(client, _registry([]), policy=AgentPolicy(tool_concurrency=8))
    results = {r.call_id: r for r in turn.of(ToolResultEvent)}
    assert not any(r.success for r in results.values())
    errors = {k: r.result["error"] for k, r in results.items()}
    assert errors["a"] == 'Tool "explode" execution error: kaboom'
    assert errors["b"] == 'Tool "stall" timed out after 0.2 seconds'
    assert errors["c"].startswith('Tool "opaque" returned a result that cannot be serialized: ')
    assert errors["d"] == 'Unknown tool: "nope"'
    assert errors["e"].startswith("Validation failed: ") and "city" in errors["e"]
    assert errors["f"].startswith("Failed to parse arguments: ")
    assert errors["g"] == "Failed to parse arguments: arguments must be a JSON object, got array"
    assert errors["h"].startswith("Validation failed: ")
    assert errors["i"] == CUT_OFF  # only the start of a JSON object: cut off, whatever the finish reason said
    assert [m["tool_call_id"] for m in client.sent(1) if m["role"] == "tool"] == list("abcdefghi")
    assert turn.end.outcome == "complete"


async def test_the_gate_is_re_read_each_round_and_refuses_tools_not_offered() -> None:
    allowed = {"get_weather", "calculate"}
    view = GatedToolRegistry(_registry([]), lambda d: d.name in allowed)

    def round_two(messages: list[dict[str, Any]]) -> Any:
        allowed.discard("get_weather")  # a permission revoked mid-turn
        return tool_round(("c2", "get_weather", '{"city":"Rome"}'))

    client = ScriptedClient([tool_round(("c1", "get_weather", '{"city":"Oslo"}')), round_two, text_round("ok")])
    turn = await play(client, view)
    listed = [[t["function"]["name"] for t in r["tools"]] for r in client.requests]
    assert listed == [["get_weather", "calculate"], ["get_weather", "calculate"], ["calculate"]]
    first, second = turn.of(ToolResultEvent)
    assert first.success and not second.success
    assert second.result["error"] == 'Tool "get_weather" is not available in this conversation'
