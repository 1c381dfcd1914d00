"""Branches across two daphne workers sharing PostgreSQL and Redis (marker ``scaleout``;
docs/websocket.md "Branches"): an edit, a switch and a regenerate asked on one worker reach
the tab on the other as snapshots of the new path, then the turn's frames. Skipped in the
embedded default (one process cannot share a conversation's tabs across workers there; the
same paths run in one process in ``test_ws_branches.py``)."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async as sync_to_async

from tests.app.cluster_support import SCALEOUT_MARKS, cluster, provider, saved_messages, subscribe  # noqa: F401
from tests.app.turns_support import MODEL, text_script
from tests.support.fake_provider import FakeProvider
from tests.support.workers import Cluster, WsClient, session_cookie

pytestmark = SCALEOUT_MARKS


def _contents(frame: dict[str, Any]) -> list[str]:
    return [m["content"] for m in frame["messages"]]


async def _idle(*clients: WsClient) -> None:
    for client in clients:
        await client.until_event("turn_end")
        await client.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")


async def test_branches_asked_on_one_worker_reach_the_other(user: Any, provider: FakeProvider,
                                                           cluster: Cluster) -> None:
    from jxai_app import store

    worker_a, worker_b = cluster.start("a", "b")
    cookie = await sync_to_async(session_cookie)(user)
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    cid = str(conversation.pk)
    provider.add(text_script(["A1"]), text_script(["A1 ", "edited"]), text_script(["A1 ", "again"]))

    async with WsClient(worker_a.port, cookie) as a, WsClient(worker_b.port, cookie) as b:
        await subscribe([a, b], cid)
        await a.send(type="send", conversationId=cid, text="Q1")
        await _idle(a, b)
        await b.send(type="subscribe", conversationId=cid)
        q1, a1 = (m["id"] for m in (await b.until(lambda f: f["type"] == "snapshot"))["messages"])

        await b.send(type="edit", conversationId=cid, messageId=q1, text="Q1 edited")
        edited = await a.until(lambda f: f["type"] == "snapshot" and f.get("turn") is not None, what="edit")
        assert _contents(edited) == ["Q1 edited"] and edited["messages"][0]["branch"]["count"] == 2
        await _idle(a, b)
        assert a.items[edited["turn"]["turnId"]] == b.items[edited["turn"]["turnId"]]

        await a.send(type="switch_branch", conversationId=cid, messageId=q1)
        back = await b.until(lambda f: f["type"] == "snapshot" and f["messages"][0]["id"] == q1, what="switch")
        assert _contents(back) == ["Q1", "A1"]

        await b.send(type="regenerate", conversationId=cid, messageId=a1)
        again = await a.until(lambda f: f["type"] == "message_saved" and f["message"]["content"] == "A1 again",
                              what="regenerated answer")
        assert again["message"]["branch"] == {"index": 1, "count": 2, "prev": a1, "next": None}
        await _idle(a, b)

    saved = await sync_to_async(saved_messages)(cid)
    assert sorted(content for _, content, _ in saved) == ["A1", "A1 again", "A1 edited", "Q1", "Q1 edited"]
