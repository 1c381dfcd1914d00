"""Network behaviour against a real HTTP server on 127.0.0.1 (docs/streaming.md "The client
interface", "Cancellation", "SSE framing", "Errors and their codes"): slow chunked writes,
stalls, timeouts, refused connections, connections dropped mid-body, endless lines, HTML
error pages, and closing the iterator early."""

from __future__ import annotations

import socket
import time

import pytest

from jxai_app.core.problems import type_uri
from jxai_app.core.streaming import AnthropicChatClient, ClientTimeouts, OpenAIChatClient, ProxyChatClient
from tests.core.streaming.conftest import USER, collect
from tests.support.fake_provider import (
    FakeProvider,
    Script,
    Write,
    anthropic_text_stream,
    json_response,
    openai_text_stream,
)

FAST = ClientTimeouts(connect=2.0, first_byte=0.3, idle=0.3)


def openai(fake: FakeProvider, timeouts: ClientTimeouts | None = None) -> OpenAIChatClient:
    return OpenAIChatClient(base_url=fake.url, model="m", api_key="k", timeouts=timeouts)


async def test_slow_chunked_writes_arrive_as_they_are_sent(fake: FakeProvider) -> None:
    parts = ["one ", "two ", "three ", "four"]
    fake.add(Script(writes=openai_text_stream(parts, usage={"prompt_tokens": 3, "completion_tokens": 4}),
                    delay=0.08, chunked=True))
    started = time.perf_counter()
    arrivals: list[float] = []
    events = []
    async for event in openai(fake).stream_chat(USER, [], "sys"):
        arrivals.append(time.perf_counter() - started)
        events.append(event.to_dict())
    assert events == [{"type": "delta", "content": p} for p in parts] + [
        {"type": "usage", "inputTokens": 3, "outputTokens": 4}, {"type": "done", "stopReason": "stop"}]
    # the first delta was delivered while the server was still writing (streaming, not buffering)
    assert arrivals[-1] - arrivals[0] >= 0.3


async def test_stalling_server_gives_idle_timeout(fake: FakeProvider) -> None:
    fake.add(Script(writes=openai_text_stream(["partial"]), stall_after=2))
    started = time.perf_counter()
    events = await collect(openai(fake, FAST).stream_chat(USER, [], "sys"))
    elapsed = time.perf_counter() - started
    assert events[0] == {"type": "delta", "content": "partial"}
    error = events[-1]
    assert len(events) == 2 and error["type"] == "error" and error["code"] == "timeout"
    assert error["problem"]["type"] == type_uri("upstream-timeout")
    assert error["problem"]["status"] == 504
    assert 0.25 <= elapsed < 3.0
    assert fake.wait_closed(2.0)


async def test_no_response_headers_gives_first_byte_timeout(fake: FakeProvider) -> None:
    fake.add(Script(writes=openai_text_stream(["late"]), headers_delay=10))
    started = time.perf_counter()
    events = await collect(openai(fake, FAST).stream_chat(USER, [], "sys"))
    elapsed = time.perf_counter() - started
    assert [(e["type"], e.get("code")) for e in events] == [("error", "timeout")]
    assert "0.3 s" in events[0]["message"]
    assert events[0]["problem"]["type"] == type_uri("upstream-timeout")
    assert elapsed < 3.0
    assert fake.wait_closed(2.0)


async def test_headers_without_body_give_first_byte_timeout(fake: FakeProvider) -> None:
    fake.add(Script(writes=[], hold=True))
    events = await collect(openai(fake, ClientTimeouts(first_byte=0.3, idle=30)).stream_chat(USER, [], "sys"))
    assert [(e["type"], e.get("code")) for e in events] == [("error", "timeout")]


async def test_connection_refused_is_network_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there any more
    client = OpenAIChatClient(base_url=f"http://127.0.0.1:{port}/v1", model="m")
    events = await collect(client.stream_chat(USER, [], "sys"))
    assert len(events) == 1 and events[0]["type"] == "error" and events[0]["code"] == "network_error"
    assert events[0]["message"].startswith("Network error: ")
    assert events[0]["problem"]["type"] == type_uri("upstream-failure")


async def test_connection_reset_mid_body_is_network_error(fake: FakeProvider) -> None:
    stream = openai_text_stream(["kept"], finish=None, done=False)
    fake.add(Script(writes=[*stream, b"data: {\"choi"], close_abruptly=True, delay=0.02))
    events = await collect(openai(fake).stream_chat(USER, [], "sys"))
    assert events[0] == {"type": "delta", "content": "kept"}
    assert len(events) == 2 and events[1]["code"] == "network_error"


async def test_body_shorter_than_content_length_is_network_error(fake: FakeProvider) -> None:
    """The server closes cleanly before the announced length: the body was cut in transit."""
    body = b"".join(openai_text_stream(["kept"], finish=None, done=False))
    fake.add(Script(writes=[body], chunked=False, content_length=len(body) + 100))
    events = await collect(openai(fake).stream_chat(USER, [], "sys"))
    assert events[0] == {"type": "delta", "content": "kept"}
    assert events[-1]["code"] == "network_error" and len(events) == 2


