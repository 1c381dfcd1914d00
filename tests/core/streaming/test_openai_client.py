"""OpenAI-compatible client through ``httpx.MockTransport``: the request it sends
(docs/streaming.md "OpenAI-compatible requests") and normalisation rules the shared wire cases do not pin down."""

from __future__ import annotations

import json
from typing import Any, Callable

import httpx
import pytest

from jxai_app.core.problems import type_uri
from jxai_app.core.streaming import OpenAIChatClient
from jxai_app.core.streaming.openai import map_usage
from tests.core.streaming.conftest import GET_WEATHER, USER, collect

Handler = Callable[[httpx.Request], httpx.Response]


def sse_body(*chunks: Any, done: bool = True) -> bytes:
    lines = [b"data: " + (c if isinstance(c, bytes) else json.dumps(c).encode()) + b"\n\n" for c in chunks]
    return b"".join(lines) + (b"data: [DONE]\n\n" if done else b"")


def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def client_for(body: bytes | Handler, *, content_type: str = "text/event-stream", status: int = 200,
               seen: list[httpx.Request] | None = None, **kwargs: Any) -> OpenAIChatClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if callable(body):
            return body(request)
        return httpx.Response(status, headers={"Content-Type": content_type}, content=body)

    options = {"base_url": "https://llm.test/v1/", "model": "gpt-x", **kwargs}
    return OpenAIChatClient(transport=httpx.MockTransport(handler), **options)


async def test_request_shape_without_tools() -> None:
    seen: list[httpx.Request] = []
    client = client_for(sse_body(delta({}, "stop")), seen=seen, api_key="sk-1")
    await collect(client.stream_chat(USER, [], ""))
    request = seen[0]
    assert str(request.url) == "https://llm.test/v1/chat/completions" and request.method == "POST"
    assert request.headers["authorization"] == "Bearer sk-1"
    assert request.headers["content-type"] == "application/json"
    body = json.loads(request.content)
    assert list(body) == ["model", "messages", "stream", "stream_options"]
    assert body["messages"] == [{"role": "system", "content": ""}, *USER]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_request_shape_with_tools_and_temperature_zero() -> None:
    seen: list[httpx.Request] = []
    client = client_for(sse_body(delta({}, "stop")), seen=seen, temperature=0, max_tokens=50,
                        extra_headers={"X-Title": "jxai"})
    await collect(client.stream_chat(USER, GET_WEATHER, "sys"))
    body = json.loads(seen[0].content)
    assert list(body) == ["model", "messages", "stream", "stream_options", "temperature", "max_tokens",
                          "tools", "tool_choice", "parallel_tool_calls"]
    assert body["temperature"] == 0 and body["tools"] == GET_WEATHER
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is True
    assert "authorization" not in seen[0].headers and seen[0].headers["x-title"] == "jxai"


async def test_reasoning_empty_string_does_not_fall_through() -> None:
    body = sse_body(delta({"reasoning_content": "", "reasoning": "hidden"}), delta({"reasoning": "shown"}),
                    delta({"content": "a", "reasoning_content": "r"}), delta({}, "stop"))
    assert await collect(client_for(body).stream_chat(USER, [], "")) == [
        {"type": "reasoning", "content": "shown"}, {"type": "delta", "content": "a"},
        {"type": "reasoning", "content": "r"}, {"type": "done", "stopReason": "stop"}]


async def test_first_finish_reason_wins() -> None:
    body = sse_body(delta({"content": "x"}, "length"), delta({}, "stop"))
    events = await collect(client_for(body).stream_chat(USER, [], ""))
    assert events[-1] == {"type": "done", "stopReason": "length"}


async def test_name_without_id_at_new_index_gets_a_generated_id() -> None:
    body = sse_body(delta({"tool_calls": [{"index": 2, "function": {"name": "f", "arguments": "{}"}}]}),
                    delta({}, "tool_calls"))
    events = await collect(client_for(body).stream_chat(USER, GET_WEATHER, ""))
    call_id = events[0]["id"]
    assert call_id.startswith("call_2_") and len(call_id) == len("call_2_") + 8
    assert [e["type"] for e in events] == ["tool_call_start", "tool_call_delta", "tool_call_end", "done"]
    assert {e.get("id") for e in events[:3]} == {call_id}


