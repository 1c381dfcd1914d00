"""Two daphne workers sharing PostgreSQL and Redis (marker ``scaleout``; docs/turns.md "Delivery").

Runs in the scale-out pass (``make test-scaleout``: ``DATABASE_URL`` on PostgreSQL and
``REDIS_URL`` set). The embedded default (SQLite file, in-memory layer) cannot share state
between processes, so there the module is skipped with that reason; the same cross-worker
paths are covered in one process by ``test_turns.py`` (two hubs on one layer).

Two real ``daphne`` processes on their own ports serve ``project.asgi:application`` with the
test database and Redis (each through a test proxy: :class:`tests.support.workers.Cluster`);
a real websocket client (``WsClient``) logged in by session cookie talks to each. The
provider is a FakeProvider on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels.db import database_sync_to_async as sync_to_async

from tests.app.cluster_support import SCALEOUT_MARKS, cluster, provider, saved_messages, subscribe  # noqa: F401
from tests.app.turns_support import MODEL, text_script
from tests.support.fake_provider import FakeProvider
from tests.support.workers import Cluster, WsClient, session_cookie

pytestmark = SCALEOUT_MARKS


async def test_two_daphne_workers_share_a_conversation(user: Any, provider: FakeProvider, cluster: Cluster) -> None:
    from jxai_app import store

    worker_a, worker_b = cluster.start("a", "b")
    cookie = await sync_to_async(session_cookie)(user)
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    cid = str(conversation.pk)
    parts = [f"{i}|" for i in range(300)]
    provider.add(text_script(parts, delay=0.002), text_script([f"s{i} " for i in range(2000)], delay=0.01))

    async with WsClient(worker_a.port, cookie) as a, WsClient(worker_b.port, cookie) as b:
        await subscribe([a, b], cid)

        # 1. sent on A, streamed on A and B: the same events in the same order
        await a.send(type="send", conversationId=cid, text="Count for both workers.")
        for client in (a, b):
            await client.until_event("turn_end", outcome="complete")
            await client.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
        (first_turn,) = a.items
        assert a.items[first_turn] == b.items[first_turn]
        assert [i["seq"] for i in b.items[first_turn]] == list(range(1, len(b.items[first_turn]) + 1))
        assert "".join(i["event"]["content"] for i in b.items[first_turn] if i["event"]["type"] == "delta") == \
            "".join(parts)

        # 2. Stop sent through B stops the turn running on A
        await a.send(type="send", conversationId=cid, text="Talk until B stops you.")
        await b.until_event("delta")
        loop = asyncio.get_running_loop()
        asked = loop.time()
        await b.send(type="cancel", conversationId=cid)
        end = await b.until_event("turn_end", timeout=3)
        assert end["event"]["outcome"] == "cancelled" and loop.time() - asked < 1.0
        await a.until_event("turn_end", outcome="cancelled")
        assert provider.wait_closed(2.0)
        second_turn = next(t for t in a.items if t != first_turn)
        assert a.items[second_turn] == b.items[second_turn]
        await a.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")

        # 3. the saved conversation is identical whichever worker is asked
        snapshots = []
        for client in (a, b):
            await client.send(type="subscribe", conversationId=cid)
            snapshots.append(await client.until(lambda f: f["type"] == "snapshot"))
        assert snapshots[0] == snapshots[1]
        assert snapshots[0]["turn"] is None and snapshots[0]["conversation"]["status"] == "idle"

    saved = await sync_to_async(saved_messages)(cid)
    assert [(role, status) for role, _, status in saved] == [
        ("user", "complete"), ("assistant", "complete"), ("user", "complete")]
    assert saved[1][1] == "".join(parts)
    assert [m["content"] for m in snapshots[0]["messages"]] == [content for _, content, _ in saved]
