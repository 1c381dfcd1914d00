"""OpenAI Responses API client: history conversion, request shape, Stop on a held stream,
and the usage rule. The event mapping itself is pinned by the wire cases
(tests/data/responses-*.sse)."""

from __future__ import annotations

import asyncio
import time

from jxai_app.core.streaming.responses import ResponsesChatClient, convert_input, convert_tools, map_usage
from tests.core.streaming.conftest import GET_WEATHER, USER, collect
from tests.support.fake_provider import FakeProvider, Script, responses_event


def test_convert_input_roles_empty_turns_and_object_arguments() -> None:
    history = [
        {"role": "system", "content": "Be exact."},
        {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": ""},  # an empty turn sends nothing
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "21 °C"}]},
    ]
    assert convert_input(history) == [
        {"role": "system", "content": "Be exact."},
        {"role": "developer", "content": [{"type": "input_text", "text": "Use metric units."}]},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "21 °C"},
    ]


def test_convert_input_images_and_pdf_files() -> None:
    pdf_url = "data:application/pdf;base64,JVBE"
    history = [{"role": "user", "content": [
        {"type": "text", "text": "Read these."},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": pdf_url}}]}]
    assert convert_input(history) == [{"role": "user", "content": [
        {"type": "input_text", "text": "Read these."},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
        {"type": "input_file", "filename": "a.pdf", "file_data": pdf_url}]}]


def test_convert_tools_keeps_an_explicit_strict_and_defaults_it_off() -> None:
    strict = [{"type": "function", "function": {**GET_WEATHER[0]["function"], "name": "exact", "strict": True}}]
    assert [(t["name"], t["strict"]) for t in convert_tools([*GET_WEATHER, *strict])] == [
        ("get_weather", False), ("exact", True)]


async def test_request_body_with_a_forced_function_and_no_system_prompt() -> None:
    completed = responses_event("response.completed", response={"status": "completed"})
    with FakeProvider([Script(writes=[completed])]) as fake:
        client = ResponsesChatClient(base_url=fake.url, model="gpt-fake", api_key="sk-test", temperature=0,
                                     tool_choice={"type": "function", "function": {"name": "get_weather"}})
        events = await collect(client.stream_chat(USER, GET_WEATHER, ""))
    assert events == [{"type": "done", "stopReason": "stop"}]
    request = fake.requests[0]
    assert request.headers["authorization"] == "Bearer sk-test"
    assert list(request.json) == ["model", "input", "stream", "store", "temperature", "tools", "tool_choice",
                                  "parallel_tool_calls"]
    assert request.json["tool_choice"] == {"type": "function", "name": "get_weather"}


async def test_stop_on_a_held_stream_ends_cancelled_and_closes_the_connection() -> None:
    delta = responses_event("response.output_text.delta", item_id="msg_1", output_index=0, content_index=0,
                            delta="Hel")
    with FakeProvider([Script(writes=[delta], hold=True)]) as fake:
        client = ResponsesChatClient(base_url=fake.url, model="gpt-fake")
        signal = asyncio.Event()
        events = []
        async for event in client.stream_chat(USER, [], "", signal=signal):
            events.append(event.to_dict())
            if len(events) == 1:
                started = time.monotonic()
                signal.set()
        elapsed = time.monotonic() - started
        assert fake.wait_closed(2.0)
    assert events == [{"type": "delta", "content": "Hel"}, {"type": "done", "stopReason": "cancelled"}]
    assert elapsed < 0.1


def test_usage_counts_reasoning_on_top_only_when_the_numbers_say_so() -> None:
    inside = map_usage({"input_tokens": 10, "output_tokens": 50, "total_tokens": 60,
                        "output_tokens_details": {"reasoning_tokens": 40}})
    beside = map_usage({"input_tokens": 10, "output_tokens": 10, "total_tokens": 60,
                        "output_tokens_details": {"reasoning_tokens": 40}})
    assert inside is not None and beside is not None
    assert (inside.output_tokens, inside.reasoning_tokens) == (50, 40)
    assert (beside.output_tokens, beside.reasoning_tokens) == (50, 40)
    no_total = map_usage({"input_tokens": 10, "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 40}})
    small = map_usage({"input_tokens": 10, "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 40}})
    assert no_total is not None and small is not None
    assert (no_total.output_tokens, small.output_tokens) == (42, 50)  # 40 cannot be part of 2; 40 of 50 may
    assert map_usage({"output_tokens": 3}) is None
    assert beside.to_dict() == {"type": "usage", "inputTokens": 10, "outputTokens": 50, "reasoningTokens": 40}