async def test_held_fragments_follow_the_late_name() -> None:
    body = sse_body(delta({"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": "{\"a\""}}]}),
                    delta({"tool_calls": [{"index": 0, "function": {"arguments": ":1"}}]}),
                    delta({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "}"}}]}),
                    delta({}, "tool_calls"))
    events = await collect(client_for(body).stream_chat(USER, GET_WEATHER, ""))
    assert events[0] == {"type": "tool_call_start", "id": "c1", "name": "f"}
    assert "".join(e["args"] for e in events if e["type"] == "tool_call_delta") == "{\"a\":1}"
    assert events[-2:] == [{"type": "tool_call_end", "id": "c1"}, {"type": "done", "stopReason": "tool_calls"}]


async def test_repeat_of_incomplete_arguments_is_kept() -> None:
    """Only a repeat of *complete* JSON is a summary to drop; anything else is new text."""
    body = sse_body(delta({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{\"a\""}}]}),
                    delta({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]}),
                    delta({}, "stop"))
    events = await collect(client_for(body).stream_chat(USER, GET_WEATHER, ""))
    assert [e["args"] for e in events if e["type"] == "tool_call_delta"] == ["{\"a\"", "{\"a\""]


@pytest.mark.parametrize("args", ["{\"tool_uses\":[]}", "{\"tool_uses\":[{\"parameters\":{}}]}", "{\"tool_uses\""])
async def test_a_parallel_call_of_another_shape_stays_one_call(args: str) -> None:
    body = sse_body(delta({"tool_calls": [{"index": 0, "id": "p", "function": {"name": "parallel", "arguments": args}}]}),
                    delta({}, "tool_calls"))
    events = await collect(client_for(body).stream_chat(USER, GET_WEATHER, ""))
    assert events == [{"type": "tool_call_start", "id": "p", "name": "parallel"},
                      {"type": "tool_call_delta", "id": "p", "args": args},
                      {"type": "tool_call_end", "id": "p"}, {"type": "done", "stopReason": "tool_calls"}]


async def test_arguments_sent_as_an_object_become_json_text() -> None:
    body = sse_body(delta({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f",
                                                                              "arguments": {"city": "Oslo"}}}]}),
                    delta({}, "tool_calls"))
    events = await collect(client_for(body).stream_chat(USER, GET_WEATHER, ""))
    assert events[1] == {"type": "tool_call_delta", "id": "c", "args": "{\"city\":\"Oslo\"}"}


async def test_usage_is_replaced_and_sent_once_before_done() -> None:
    body = sse_body({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
                    delta({"content": "x"}, "stop"),
                    {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4,
                                              "prompt_tokens_details": {"cached_tokens": 6},
                                              "completion_tokens_details": {"reasoning_tokens": 2}}})
    events = await collect(client_for(body).stream_chat(USER, [], ""))
    assert events == [{"type": "delta", "content": "x"},
                      {"type": "usage", "inputTokens": 10, "outputTokens": 4, "cachedInputTokens": 6,
                       "reasoningTokens": 2},
                      {"type": "done", "stopReason": "stop"}]


@pytest.mark.parametrize(("usage", "expected"), [
    (None, None),
    ({"completion_tokens": 3}, None),
    ({"prompt_tokens": "3"}, None),
    ({"prompt_tokens": 3}, {"type": "usage", "inputTokens": 3, "outputTokens": 0}),
    ({"prompt_tokens": 3, "completion_tokens": 2, "prompt_tokens_details": None,
      "completion_tokens_details": {"reasoning_tokens": None}},
     {"type": "usage", "inputTokens": 3, "outputTokens": 2}),
    ({"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}},
     {"type": "usage", "inputTokens": 3, "outputTokens": 0, "cachedInputTokens": 0}),
])
def test_usage_mapping(usage: Any, expected: dict[str, Any] | None) -> None:
    mapped = map_usage(usage)
    assert (mapped.to_dict() if mapped else None) == expected


async def test_json_completion_with_tool_calls() -> None:
    completion = {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "reasoning_content": "think",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                       {"type": "function", "function": {"name": "g", "arguments": ""}}]}}],
                  "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
    events = await collect(client_for(json.dumps(completion).encode(), content_type="application/json")
                           .stream_chat(USER, GET_WEATHER, ""))
    generated = events[4]["id"]
    assert generated.startswith("call_1_")
    assert events == [{"type": "reasoning", "content": "think"},
                      {"type": "tool_call_start", "id": "c1", "name": "get_weather"},
                      {"type": "tool_call_delta", "id": "c1", "args": "{}"},
                      {"type": "tool_call_end", "id": "c1"},
                      {"type": "tool_call_start", "id": generated, "name": "g"},
                      {"type": "tool_call_end", "id": generated},
                      {"type": "usage", "inputTokens": 5, "outputTokens": 1},
                      {"type": "done", "stopReason": "tool_calls"}]


