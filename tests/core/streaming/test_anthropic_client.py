"""Anthropic Messages client: history conversion, the request, and event normalisation
(docs/streaming.md "Anthropic client")."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from jxai_app.core.streaming import AnthropicChatClient
from jxai_app.core.streaming.anthropic import convert_messages, convert_tools
from tests.core.streaming.conftest import GET_WEATHER, USER, collect
from tests.support.fake_provider import sse_json


def client_for(events: list[dict[str, Any]] | bytes, *, content_type: str = "text/event-stream",
               seen: list[httpx.Request] | None = None, **kwargs: Any) -> AnthropicChatClient:
    body = events if isinstance(events, bytes) else b"".join(sse_json(e, event=e["type"]) for e in events)

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(200, headers={"Content-Type": content_type}, content=body)

    return AnthropicChatClient(model="claude-x", api_key="sk-ant", transport=httpx.MockTransport(handler), **kwargs)


def start(**usage: int) -> dict[str, Any]:
    return {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                                 "usage": {"input_tokens": 10, "output_tokens": 1, **usage}}}


def stop(reason: str, output_tokens: int = 3) -> list[dict[str, Any]]:
    return [{"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": output_tokens}},
            {"type": "message_stop"}]


def test_convert_messages() -> None:
    history = [
        {"role": "system", "content": "Extra rule."},
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 3}"},
        {"role": "tool", "tool_call_id": "c2", "content": "failed"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "and this?"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                     {"type": "file", "file": {"filename": "a.pdf",
                                                               "file_data": "data:application/pdf;base64,JVBE"}}]},
    ]
    system, messages = convert_messages(history, "Be brief.")
    assert system == "Be brief.\n\nExtra rule."
    assert messages == [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "c2", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "{\"temp\": 3}"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "failed"}]},
        {"role": "user", "content": [
            {"type": "text", "text": "and this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}]},
    ]


def test_convert_tools() -> None:
    assert convert_tools(GET_WEATHER) == [{"name": "get_weather", "input_schema": GET_WEATHER[0]["function"]["parameters"],
                                           "description": "Current weather for a city"}]


async def test_request() -> None:
    seen: list[httpx.Request] = []
    client = client_for([start(), *stop("end_turn")], seen=seen, temperature=0.2, max_tokens=321,
                        extra_headers={"anthropic-beta": "x"})
    await collect(client.stream_chat(USER, GET_WEATHER, ""))
    request = seen[0]
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant" and request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["anthropic-beta"] == "x"
    body = json.loads(request.content)
    assert "system" not in body  # an empty system prompt is left out
    assert body["model"] == "claude-x" and body["max_tokens"] == 321 and body["temperature"] == 0.2
    assert body["stream"] is True and body["messages"] == USER and body["tools"][0]["name"] == "get_weather"


async def test_thinking_text_and_tool_use() -> None:
    events = [start(cache_read_input_tokens=30, cache_creation_input_tokens=5),
              {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hm."}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}},
              {"type": "content_block_stop", "index": 0},
              {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
              {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me see."}},
              {"type": "content_block_stop", "index": 1},
              {"type": "content_block_start", "index": 2,
               "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}},
              {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                                    "partial_json": "{\"city\":\"Oslo\"}"}},
              {"type": "content_block_stop", "index": 2},
              *stop("tool_use", 9)]
    assert await collect(client_for(events).stream_chat(USER, GET_WEATHER, "")) == [
        {"type": "reasoning", "content": "Hm."},
        {"type": "delta", "content": "Let me see."},
        {"type": "tool_call_start", "id": "toolu_1", "name": "get_weather"},
        {"type": "tool_call_delta", "id": "toolu_1", "args": "{\"city\":\"Oslo\"}"},
        {"type": "tool_call_end", "id": "toolu_1"},
        {"type": "usage", "inputTokens": 45, "outputTokens": 9, "cachedInputTokens": 30},
        {"type": "done", "stopReason": "tool_calls"}]


@pytest.mark.parametrize(("reason", "expected"), [("end_turn", "stop"), ("stop_sequence", "stop"),
                                                  ("max_tokens", "length"), ("refusal", "content_filter"),
                                                  ("model_context_window_exceeded", "length"),
                                                  ("pause_turn", "stop"), ("something_new", "stop")])
async def test_stop_reasons(reason: str, expected: str) -> None:
    events = await collect(client_for([start(), *stop(reason)]).stream_chat(USER, [], ""))
    assert events[-1] == {"type": "done", "stopReason": expected}


async def test_done_sentinel_after_message_stop_is_ignored() -> None:
    body = b"".join(sse_json(e, event=e["type"]) for e in [start(), *stop("end_turn")]) + b"data: [DONE]\n\n"
    events = await collect(client_for(body).stream_chat(USER, [], ""))
    assert events[-1] == {"type": "done", "stopReason": "stop"}


async def test_body_ending_before_message_stop_is_incomplete() -> None:
    events = await collect(client_for([start(), stop("end_turn")[0]]).stream_chat(USER, [], ""))
    assert [(e["type"], e.get("code")) for e in events] == [("error", "incomplete_stream")]


async def test_error_event_without_event_name() -> None:
    body = sse_json(start()) + b'data: {"type":"error","error":{"type":"api_error","message":"Internal"}}\n\n'
    events = await collect(client_for(body).stream_chat(USER, [], ""))
    assert [(e["type"], e.get("code"), e.get("message")) for e in events] == [("error", "api_error", "Internal")]


async def test_non_streamed_message_body() -> None:
    message = {"type": "message", "role": "assistant", "stop_reason": "tool_use",
               "content": [{"type": "text", "text": "Sure."},
                           {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Rome"}}],
               "usage": {"input_tokens": 4, "output_tokens": 6}}
    events = await collect(client_for(json.dumps(message).encode(), content_type="application/json")
                           .stream_chat(USER, GET_WEATHER, ""))
    assert events == [{"type": "delta", "content": "Sure."},
                      {"type": "tool_call_start", "id": "toolu_9", "name": "get_weather"},
                      {"type": "tool_call_delta", "id": "toolu_9", "args": "{\"city\":\"Rome\"}"},
                      {"type": "tool_call_end", "id": "toolu_9"},
                      {"type": "usage", "inputTokens": 4, "outputTokens": 6},
                      {"type": "done", "stopReason": "tool_calls"}]


async def test_non_streamed_message_with_server_tools_gives_only_the_client_call() -> None:
    """docs/providers.md "Anthropic": provider-run tools and their results are not client calls."""
    message = {"type": "message", "role": "assistant", "stop_reason": "tool_use",
               "content": [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                            "input": {"query": "Rome weather"}},
                           {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                           {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "station", "server_name": "s",
                            "input": {}},
                           {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "content": []},
                           {"type": "tool_use", "id": "toolu_7", "name": "get_weather", "input": {"city": "Rome"}}],
               "usage": {"input_tokens": 4, "output_tokens": 6}}
    events = await collect(client_for(json.dumps(message).encode(), content_type="application/json")
                           .stream_chat(USER, GET_WEATHER, ""))
    assert [e["type"] for e in events] == ["tool_call_start", "tool_call_delta", "tool_call_end", "usage", "done"]
    assert {e["id"] for e in events if e["type"].startswith("tool_call")} == {"toolu_7"}
