"""The loop driven through the real OpenAI-compatible client against a provider played on
127.0.0.1 (tests/support/fake_provider.py): what actually goes over the wire between rounds."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from jxai_app.core.agent import CUT_OFF, AgentPolicy, ToolResultEvent, run_turn
from jxai_app.core.streaming.events import DeltaEvent, ErrorEvent
from jxai_app.core.streaming.openai import OpenAIChatClient
from jxai_app.core.tools import ToolContext, ToolRegistry, tool, tool_success
from tests.core.agent.scripted import Turn, context_factory_for
from tests.support.fake_provider import (
    FakeProvider, Request, Script, json_response, openai_chunk, openai_text_stream, openai_tool_call_stream,
)

USER = {"role": "user", "content": "Weather in Oslo?"}


@tool
def get_weather(city: Annotated[str, "The city."]) -> dict[str, Any]:
    """Current weather for a city."""
    return tool_success({"city": city, "temp_c": 21})


async def _turn(fake: FakeProvider, registry: ToolRegistry, *, signal: asyncio.Event | None = None,
                policy: AgentPolicy = AgentPolicy()) -> Turn:
    signal = signal or asyncio.Event()
    client = OpenAIChatClient(base_url=fake.url, model="fake-model", api_key="sk-test")
    events = [e async for e in run_turn(client=client, tools=registry, history=[USER], system_prompt="Be brief.",
                                        policy=policy, signal=signal, context_factory=context_factory_for(signal))]
    return Turn(events)


async def test_two_rounds_tool_call_then_answer_carry_wire_shaped_history() -> None:
    def handler(request: Request) -> Script:
        if len(fake.requests) == 1:
            return Script(writes=openai_tool_call_stream("call_abc", "get_weather", ['{"city":', '"Oslo"}'],
                                                         usage={"prompt_tokens": 40, "completion_tokens": 9}))
        return Script(writes=openai_text_stream(["It is ", "21 °C."],
                                                usage={"prompt_tokens": 70, "completion_tokens": 5}))

    with FakeProvider(handler=handler) as fake:
        turn = await _turn(fake, ToolRegistry([get_weather]))
    assert turn.end.outcome == "complete"
    assert len(fake.requests) == 2
    first, second = (r.json for r in fake.requests)
    assert first["tools"][0]["function"]["name"] == "get_weather" and first["stream"] is True
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]}
    reply = {"role": "tool", "tool_call_id": "call_abc",
             "content": '{"success":true,"data":{"city":"Oslo","temp_c":21}}'}
    # On the wire the null content of a tool-call turn is left out (llama.cpp's server 500s on it).
    wire_call = {k: v for k, v in call.items() if k != "content"}
    assert second["messages"][-3:] == [USER, wire_call, reply]
    assert second["messages"][:-3] == first["messages"][:-1]  # the system prompt, as the client sends it
    assert first["messages"][-1] == USER
    assert list(turn.end.appended) == [call, reply, {"role": "assistant", "content": "It is 21 °C."}]
    assert "".join(e.content for e in turn.of(DeltaEvent)) == "It is 21 °C."
    u = turn.end.usage
    assert (u.input_tokens, u.output_tokens, u.rounds, u.tool_rounds) == (110, 14, 2, 1)


async def test_a_call_cut_off_by_length_is_answered_and_the_model_sees_the_failure() -> None:
    def handler(request: Request) -> Script:
        if len(fake.requests) == 1:
            return Script(writes=openai_tool_call_stream("call_cut", "get_weather", ['{"city":"Os'], finish="length"))
        return Script(writes=openai_text_stream(["Sorry."]))

    with FakeProvider(handler=handler) as fake:
        turn = await _turn(fake, ToolRegistry([get_weather]))
    (result,) = turn.of(ToolResultEvent)
    assert not result.success and result.result["error"] == CUT_OFF
    body = fake.requests[1].json
    assert body["messages"][-2]["tool_calls"][0]["function"]["arguments"] == '{"city":"Os'
    assert body["messages"][-1]["tool_call_id"] == "call_cut"
    assert turn.end.outcome == "complete"


async def test_an_upstream_failure_in_round_two_keeps_round_one_and_ends_error() -> None:
    def handler(request: Request) -> Script:
        if len(fake.requests) == 1:
            return Script(writes=openai_tool_call_stream("call_1", "get_weather", ['{"city":"Oslo"}']))
        return json_response(429, {"error": {"message": "Rate limit reached", "type": "requests"}})

    with FakeProvider(handler=handler) as fake:
        turn = await _turn(fake, ToolRegistry([get_weather]))
    err = turn.events[-3]
    assert isinstance(err, ErrorEvent) and err.code == "429"
    assert turn.end.outcome == "error" and turn.end.message == "Rate limit reached"
    assert [m["role"] for m in turn.end.appended] == ["assistant", "tool"]


async def test_stop_during_a_slow_tool_sends_no_further_request() -> None:
    signal = asyncio.Event()

    @tool
    async def slow_lookup(context: ToolContext) -> str:
        """Takes a while."""
        signal.set()
        await asyncio.sleep(0.1)
        return "found it"

    with FakeProvider(handler=lambda r: Script(writes=openai_tool_call_stream("c1", "slow_lookup", ["{}"]))) as fake:
        turn = await _turn(fake, ToolRegistry([slow_lookup]), signal=signal)
    assert len(fake.requests) == 1
    (result,) = turn.of(ToolResultEvent)
    assert result.success and result.result["data"] == "found it"
    assert turn.end.outcome == "cancelled"
    assert json.loads(turn.end.appended[-1]["content"])["data"] == "found it"


async def test_a_tool_calls_extra_content_goes_back_with_it_in_the_next_round() -> None:
    """Gemini's thought signature (docs/providers.md "Google Gemini (OpenAI-compatible endpoint)"):
    sent back on the call it came with."""
    signature = {"google": {"thought_signature": "CpMBAdHtim8sig"}}

    def handler(request: Request) -> Script:
        if len(fake.requests) == 1:
            call = {"id": "function-call-1", "type": "function", "extra_content": signature,
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
            return Script(writes=[openai_chunk({"role": "assistant", "tool_calls": [call]}),
                                  openai_chunk({}, "stop"), b"data: [DONE]\n\n"])
        return Script(writes=openai_text_stream(["21 °C."]))

    with FakeProvider(handler=handler) as fake:
        turn = await _turn(fake, ToolRegistry([get_weather]))
    assert turn.end.outcome == "complete"
    sent_call = fake.requests[1].json["messages"][-2]["tool_calls"][0]
    assert sent_call["id"] == "function-call-1" and sent_call["extra_content"] == signature
    assert "extra_content" not in turn.end.appended[0]["tool_calls"][0]  # the history itself is not changed