async def test_json_completion_with_mistral_typed_content_parts() -> None:
    """docs/providers.md "Mistral": a whole message's content may be a list of typed parts too."""
    completion = {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": [{"type": "thinking", "thinking": "Short greeting."},
                                         {"type": "image_url", "image_url": "https://img.example/x.png"},
                                         {"type": "text", "text": "Hello!"}]}}],
                  "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}}
    events = await collect(client_for(json.dumps(completion).encode(), content_type="application/json")
                           .stream_chat(USER, [], ""))
    assert events == [{"type": "reasoning", "content": "Short greeting."},
                      {"type": "delta", "content": "Hello!"},
                      {"type": "usage", "inputTokens": 5, "outputTokens": 9},
                      {"type": "done", "stopReason": "stop"}]


@pytest.mark.parametrize(("body", "code"), [
    (b"{\"error\": {\"message\": \"quota\", \"code\": \"insufficient_quota\"}}", "insufficient_quota"),
    (b"{\"object\": \"list\", \"data\": []}", "unexpected_response"),
    (b"[1, 2]", "unexpected_response"),
    (b"{not json", "unexpected_response"),
])
async def test_json_bodies_that_are_not_completions(body: bytes, code: str) -> None:
    events = await collect(client_for(body, content_type="application/json").stream_chat(USER, [], ""))
    assert len(events) == 1 and events[0]["type"] == "error" and events[0]["code"] == code
    assert events[0]["problem"]["type"] == type_uri("upstream-failure")


async def test_an_exception_in_the_transport_becomes_one_error() -> None:
    def explode(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("boom")

    events = await collect(client_for(explode).stream_chat(USER, [], ""))
    assert [(e["type"], e["code"]) for e in events] == [("error", "internal_error")]
    assert "boom" not in events[0]["message"]  # no internals reach the user


async def test_transport_network_error_becomes_network_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    events = await collect(client_for(refuse).stream_chat(USER, [], ""))
    assert events == [{"type": "error", "message": "Network error: connection refused", "code": "network_error",
                       "problem": events[0]["problem"]}]


async def test_connect_timeout_becomes_timeout() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out", request=request)

    events = await collect(client_for(slow).stream_chat(USER, [], ""))
    assert events[0]["code"] == "timeout" and events[0]["problem"]["type"] == type_uri("upstream-timeout")


async def test_bad_base_url_becomes_an_error_not_an_exception() -> None:
    client = OpenAIChatClient(base_url="ftp://nowhere", model="m")
    events = await collect(client.stream_chat(USER, [], ""))
    assert [(e["type"], e["code"]) for e in events] == [("error", "network_error")]


async def test_nothing_follows_the_terminal_event() -> None:
    body = sse_body(delta({"content": "a"}, "stop"), done=True) + sse_body(delta({"content": "late"}, "stop"))
    events = await collect(client_for(body).stream_chat(USER, [], ""))
    assert events == [{"type": "delta", "content": "a"}, {"type": "done", "stopReason": "stop"}]


async def test_tools_none_means_no_tools() -> None:
    seen: list[httpx.Request] = []
    await collect(client_for(sse_body(delta({}, "stop")), seen=seen).stream_chat(USER, None, None))
    body = json.loads(seen[0].content)
    assert "tools" not in body and body["messages"][0] == {"role": "system", "content": ""}
