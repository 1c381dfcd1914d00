"""Finishing a pooled response leaves nothing behind in httpcore's pool
(jxai_app.core.streaming.release; docs/streaming.md "Connections": memory back to baseline).

httpcore 1.0 drops a request from its pool's list only when the response's close ran to its
end; a cancellation landing inside that close left the request, its connection and its
socket in the pool for good. ``bench/e2e.py`` found it: after a round of 500 streams the
worker held ~520 dead provider connections. These tests look at that list directly
(``_requests`` of the client's ``httpcore.AsyncConnectionPool``: the bookkeeping that leaked).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import httpx

from jxai_app.core.streaming import OpenAIChatClient
from jxai_app.core.streaming.pool import ConnectionPool
from jxai_app.core.streaming.release import finish_response
from tests.core.streaming.conftest import USER
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream


def _pool_requests(client: httpx.AsyncClient) -> int:
    return len(client._transport._pool._requests)  # type: ignore[attr-defined]


def _live_transports() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o).__name__ == "_SelectorSocketTransport")


async def test_a_caller_cancelled_during_the_close_leaves_no_request_in_the_pool() -> None:
    with FakeProvider([Script(writes=openai_text_stream(["a"]))] * 20) as fake:
        client = httpx.AsyncClient()
        try:
            for _ in range(20):
                request = client.build_request("POST", fake.url + "/chat/completions", json={"stream": True})
                response = await client.send(request, stream=True)
                closing = asyncio.ensure_future(finish_response(response))
                await asyncio.sleep(0)  # the close has begun: cancel it where httpcore would leak
                closing.cancel()
                await asyncio.gather(closing, return_exceptions=True)
            await asyncio.sleep(0.05)
            assert _pool_requests(client) == 0
        finally:
            await client.aclose()


async def test_many_streams_whose_last_chunk_is_late_leave_nothing_behind() -> None:
    # An answer's terminal event first, its body's end late: under load the drain's deadline
    # passes while httpcore reads the end and closes the connection (the provider answers
    # ``Connection: close``), the race that leaked two streams in three before the fix.
    pool = ConnectionPool()
    before = _live_transports()
    with FakeProvider(handler=lambda request: Script(writes=openai_text_stream(["x"] * 20), delay=0.01)) as fake:
        fake._server.socket.listen(1024)

        async def one() -> list[Any]:
            client = OpenAIChatClient(base_url=fake.url, model="m", pool=pool)
            return [e async for e in client.stream_chat(USER, None, None)]

        answers = await asyncio.gather(*(one() for _ in range(200)))
        assert all(type(a[-1]).__name__ == "DoneEvent" for a in answers)
        await asyncio.sleep(0.5)
        assert _pool_requests(pool.client()) == 0
        assert len(pool.client()._transport._pool.connections) <= pool.limits.max_keepalive_connections  # type: ignore[attr-defined]
        await pool.aclose()
    assert _live_transports() <= before
