"""The loop driven through the real Responses API client against a provider played on
127.0.0.1: a two-round tool conversation, and what goes over the wire between the rounds
(function_call and function_call_output items, no server-side state)."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from jxai_app.core.agent import AgentPolicy, ToolResultEvent, run_turn
from jxai_app.core.streaming.events import DeltaEvent, ErrorEvent
from jxai_app.core.streaming.responses import ResponsesChatClient
from jxai_app.core.tools import ToolRegistry, tool, tool_success
from tests.core.agent.scripted import Turn, context_factory_for
from tests.support.fake_provider import (
    FakeProvider, Request, Script, responses_event, responses_function_call_stream, responses_text_stream,
)

USER = {"role": "user", "content": "Weather in Oslo?"}


@tool
def get_weather(city: Annotated[str, "The city."]) -> dict[str, Any]:
    """Current weather for a city."""
    return tool_success({"city": city, "temp_c": 21})


async def _turn(fake: FakeProvider) -> Turn:
    signal = asyncio.Event()
    client = ResponsesChatClient(base_url=fake.url, model="gpt-fake", api_key="sk-test")
    events = [e async for e in run_turn(client=client, tools=ToolRegistry([get_weather]), history=[USER],
                                        system_prompt="Be brief.", policy=AgentPolicy(), signal=signal,
                                        context_factory=context_factory_for(signal))]
    return Turn(events)


async def test_two_rounds_function_call_then_answer_send_input_items() -> None:
    def handler(request: Request) -> Script:
        if len(fake.requests) == 1:
            return Script(writes=responses_function_call_stream(
                "call_w1", "get_weather", ['{"city":', '"Oslo"}'],
                usage={"input_tokens": 40, "output_tokens": 9, "total_tokens": 49}))
        return Script(writes=responses_text_stream(
            ["It is ", "21 °C."], usage={"input_tokens": 70, "output_tokens": 5, "total_tokens": 75}))

    with FakeProvider(handler=handler) as fake:
        turn = await _turn(fake)
    assert turn.end.outcome == "complete"
    assert [r.path for r in fake.requests] == ["/v1/responses", "/v1/responses"]
    first, second = (r.json for r in fake.requests)
    for body in (first, second):
        assert body["store"] is False and body["stream"] is True and body["instructions"] == "Be brief."
        assert body["tools"][0]["name"] == "get_weather" and body["tools"][0]["strict"] is False
        assert "previous_response_id" not in body
    assert first["input"] == [USER]
    assert second["input"] == [
        USER,
        {"type": "function_call", "call_id": "call_w1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": "call_w1",
         "output": '{"success":true,"data":{"city":"Oslo","temp_c":21}}'},
    ]
    (result,) = turn.of(ToolResultEvent)
    assert result.success and result.result["data"] == {"city": "Oslo", "temp_c": 21}
    assert "".join(e.content for e in turn.of(DeltaEvent)) == "It is 21 °C."
    assert turn.end.appended[-1] == {"role": "assistant", "content": "It is 21 °C."}
    u = turn.end.usage
    assert (u.input_tokens, u.output_tokens, u.rounds, u.tool_rounds) == (110, 14, 2, 1)


async def test_a_failed_second_round_ends_the_turn_with_the_providers_error() -> None:
    def handler(request: Request) -> Script:
        if len(fake.requests) == 1:
            return Script(writes=responses_function_call_stream("call_w2", "get_weather", ['{"city":"Oslo"}']))
        return Script(writes=[responses_event("response.failed", response={
            "status": "failed", "error": {"code": "server_error", "message": "The model failed."}})])

    with FakeProvider(handler=handler) as fake:
        turn = await _turn(fake)
    errors = turn.of(ErrorEvent)
    assert [e.code for e in errors] == ["server_error"]
    assert turn.end.outcome == "error" and turn.end.message == "The model failed."
    assert [m["role"] for m in turn.end.appended] == ["assistant", "tool"]
    assert json.loads(fake.requests[1].body)["input"][-1]["type"] == "function_call_output"
