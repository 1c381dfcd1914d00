"""``POST /ai/chat`` through Django's async client against the real view and a loopback
provider: the answer byte for byte, every refusal in order, upstream failures, retries,
and the provider key kept out of everything (docs/api.md "`POST /ai/chat`")."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.test import AsyncClient

from jxai_app.models import UserLimits
from tests.app.apisupport import (  # noqa: F401  (fixtures)
    SENTINEL_KEY,
    bearer,
    fake,
    frames,
    post_chat,
    problem_of,
    read_all,
    token,
)
from tests.support.fake_provider import FakeProvider, Script, json_response, openai_chunk, openai_text_stream, sse

pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"prompt_tokens": 12, "completion_tokens": 3}


async def test_a_streamed_answer_is_relayed_byte_for_byte(fake: FakeProvider, token: str) -> None:
    fake.add(Script(writes=openai_text_stream(["Hel", "lo \"wörld\"\n✓"], usage=USAGE)))
    payload = {"messages": [{"role": "user", "content": "hi"}], "systemPrompt": "Be brief.", "model": "fast"}
    response = await post_chat(AsyncClient(), payload, bearer(token))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    assert response["X-Accel-Buffering"] == "no"
    assert not response.has_header("Connection")
    raw = await read_all(response)
    assert raw == (
        'data: {"type":"delta","content":"Hel"}\n\n'
        'data: {"type":"delta","content":"lo \\"wörld\\"\\n✓"}\n\n'
        'data: {"type":"usage","inputTokens":12,"outputTokens":3}\n\n'
        'data: {"type":"done","stopReason":"stop"}\n\n'
    ).encode("utf-8")
    [sent] = fake.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {SENTINEL_KEY}"
    assert sent.json["model"] == "fake-model-1"
    assert sent.json["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert "tools" not in sent.json
    assert token not in sent.body.decode() and all(token not in v for v in sent.headers.values())


async def test_absent_members_take_their_defaults(fake: FakeProvider, token: str) -> None:
    fake.add(Script(writes=openai_text_stream(["ok"])))
    response = await post_chat(AsyncClient(), {}, bearer(token))
    assert frames(await read_all(response))[-1] == {"type": "done", "stopReason": "stop"}
    [sent] = fake.requests
    assert sent.json["model"] == "fake-model-1"  # the default role
    assert sent.json["messages"] == [{"role": "system", "content": ""}]


async def test_tools_are_forwarded_and_tool_calls_stream_back(fake: FakeProvider, token: str) -> None:
    from tests.support.fake_provider import openai_tool_call_stream

    fake.add(Script(writes=openai_tool_call_stream("call_1", "get_time", ['{"tz":', '"UTC"}'])))
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "t?"}], "tools": tools},
                               bearer(token))
    assert frames(await read_all(response)) == [
        {"type": "tool_call_start", "id": "call_1", "name": "get_time"},
        {"type": "tool_call_delta", "id": "call_1", "args": '{"tz":'},
        {"type": "tool_call_delta", "id": "call_1", "args": '"UTC"}'},
        {"type": "tool_call_end", "id": "call_1"},
        {"type": "done", "stopReason": "tool_calls"},
    ]
    assert fake.requests[0].json["tools"] == tools


# -- refusals, in order ---------------------------------------------------------------------
def _too_long_message(chars: int) -> dict[str, Any]:
    return {"role": "user", "content": "x" * chars}


@pytest.fixture
def small_limits(settings: Any, fake: FakeProvider) -> Any:
    settings.JXAI_MAX_BODY_BYTES = 4000
    settings.JXAI_MAX_MESSAGES = 3
    settings.JXAI_MAX_MESSAGE_CHARS = 100
    return settings


BIG_INVALID = b"{" + b" " * 5000  # over the body limit and not JSON either


@pytest.mark.parametrize(
    ("case", "payload", "auth", "status", "slug", "detail"),
    [
        ("no credentials", BIG_INVALID, False, 401, "unauthorized", "Log in, or send a jxai API token"),
        ("body over the limit", BIG_INVALID, True, 413, "payload-too-large",
         "The request body is larger than this gateway accepts (4000 bytes)."),
        ("not JSON", b'{"messages": 5', True, 400, "invalid-request", "Invalid JSON body"),
        ("empty body", b"", True, 400, "invalid-request", "Invalid JSON body"),
        ("byte-order mark", b'\xef\xbb\xbf{"messages": []}', True, 400, "invalid-request", "Invalid JSON body"),
        ("JSON null", b"null", True, 400, "invalid-request", "The request body must be a JSON object."),
        ("a list", b"[]", True, 400, "invalid-request", "The request body must be a JSON object."),
        ("messages a string", {"messages": "hi", "model": "nope"}, True, 400, "invalid-request",
         "messages must be an array"),
        ("messages null", {"messages": None}, True, 400, "invalid-request", "messages must be an array"),
        ("too many messages", {"messages": [_too_long_message(500)] * 4}, True, 413, "payload-too-large",
         "The request carries 4 messages; this gateway accepts at most 3."),
        ("a message not an object", {"messages": ["hi"]}, True, 400, "invalid-request",
         "messages[0] must be an object with a string role."),
        ("a message too long", {"messages": [{"role": "user", "content": "ok"}, _too_long_message(101)],
                                "model": "nope"}, True, 413, "payload-too-large",
         "messages[1] has 101 characters; this gateway accepts at most 100 per message."),
        ("text parts too long", {"messages": [{"role": "user", "content": [{"type": "text", "text": "y" * 101}]}]},
         True, 413, "payload-too-large", "messages[0] has 101 characters"),
        ("system prompt too long", {"systemPrompt": "s" * 101}, True, 413, "payload-too-large",
         "systemPrompt has 101 characters"),
        ("tools not a list", {"tools": {"a": 1}}, True, 400, "invalid-request", "tools must be an array of objects."),
        ("model not a string", {"model": 7}, True, 400, "invalid-request", "model must be a string"),
        ("unknown model", {"model": "nope"}, True, 400, "invalid-request",
         "Unknown model 'nope'; models you may use: fast, plain."),
        ("tools to a model without tools", {"model": "plain", "tools": [{"type": "function"}]}, True, 501,
         "capability-unavailable", "configured without tool support"),
    ],
)
async def test_each_refusal_in_order_never_contacts_the_provider(
    small_limits: Any, fake: FakeProvider, token: str, user: Any, case: str, payload: Any, auth: bool,
    status: int, slug: str, detail: str,
) -> None:
    # A user who is also over quota: every case above must be refused before that check.
    await UserLimits.objects.acreate(user=user, tokens_per_day=1)
    from jxai_app.db import db_call
    from jxai_app.policy import ratelimit

    await db_call(ratelimit.record_usage, user, {"inputTokens": 5, "outputTokens": 5}, estimated=False)
    response = await post_chat(AsyncClient(), payload, bearer(token) if auth else {})
    assert response.status_code == status, case
    doc = problem_of(response)
    assert doc["type"] == f"https://jxai.dev/problems/{slug}"
    assert doc["status"] == status
    assert doc["detail"].startswith(detail) or detail in doc["detail"]
    assert doc["error"] == doc["detail"]  # the error alias (docs/api.md "Problem documents")
    assert fake.requests == []


async def test_the_limits_themselves_are_accepted(small_limits: Any, fake: FakeProvider, token: str) -> None:
    fake.add(Script(writes=openai_text_stream(["a"])), Script(writes=openai_text_stream(["b"])))
    three = {"messages": [_too_long_message(100)] * 3}  # exactly M messages of exactly max chars
    response = await post_chat(AsyncClient(), three, bearer(token))
    assert response.status_code == 200
    await read_all(response)
    padded = json.dumps({"messages": []}).encode()
    padded = padded + b" " * (4000 - len(padded))  # exactly max_body_bytes passes
    response = await post_chat(AsyncClient(), padded, bearer(token))
    assert response.status_code == 200
    await read_all(response)
    assert len(fake.requests) == 2


async def test_other_methods_are_refused_with_allow(fake: FakeProvider, token: str) -> None:
    response = await AsyncClient().get("/ai/chat", headers=bearer(token))
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert problem_of(response)["type"].endswith("/method-not-allowed")


# -- upstream failures and retries ---------------------------------------------------------
async def test_an_upstream_500_becomes_an_error_event_after_bounded_retries(fake: FakeProvider, token: str) -> None:
    for _ in range(3):
        fake.add(json_response(500, {"error": {"message": "The engine is overloaded"}}))
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "hi"}]}, bearer(token))
    assert response.status_code == 200
    [event] = frames(await read_all(response))
    assert event["type"] == "error" and event["code"] == "500"
    assert event["message"] == "The engine is overloaded"
    assert event["problem"]["type"].endswith("/internal-error") and event["problem"]["status"] == 500
    assert event["problem"]["detail"] == "The engine is overloaded"
    assert len(fake.requests) == 3  # the first try and JXAI_UPSTREAM_RETRIES = 2


async def test_a_429_is_retried_and_the_caller_sees_one_clean_answer(fake: FakeProvider, token: str) -> None:
    fake.add(json_response(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "0"}),
             Script(writes=openai_text_stream(["after ", "retry"])))
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "hi"}]}, bearer(token))
    assert frames(await read_all(response)) == [
        {"type": "delta", "content": "after "}, {"type": "delta", "content": "retry"},
        {"type": "done", "stopReason": "stop"},
    ]
    assert len(fake.requests) == 2
    assert fake.requests[0].json == fake.requests[1].json


async def test_retries_are_off_when_configured_so(settings: Any, fake: FakeProvider, token: str) -> None:
    settings.JXAI_UPSTREAM_RETRIES = 0
    fake.add(json_response(503, {"error": {"message": "busy"}}), Script(writes=openai_text_stream(["never"])))
    response = await post_chat(AsyncClient(), {}, bearer(token))
    [event] = frames(await read_all(response))
    assert event["code"] == "503" and event["problem"]["type"].endswith("/upstream-failure")
    assert len(fake.requests) == 1


async def test_no_retry_once_output_began(fake: FakeProvider, token: str) -> None:
    failing = [openai_chunk({"content": "partial"}), sse(json.dumps({"error": {"message": "boom", "code": "oops"}}))]
    fake.add(Script(writes=failing), Script(writes=openai_text_stream(["never"])))
    response = await post_chat(AsyncClient(), {}, bearer(token))
    events = frames(await read_all(response))
    assert events[0] == {"type": "delta", "content": "partial"}
    assert events[1]["type"] == "error" and events[1]["code"] == "oops"
    assert events[1]["problem"]["type"].endswith("/upstream-failure")
    assert len(events) == 2 and len(fake.requests) == 1


async def test_a_cut_off_stream_is_an_incomplete_stream_error(fake: FakeProvider, token: str) -> None:
    fake.add(Script(writes=[openai_chunk({"content": "half"})]))
    response = await post_chat(AsyncClient(), {}, bearer(token))
    events = frames(await read_all(response))
    assert events == [{"type": "delta", "content": "half"}, events[1]]
    assert events[1]["code"] == "incomplete_stream"
    assert len(fake.requests) == 1


async def test_an_unreachable_provider_is_a_network_error_event(settings: Any, fake: FakeProvider, token: str) -> None:
    from jxai_app import conf
    from tests.app.apisupport import models_config

    config = models_config(fake)
    config["providers"]["fake"]["base_url"] = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    settings.JXAI_MODELS = config
    conf.reset_caches()
    response = await post_chat(AsyncClient(), {}, bearer(token))
    [event] = frames(await read_all(response))
    assert event["type"] == "error" and event["code"] == "network_error"
    assert event["message"].startswith("Network error: ")
    assert event["problem"]["type"].endswith("/upstream-failure")


# -- the provider key stays on the server ---------------------------------------------------
async def test_a_provider_echoing_its_key_never_gets_it_to_the_caller(
    fake: FakeProvider, token: str, caplog: pytest.LogCaptureFixture,
) -> None:
    def echo(request: Any) -> Script:
        return json_response(401, {"error": {"message": f"Incorrect API key provided: {request.headers['authorization']}"}})

    fake.handler = echo
    caplog.set_level(logging.DEBUG)
    response = await post_chat(AsyncClient(), {}, bearer(token))
    raw = await read_all(response)
    [event] = frames(raw)
    assert event["code"] == "401" and event["message"] == "Incorrect API key provided: Bearer [redacted]"
    assert SENTINEL_KEY.encode() not in raw
    models = await AsyncClient().get("/ai/models")
    assert SENTINEL_KEY.encode() not in models.content
    assert all(SENTINEL_KEY not in r.getMessage() for r in caplog.records)
    assert fake.requests[0].headers["authorization"] == f"Bearer {SENTINEL_KEY}"  # it was really used upstream
