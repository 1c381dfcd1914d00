"""Request-side rules of the OpenAI-compatible client found against llama.cpp's server.

- an assistant ``tool_calls`` message with ``content: null`` goes out without ``content``;
- a forcing ``tool_choice`` applies only to the request that answers the user, and never
  names a tool the request does not offer;
- a delta carrying both ``tool_calls`` and the legacy ``function_call`` (llama.cpp sends
  each fragment in both) counts once.
"""

from __future__ import annotations

import json

from jxai_app.core.streaming import OpenAIChatClient
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream, sse

TOOLS = [{"type": "function", "function": {"name": "calculate", "parameters": {"type": "object"}}}]
FORCED = {"type": "function", "function": {"name": "calculate"}}


async def _collect(client: OpenAIChatClient, messages: list[dict]) -> list[dict]:
    return [e.to_dict() async for e in client.stream_chat(messages, TOOLS, "sys")]


async def test_null_content_of_a_tool_call_turn_is_left_out_and_forcing_stops_after_results() -> None:
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": "{}"}}]}
    history = [{"role": "user", "content": "6*7?"}, call, {"role": "tool", "tool_call_id": "c1", "content": "42"}]
    with FakeProvider([Script(writes=openai_text_stream(["ok"])), Script(writes=openai_text_stream(["ok"]))]) as fake:
        client = OpenAIChatClient(base_url=fake.url, model="m", tool_choice=FORCED)
        assert (await _collect(client, history[:1]))[-1] == {"type": "done", "stopReason": "stop"}
        assert (await _collect(client, history))[-1] == {"type": "done", "stopReason": "stop"}
    first, second = (r.json for r in fake.requests)
    assert first["tool_choice"] == FORCED  # the request answering the user is forced
    assert second["tool_choice"] == "auto"  # after a tool result it is not
    sent_call = second["messages"][2]
    assert "content" not in sent_call and sent_call["tool_calls"] == call["tool_calls"]
    assert history[1]["content"] is None  # the caller's history is not mutated


async def test_a_forced_tool_the_request_does_not_offer_becomes_auto() -> None:
    others = [{"type": "function", "function": {"name": "current_datetime", "parameters": {"type": "object"}}}]
    with FakeProvider([Script(writes=openai_text_stream(["ok"]))]) as fake:
        client = OpenAIChatClient(base_url=fake.url, model="m", tool_choice=FORCED)
        events = [e.to_dict() async for e in client.stream_chat([{"role": "user", "content": "6*7?"}], others, "sys")]
    assert events[-1] == {"type": "done", "stopReason": "stop"}
    assert fake.requests[0].json["tool_choice"] == "auto"


async def test_llamacpp_fragments_sent_in_tool_calls_and_function_call_count_once() -> None:
    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def both(args: str) -> dict:
        return {"tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                                "function": {"name": "calculate", "arguments": args}}],
                "function_call": {"name": "calculate", "arguments": args}}

    body = b"".join(sse(json.dumps(c)) for c in (
        chunk(both('{"expression":')), chunk(both(' "6*7"}')), chunk({}, "tool_calls"))) + sse("[DONE]")
    with FakeProvider([Script(writes=[body])]) as fake:
        events = await _collect(OpenAIChatClient(base_url=fake.url, model="m"), [{"role": "user", "content": "x"}])
    args = "".join(e["args"] for e in events if e["type"] == "tool_call_delta")
    assert json.loads(args) == {"expression": "6*7"}
    assert [e["type"] for e in events].count("tool_call_start") == 1
