"""Proxy client: request shape and headers, lazily resolved chat URL, and event validation
(docs/streaming.md "Proxy client")."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from jxai_app.core.errors import ConfigurationError
from jxai_app.core.streaming import ProxyChatClient
from tests.core.streaming.conftest import GET_WEATHER, USER, collect

DONE = b'data: {"type":"done","stopReason":"stop"}\n\n'


def transport(seen: list[httpx.Request], body: bytes = DONE, status: int = 200,
              content_type: str = "text/event-stream") -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, headers={"Content-Type": content_type}, content=body)

    return httpx.MockTransport(handler)


async def test_request_without_optional_headers() -> None:
    seen: list[httpx.Request] = []
    client = ProxyChatClient(chat_url="https://jxai.test/ai/chat", transport=transport(seen))
    assert await collect(client.stream_chat(USER, GET_WEATHER, "sys")) == [{"type": "done", "stopReason": "stop"}]
    body = json.loads(seen[0].content)
    assert list(body) == ["messages", "tools", "systemPrompt", "model"]
    assert body == {"messages": USER, "tools": GET_WEATHER, "systemPrompt": "sys", "model": "gpt-4o"}
    assert "x-api-key" not in seen[0].headers and "x-api-base-url" not in seen[0].headers


async def test_request_with_key_and_base_url() -> None:
    seen: list[httpx.Request] = []
    client = ProxyChatClient(chat_url="https://jxai.test/ai/chat", model="m", api_key="tok",
                             api_base_url="https://llm.test/v1", transport=transport(seen))
    await collect(client.stream_chat(USER, [], ""))
    assert seen[0].headers["x-api-key"] == "tok" and seen[0].headers["x-api-base-url"] == "https://llm.test/v1"
    assert json.loads(seen[0].content)["model"] == "m"


@pytest.mark.parametrize("make_async", [False, True])
async def test_chat_url_resolved_once_and_reused(make_async: bool) -> None:
    seen: list[httpx.Request] = []
    calls: list[int] = []

    def resolve() -> str:
        calls.append(1)
        return "https://jxai.test/resolved"

    async def resolve_async() -> str:
        return resolve()

    client = ProxyChatClient(chat_url=resolve_async if make_async else resolve, transport=transport(seen))
    await asyncio.gather(collect(client.stream_chat(USER, [], "")), collect(client.stream_chat(USER, [], "")))
    await collect(client.stream_chat(USER, [], ""))
    assert len(calls) == 1
    assert [str(r.url) for r in seen] == ["https://jxai.test/resolved"] * 3


async def test_signal_during_resolution_cancels_without_a_request() -> None:
    seen: list[httpx.Request] = []
    signal = asyncio.Event()

    async def slow() -> str:
        await asyncio.sleep(5)
        return "https://jxai.test/x"

    client = ProxyChatClient(chat_url=slow, transport=transport(seen))
    asyncio.get_running_loop().call_later(0.05, signal.set)
    events = await asyncio.wait_for(collect(client.stream_chat(USER, [], "", signal=signal)), 1.0)
    assert events == [{"type": "done", "stopReason": "cancelled"}] and seen == []


async def test_resolution_failure_after_abort_is_cancelled() -> None:
    signal = asyncio.Event()

    async def failing() -> str:
        signal.set()
        raise OSError("vault unreachable")

    client = ProxyChatClient(chat_url=failing, transport=transport([]))
    assert await collect(client.stream_chat(USER, [], "", signal=signal)) == [{"type": "done",
                                                                               "stopReason": "cancelled"}]


async def test_resolution_failure_raises_configuration_error() -> None:
    def failing() -> str:
        raise OSError("vault unreachable")

    client = ProxyChatClient(chat_url=failing, transport=transport([]))
    with pytest.raises(ConfigurationError, match="vault unreachable"):
        await collect(client.stream_chat(USER, [], ""))


async def test_error_event_from_backend_gets_code_and_problem() -> None:
    body = b'data: {"type":"delta","content":"a"}\n\ndata: {"type":"error","message":"Upstream failed"}\n\n'
    events = await collect(ProxyChatClient(chat_url="https://x.test/c", transport=transport([], body))
                           .stream_chat(USER, [], ""))
    assert events[1]["code"] == "upstream_error" and events[1]["problem"]["detail"] == "Upstream failed"


async def test_cancelled_done_from_backend_passes_through() -> None:
    body = b'data: {"type":"done","stopReason":"cancelled"}\n\n'
    events = await collect(ProxyChatClient(chat_url="https://x.test/c", transport=transport([], body))
                           .stream_chat(USER, [], ""))
    assert events == [{"type": "done", "stopReason": "cancelled"}]


async def test_json_body_is_unexpected() -> None:
    events = await collect(ProxyChatClient(chat_url="https://x.test/c", transport=transport(
        [], b'{"ok": true}', content_type="application/json")).stream_chat(USER, [], ""))
    assert [(e["type"], e.get("code")) for e in events] == [("error", "unexpected_response")]


@pytest.mark.parametrize(("body", "code"), [(b'{"error":"expired","code":"cf_reconnect_required"}', "cf_reconnect_required"),
                                            (b'{"error":"expired","code":""}', "401"),
                                            (b'{"error":"expired","code":7}', "401")])
async def test_non_2xx_body_code(body: bytes, code: str) -> None:
    events: list[dict[str, Any]] = await collect(ProxyChatClient(
        chat_url="https://x.test/c", transport=transport([], body, 401, "application/json")).stream_chat(USER, [], ""))
    assert events[0]["code"] == code and events[0]["message"] == "expired"
    assert events[0]["problem"]["status"] == 401