async def test_chunked_body_ending_without_finish_is_incomplete(fake: FakeProvider) -> None:
    fake.add(Script(writes=openai_text_stream(["cut"], finish=None, done=False), chunked=True))
    events = await collect(openai(fake).stream_chat(USER, [], "sys"))
    assert events[0] == {"type": "delta", "content": "cut"}
    assert events[1]["code"] == "incomplete_stream"
    assert events[1]["problem"]["type"] == type_uri("upstream-failure")


async def test_endless_line_is_line_too_long(fake: FakeProvider) -> None:
    piece = b"x" * 65536
    fake.add(Script(writes=[b"data: {\"a\":\"", *[piece] * 40], hold=True))
    events = await collect(openai(fake).stream_chat(USER, [], "sys"))
    assert [(e["type"], e.get("code")) for e in events] == [("error", "line_too_long")]
    assert events[0]["problem"]["type"] == type_uri("upstream-failure")
    assert fake.wait_closed(2.0)


async def test_html_error_page(fake: FakeProvider) -> None:
    page = (b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1>"
            b"</center><hr><center>nginx</center></body></html>")
    fake.add(Script(status=502, content_type="text/html", writes=[page], chunked=False))
    events = await collect(openai(fake).stream_chat(USER, [], "sys"))
    assert len(events) == 1
    assert events[0]["message"] == "502 Bad Gateway" and events[0]["code"] == "502"
    assert events[0]["problem"] == {"type": type_uri("upstream-failure"), "title": "Upstream failure",
                                    "status": 502, "detail": "502 Bad Gateway"}


async def test_html_page_with_200_is_unexpected_response(fake: FakeProvider) -> None:
    fake.add(Script(status=200, content_type="text/html; charset=utf-8",
                    writes=[b"<html><body>Please log in to the Wi-Fi</body></html>"], chunked=False))
    events = await collect(openai(fake).stream_chat(USER, [], "sys"))
    assert [(e["type"], e.get("code")) for e in events] == [("error", "unexpected_response")]


@pytest.mark.parametrize(("status", "slug"), [(429, "rate-limited"), (504, "upstream-timeout"), (401, "unauthorized"),
                                              (418, "invalid-request"), (507, "internal-error")])
async def test_status_to_problem_type(fake: FakeProvider, status: int, slug: str) -> None:
    fake.add(json_response(status, {"error": {"message": "nope"}}, headers={"Retry-After": "3"}))
    events = await collect(openai(fake).stream_chat(USER, [], "sys"))
    assert events == [{"type": "error", "message": "nope", "code": str(status),
                       "problem": {"type": type_uri(slug), "title": events[0]["problem"]["title"],
                                   "status": events[0]["problem"]["status"], "detail": "nope"}}]


async def test_error_body_is_read_only_up_to_64_kib(fake: FakeProvider) -> None:
    fake.add(Script(status=500, content_type="text/plain", writes=[b"e" * 65536] * 50, hold=True))
    started = time.perf_counter()
    events = await collect(openai(fake).stream_chat(USER, [], "sys"))
    assert events[0]["code"] == "500" and events[0]["message"].startswith("eee")
    assert time.perf_counter() - started < 3.0
    assert fake.wait_closed(2.0)


async def test_aclose_closes_the_upstream_connection(fake: FakeProvider) -> None:
    fake.add(Script(writes=openai_text_stream(["first", "second"], finish=None, done=False)[:2], hold=True))
    stream = openai(fake).stream_chat(USER, [], "sys")
    first = await stream.__anext__()
    assert first.to_dict() == {"type": "delta", "content": "first"}
    await stream.aclose()  # type: ignore[attr-defined]
    assert fake.wait_closed(2.0)


async def test_breaking_out_after_done_leaves_nothing_open(fake: FakeProvider) -> None:
    fake.add(Script(writes=openai_text_stream(["a"]), hold=True))  # [DONE] sent, connection held
    events = await collect(openai(fake).stream_chat(USER, [], "sys"))
    assert events[-1] == {"type": "done", "stopReason": "stop"}
    assert fake.wait_closed(2.0), "the client kept the held connection open after [DONE]"


async def test_anthropic_against_loopback(fake: FakeProvider) -> None:
    fake.add(Script(writes=anthropic_text_stream(["Hi", " there"], input_tokens=7, output_tokens=2), delay=0.01))
    client = AnthropicChatClient(base_url=fake.url, model="claude-x", api_key="sk-ant", max_tokens=99)
    events = await collect(client.stream_chat(USER, [], "Be brief."))
    assert events == [{"type": "delta", "content": "Hi"}, {"type": "delta", "content": " there"},
                      {"type": "usage", "inputTokens": 7, "outputTokens": 2},
                      {"type": "done", "stopReason": "stop"}]
    request = fake.requests[0]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant" and request.headers["anthropic-version"] == "2023-06-01"
    assert request.json["system"] == "Be brief." and request.json["max_tokens"] == 99


async def test_proxy_stall_gives_timeout(fake: FakeProvider) -> None:
    fake.add(Script(writes=[Write(b'data: {"type":"delta","content":"x"}\n\n')], hold=True))
    client = ProxyChatClient(chat_url=fake.base + "/ai/chat", timeouts=FAST)
    events = await collect(client.stream_chat(USER, [], ""))
    assert [e["type"] for e in events] == ["delta", "error"] and events[1]["code"] == "timeout"
