"""Request-side rules of the OpenAI-compatible client found against llama.cpp's server.

- an assistant ``tool_calls`` message with ``content: null`` goes out without ``content``;
- a forcing ``tool_choice`` applies only to the request that answers the user, and never
  names a tool the request does not offer;
- a delta carrying both ``tool_calls`` and the legacy ``function_call`` (llama.cpp sends
  each fragment in both) counts once;
- with ``tool_choice_when`` the forcing applies only to a user message the pattern is found in;
- ``strip_leading_whitespace`` drops the whitespace each answer's text starts with;
- ``unreachable_message`` replaces ``Network error: …`` when nothing accepts the connection.
"""

from __future__ import annotations

import json

import pytest

from jxai_app.core.streaming import OpenAIChatClient
from jxai_app.core.tools.builtin import ARITHMETIC_PATTERN
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream, openai_tool_call_stream, sse
from tests.support.net import free_port

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


async def test_with_a_pattern_the_tool_is_forced_only_on_a_user_message_it_is_found_in() -> None:
    asked = ["What is 12 times 7?", "Write a poem about the sea.", [{"type": "text", "text": "And 3.5 / 2?"}],
             "What is the capital of Italy?"]
    with FakeProvider([Script(writes=openai_text_stream(["ok"])) for _ in asked]) as fake:
        client = OpenAIChatClient(base_url=fake.url, model="m", tool_choice=FORCED, tool_choice_when=ARITHMETIC_PATTERN)
        for content in asked:
            assert (await _collect(client, [{"role": "user", "content": content}]))[-1]["type"] == "done"
    assert [r.json["tool_choice"] for r in fake.requests] == [FORCED, "auto", FORCED, "auto"]


@pytest.mark.parametrize(("strip", "expected"), [(True, "The capital\n is Rome."), (False, " \n The capital\n is Rome.")])
async def test_leading_whitespace_of_each_answer_is_stripped_when_asked(strip: bool, expected: str) -> None:
    parts = [" ", "\n The", " capital\n", " is Rome."]
    with FakeProvider([Script(writes=openai_text_stream(parts)), Script(writes=openai_text_stream(parts))]) as fake:
        client = OpenAIChatClient(base_url=fake.url, model="m", strip_leading_whitespace=strip)
        for _ in range(2):  # every answer (every request of a turn), not only the first
            events = await _collect(client, [{"role": "user", "content": "Capital of Italy?"}])
            deltas = [e["content"] for e in events if e["type"] == "delta"]
            assert "".join(deltas) == expected
            assert all(deltas)  # a delta left empty by the stripping is not sent


async def test_stripping_keeps_the_text_before_a_tool_call_and_the_call() -> None:
    stream = openai_tool_call_stream("c1", "calculate", ['{"expression": "6 * 7"}'], text=["  6 times 7:"])
    with FakeProvider([Script(writes=stream)]) as fake:
        client = OpenAIChatClient(base_url=fake.url, model="m", strip_leading_whitespace=True)
        events = await _collect(client, [{"role": "user", "content": "6 times 7?"}])
    assert "".join(e["content"] for e in events if e["type"] == "delta") == "6 times 7:"
    assert json.loads("".join(e["args"] for e in events if e["type"] == "tool_call_delta")) == {"expression": "6 * 7"}


@pytest.mark.parametrize("told", ["The local model server at http://127.0.0.1/v1 is not answering.", None])
async def test_a_refused_connection_says_what_the_configuration_says(told: str | None) -> None:
    client = OpenAIChatClient(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", unreachable_message=told)
    [error] = await _collect(client, [{"role": "user", "content": "hi"}])
    assert (error["type"], error["code"]) == ("error", "network_error")
    if told is None:
        assert error["message"].startswith("Network error: ")
    else:
        assert error["message"] == error["problem"]["detail"] == told
