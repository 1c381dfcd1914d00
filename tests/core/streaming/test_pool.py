"""Shared provider connections (jxai_app.core.streaming.pool): a provider that keeps connections
alive is reached over one warm connection, Stop still closes the stream's own connection, and a
kept connection the server dropped meanwhile is not the user's error.

The FakeProvider always answers ``Connection: close``, so these tests run their own small
HTTP/1.1 server on 127.0.0.1 that keeps connections open and records which client port
each request came from (one port = one TCP connection).
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jxai_app.core.streaming import OpenAIChatClient
from jxai_app.core.streaming.pool import ConnectionPool
from tests.core.streaming.conftest import USER, collect
from tests.support.fake_provider import openai_text_stream


class KeepAliveProvider:
    """An OpenAI-compatible endpoint that keeps connections alive. ``hold=True`` sends the
    first delta, then waits for the client to close the connection (``closed_by_client``);
    ``resets = n`` resets the connections of the next ``n`` requests instead of answering, and
    ``dropped`` (client ports) those of every request on those connections (a server that went
    away while they were idle in the pool)."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.hold = False
        self.resets = 0
        self.dropped: set[int] = set()
        self.closed_by_client = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.ports.append(self.client_address[1])
                if outer.resets or self.client_address[1] in outer.dropped:
                    outer.resets = max(0, outer.resets - 1)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True  # closed with linger 0: a reset, no answer
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                writes = openai_text_stream(["Hel", "lo"])
                for data in writes[:2] if outer.hold else writes:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                if outer.hold:
                    self._wait_for_close()
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _wait_for_close(self) -> None:
                sock: socket.socket = self.connection
                readable, _, _ = select.select([sock], [], [], 5.0)
                if readable and not sock.recv(65536):
                    outer.closed_by_client.set()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider() -> Iterator[KeepAliveProvider]:
    server = KeepAliveProvider()
    yield server
    server.stop()


def text(events: list[dict[str, Any]]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "delta")


async def test_a_pool_answers_over_one_kept_alive_connection(provider: KeepAliveProvider) -> None:
    pool = ConnectionPool()
    for _ in range(3):
        client = OpenAIChatClient(base_url=provider.url, model="m", pool=pool)  # a new client per turn
        events = await collect(client.stream_chat(USER, [], ""))
        assert text(events) == "Hello" and events[-1] == {"type": "done", "stopReason": "stop"}
    assert len(provider.ports) == 3 and len(set(provider.ports)) == 1
    await pool.aclose()


async def test_without_a_pool_every_answer_opens_its_own_connection(provider: KeepAliveProvider) -> None:
    for _ in range(2):
        events = await collect(OpenAIChatClient(base_url=provider.url, model="m").stream_chat(USER, [], ""))
        assert text(events) == "Hello"
    assert len(set(provider.ports)) == 2


async def test_stop_closes_the_streams_connection_and_the_pool_goes_on(provider: KeepAliveProvider) -> None:
    pool = ConnectionPool()
    client = OpenAIChatClient(base_url=provider.url, model="m", pool=pool)
    provider.hold = True
    signal = asyncio.Event()
    seen: list[dict[str, Any]] = []
    async for event in client.stream_chat(USER, [], "", signal=signal):
        seen.append(event.to_dict())
        if event.to_dict()["type"] == "delta":
            signal.set()
    assert seen[-1] == {"type": "done", "stopReason": "cancelled"}
    assert await asyncio.to_thread(provider.closed_by_client.wait, 1.0), "the upstream connection stayed open"
    provider.hold = False
    events = await collect(client.stream_chat(USER, [], ""))
    assert text(events) == "Hello" and len(set(provider.ports)) == 2  # a fresh connection after the cut one
    await pool.aclose()


async def test_a_kept_connection_reset_before_any_answer_is_tried_once_more_on_a_new_one(
        provider: KeepAliveProvider) -> None:
    pool = ConnectionPool()
    client = OpenAIChatClient(base_url=provider.url, model="m", pool=pool)
    assert text(await collect(client.stream_chat(USER, [], ""))) == "Hello"
    provider.resets = 1
    events = await collect(client.stream_chat(USER, [], ""))
    assert text(events) == "Hello" and events[-1] == {"type": "done", "stopReason": "stop"}, events
    assert len(provider.ports) == 3 and len(set(provider.ports)) == 2  # the kept one, reset; then a new one
    await pool.aclose()


async def test_the_second_try_is_on_a_new_connection_even_with_more_kept_ones(provider: KeepAliveProvider) -> None:
    """Two kept connections, both dropped by the server: the second try does not take the other
    stale one from the pool (make run's model server killed after a turn that kept two)."""
    pool = ConnectionPool()
    client = OpenAIChatClient(base_url=provider.url, model="m", pool=pool)
    answers = await asyncio.gather(*(collect(client.stream_chat(USER, [], "")) for _ in range(2)))
    assert [text(a) for a in answers] == ["Hello", "Hello"] and len(set(provider.ports)) == 2  # two kept
    provider.dropped = set(provider.ports)
    events = await collect(client.stream_chat(USER, [], ""))
    assert text(events) == "Hello" and events[-1] == {"type": "done", "stopReason": "stop"}, events
    assert len(set(provider.ports)) == 3  # a kept one, reset; then a new one
    await pool.aclose()


async def test_one_client_per_event_loop() -> None:
    pool = ConnectionPool()
    first = pool.client()
    assert pool.client() is first
    other = await asyncio.to_thread(lambda: asyncio.run(_client_of(pool)))
    assert other is not first
    await pool.aclose()
    assert first.is_closed and pool.client() is not first
    await pool.aclose()


async def _client_of(pool: ConnectionPool) -> Any:
    client = pool.client()
    await pool.aclose()
    return client


@pytest.mark.parametrize("scheme", ["http", "socks5"])
@pytest.mark.parametrize("pooled", [True, False])
async def test_a_loopback_provider_is_never_reached_through_a_proxy_from_the_environment(
        provider: KeepAliveProvider, monkeypatch: pytest.MonkeyPatch, pooled: bool, scheme: str) -> None:
    """With every proxy variable pointing at a port nothing listens on (a corporate proxy that
    cannot see this machine's loopback), the local provider still answers (docs/streaming.md
    "Connections")."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_proxy = f"{scheme}://127.0.0.1:{closed.getsockname()[1]}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, dead_proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    pool = ConnectionPool() if pooled else None
    for base_url in (provider.url, provider.url.replace("127.0.0.1", "localhost")):
        events = await collect(OpenAIChatClient(base_url=base_url, model="m", pool=pool).stream_chat(USER, [], ""))
        assert text(events) == "Hello" and events[-1] == {"type": "done", "stopReason": "stop"}, events
    if pool is not None:
        await pool.aclose()
