"""One user must not slow the worker for everyone (docs/websocket.md "Limits"): expensive
requests are rate-limited per socket with a ``rate-limited`` error frame, a ``subscribe`` to
a conversation whose snapshot is still queued is coalesced with it, and a socket that stops
reading is closed with 4500 once its unsent bytes pass ``JXAI_WS_MAX_UNSENT_BYTES`` — while
another user's socket keeps its answers; the user's sockets waiting for the same snapshot
share one build of it (``jxai_app.turns.snapshots``).

Real parts: one ``daphne`` worker of this checkout on the test database, protocol-level
clients (``WsClient`` on the ``websockets`` library, and a raw socket that writes frames and
reads nothing), the real store. The attack's figures (the other user's worst ``list``, the
worker's memory) are measured by ``bench/snapshot_flood.py``, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync_to_async

from jxai_app.turns import snapshots
from tests.app.store_support import saved_answer
from tests.app.turns_support import Tab, hub, models_config  # noqa: F401  (fixture)
from tests.support.database import database_url
from tests.support.workers import ROOT, Worker, WsClient, deaf_socket, session_cookie, start_workers, ws_frame

pytestmark = pytest.mark.django_db(transaction=True)

UNSENT = 1024 * 1024
"""The worker's ``JXAI_WS_MAX_UNSENT_BYTES`` here."""


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    from django.db import connection

    env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict),
           "JXAI_MODELS_JSON": json.dumps(models_config("http://127.0.0.1:9/v1")), "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "PYTHONUNBUFFERED": "1", "DJANGO_LOG_LEVEL": "INFO", "JXAI_WS_MAX_UNSENT_BYTES": str(UNSENT),
           "JXAI_WS_EXPENSIVE_BURST": "10", "JXAI_WS_EXPENSIVE_RATE": "0.5"}
    env.pop("JXAI_MODELS_FILE", None)
    [started] = start_workers(["a"], env, tmp_path)
    try:
        yield started
    finally:
        started.stop()
        print(started.log()[-3000:])


async def _answers_until_list(client: WsClient) -> list[dict[str, Any]]:
    """Ask for the list and return every frame received up to its answer (the answers to the
    requests sent before it come first: the socket answers in order)."""
    start = len(client.frames)
    await client.send(type="list")
    await client.until(lambda f: f["type"] == "conversations", timeout=60)
    return client.frames[start:]


async def test_expensive_requests_are_rate_limited_per_socket_and_subscribes_coalesced(
        user: Any, other_user: Any, worker: Worker) -> None:
    cid = await sync_to_async(saved_answer)(user, 2000)
    cookie = await sync_to_async(session_cookie)(user)
    async with WsClient(worker.port, cookie) as searching, WsClient(worker.port, cookie) as subscribing:
        for _ in range(30):
            await searching.ws.send(json.dumps({"type": "search", "query": "work"}))
        answers = await _answers_until_list(searching)
        results = [f for f in answers if f["type"] == "search_results"]
        refused = [f for f in answers if f["type"] == "error"]
        assert len(results) + len(refused) == 30 and 10 <= len(results) < 30
        assert {(f["code"], f["request"], f["problem"]["status"]) for f in refused} == {("rate-limited", "search", 429)}
        assert all(f["problem"]["retry_after"] >= 1 for f in refused)

        for _ in range(20):  # one write: the first runs, the others wait queued
            await subscribing.ws.send(json.dumps({"type": "subscribe", "conversationId": cid}))
        answers = await _answers_until_list(subscribing)
        snapshots = [f for f in answers if f["type"] == "snapshot"]
        refused = [f for f in answers if f["type"] == "error"]
        assert snapshots and all(f["conversationId"] == cid for f in snapshots)
        assert len(snapshots) + len(refused) < 20  # some were coalesced with a queued snapshot
        assert {f["code"] for f in refused} <= {"rate-limited"}

    async with WsClient(worker.port, await sync_to_async(session_cookie)(other_user)) as other:
        assert (await _answers_until_list(other))[-1]["type"] == "conversations"  # other sockets are not limited


async def test_a_socket_that_stops_reading_is_closed_with_4500_and_others_keep_their_answers(
        user: Any, other_user: Any, worker: Worker) -> None:
    cid = await sync_to_async(saved_answer)(user, 2_000_000)
    reader, writer, raw = await deaf_socket(worker.port, await sync_to_async(session_cookie)(user))
    with contextlib.suppress(ConnectionResetError):  # the server may give up before the last one
        for _ in range(10):  # apart, so that each is a snapshot of its own (none coalesced): 20 MB unread
            writer.write(ws_frame(json.dumps({"type": "subscribe", "conversationId": cid})))
            await writer.drain()
            await asyncio.sleep(0.3)
    async with WsClient(worker.port, await sync_to_async(session_cookie)(other_user)) as other:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while "(JXAI_WS_MAX_UNSENT_BYTES); closing with 4500" not in worker.log():
            assert loop.time() < deadline, worker.log()[-2000:]
            assert (await _answers_until_list(other))[-1]["type"] == "conversations"
            await asyncio.sleep(0.1)
        # The server gives the connection up: reading what it had sent ends (or is reset).
        writer.transport.resume_reading()
        async with asyncio.timeout(60):
            with contextlib.suppress(ConnectionResetError):
                while await reader.read(2**20):
                    pass
        assert (await _answers_until_list(other))[-1]["type"] == "conversations"
    raw.close()


async def test_sockets_waiting_for_the_same_snapshot_share_one_build(
        user: Any, hub: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three of the user's sockets ask while the worker's slot is busy: they get one build (one load of the conversation, the same texts),
    and a socket asking after that build started gets one of its own."""
    cid = await sync_to_async(saved_answer)(user, 20_000)
    loads: list[str] = []
    real_load = snapshots._load

    def counted_load(owner: Any, conversation_id: Any) -> Any:
        loads.append(str(conversation_id))
        return real_load(owner, conversation_id)

    monkeypatch.setattr(snapshots, "_load", counted_load)
    tabs = [await Tab(user).open() for _ in range(4)]
    slot = snapshots.big_work_slot()
    async with slot:  # the worker is busy with someone else's snapshot
        for tab in tabs[:3]:
            await tab.send(type="subscribe", conversationId=cid)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while hub.delivery.follower_count(uuid.UUID(cid)) < 3:  # each followed, then waits for the slot
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
    got = [await tab.until(lambda f: f["type"] == "snapshot", timeout=30) for tab in tabs[:3]]
    assert loads == [cid]
    assert got[0]["messages"] and all(frame == got[0] for frame in got)
    await tabs[3].send(type="subscribe", conversationId=cid)
    assert (await tabs[3].until(lambda f: f["type"] == "snapshot", timeout=30)) == got[0]
    assert loads == [cid, cid]
    for tab in tabs:
        await tab.close()
