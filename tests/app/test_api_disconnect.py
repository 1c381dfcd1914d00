"""A caller that goes away mid-answer closes the upstream request (docs/api.md "The event stream").

Driven through Django's real ASGI handler (not the test client), whose ``http.disconnect``
handling cancels the response; the fake provider must see its connection closed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.core.asgi import get_asgi_application

from jxai_app import conf

from jxai_app.core import gateway

from jxai_app.policy import ratelimit
from jxai_app.core.streaming.retry import RetryPolicy
from tests.app.apisupport import fake, token  # noqa: F401
from tests.support.fake_provider import FakeProvider, Script, openai_chunk

pytestmark = pytest.mark.django_db(transaction=True)


def _held_answer() -> Script:
    """One delta, then the provider keeps the response open (no finish, no end)."""
    return Script(writes=[openai_chunk({"role": "assistant", "content": ""}), openai_chunk({"content": "x" * 40})],
                  hold=True)


async def test_an_asgi_disconnect_closes_the_upstream_connection(fake: FakeProvider, token: str, user: Any) -> None:
    fake.add(_held_answer())
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/ai/chat", "raw_path": b"/ai/chat", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"authorization", f"Bearer {token}".encode())],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
    }
    first_frame = asyncio.Event()
    sent: list[dict[str, Any]] = []
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": body, "more_body": False}
        await first_frame.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            first_frame.set()

    app = get_asgi_application()
    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    start = sent[0]
    assert start["status"] == 200
    assert (b"Content-Type", b"text/event-stream") in start["headers"]
    assert sent[1]["body"] == b'data: {"type":"delta","content":"' + b"x" * 40 + b'"}\n\n'
    assert await asyncio.to_thread(fake.wait_closed, 2.0)
    # The partial answer still counts toward the user's quota (estimated: the provider sent no usage).
    assert await database_sync_to_async(ratelimit.tokens_used_today)(user) >= 10


async def test_closing_the_frame_iterator_closes_the_upstream_and_reports_usage(fake: FakeProvider) -> None:
    """The gateway's own contract, under any server: a consumer that stops reading (aclose)
    closes the upstream connection, and the outcome is reported once as ``disconnected``."""
    fake.add(_held_answer())
    limits = conf.get_limits()
    chat = gateway.parse_chat_request(b'{"messages":[{"role":"user","content":"hi"}]}', max_messages=limits.max_messages,
                                      max_message_chars=limits.max_message_chars)
    upstream = gateway.select_client(chat, None, registry=conf.get_model_registry(),
                                     timeouts=conf.get_client_timeouts(), retry=RetryPolicy(retries=2))
    outcomes: list[gateway.StreamOutcome] = []

    async def finish(outcome: gateway.StreamOutcome) -> None:
        outcomes.append(outcome)

    frames_out = gateway.stream_sse(upstream, chat, on_finish=finish)
    first = await anext(frames_out)
    assert first == b'data: {"type":"delta","content":"' + b"x" * 40 + b'"}\n\n'
    await frames_out.aclose()
    assert await asyncio.to_thread(fake.wait_closed, 2.0)
    [outcome] = outcomes
    assert outcome.terminal == "disconnected" and outcome.estimated
    assert outcome.usage["outputTokens"] == 10
