"""Tool approval across real workers (marker ``scaleout``): a tool call waiting for approval is
answered from a tab on the other of two ``daphne`` workers, and after the worker that started
the turn was ``kill -9``'d.

Real parts as in ``test_faults.py``: ``daphne`` workers on PostgreSQL and Redis through the
cluster's proxies, websocket clients logged in by session cookie, a FakeProvider as the model
(what its later requests carried is what the model read). ``probe`` (``tests.app.ws_tools``)
requires approval through a ``ToolPolicy`` row. Skipped on the embedded default, like every
worker test (SQLite and the in-memory layer share nothing between processes).
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels.db import database_sync_to_async as sync_to_async

from tests.app.approval_support import calls_script, require_approval, tool_replies
from tests.app.cluster_support import SCALEOUT_MARKS, cluster, provider, subscribe  # noqa: F401  (fixtures)
from tests.app.turns_support import MODEL, text_script
from tests.support.fake_provider import FakeProvider
from tests.support.workers import Cluster, Frame, WsClient, kill_hard, session_cookie

pytestmark = SCALEOUT_MARKS

TOOLS = {"JXAI_TOOL_MODULES": "tests.app.ws_tools"}


def _setup(owner: Any) -> str:
    from jxai_app.models import Conversation

    require_approval("probe")
    return str(Conversation.objects.create(owner=owner, model=MODEL).pk)


def _state(conversation_id: str) -> tuple[str, str]:
    from jxai_app.models import Conversation, ToolCall

    call = ToolCall.objects.get(message__conversation_id=conversation_id, call_id="call_p")
    return str(Conversation.objects.get(pk=conversation_id).status), call.approval_state


setup = sync_to_async(_setup)
state = sync_to_async(_state)


def paused(frame: Frame) -> bool:
    return frame["type"] == "conversation" and frame["conversation"]["status"] == "awaiting_approval"


def idle(frame: Frame) -> bool:
    return frame["type"] == "conversation" and frame["conversation"]["status"] == "idle"


def card(frame: Frame) -> bool:
    """A saved message showing ``call_p`` waiting (what the page draws the card from)."""
    return frame["type"] == "message_saved" and any(
        (c.get("approval") or {}).get("state") == "awaiting_approval" for c in frame["message"]["toolCalls"])


async def test_approve_from_a_tab_on_the_other_worker(user: Any, provider: FakeProvider, cluster: Cluster) -> None:
    """The turn starts on worker A and pauses; the tab on worker B sees the card, approves, and
    the turn resumes on B: both tabs see the approved call's result and the answer."""
    worker_a, worker_b = cluster.start("a", "b", **TOOLS)
    cookie, cid = await sync_to_async(session_cookie)(user), await setup(user)
    provider.add(calls_script(("call_p", "probe", {"word": "across"}), ("call_c", "calculate", {"expression": "2+2"})),
                 text_script(["Both done."]))

    async with WsClient(worker_a.port, cookie) as first, WsClient(worker_b.port, cookie) as second:
        await subscribe([first, second], cid)
        await first.send(type="send", conversationId=cid, text="Probe across workers.")
        for tab in (first, second):
            await tab.until_event("tool_approval_request", callId="call_p")
            await tab.wait_for(card, what="the saved card")  # sent just before the request event
            await tab.until(paused, what="the paused conversation")
        assert await state(cid) == ("awaiting_approval", "awaiting_approval")
        assert len(provider.requests) == 1

        await second.send(type="approve", conversationId=cid, callId="call_p")
        for tab in (first, second):
            result = await tab.until_event("tool_result", callId="call_p")
            assert result["event"]["result"] == {"success": True, "data": {"echo": "across"}}
            await tab.until_event("turn_end", outcome="complete")
            await tab.until(idle, what="idle after the resumed turn")

    replies = tool_replies(provider, 1)
    assert replies["call_p"]["data"] == {"echo": "across"} and replies["call_c"]["data"]["result"] == 4
    assert await state(cid) == ("idle", "approved")
    assert f"resuming conversation {cid}" in worker_b.log() and f"resuming conversation {cid}" not in worker_a.log()


async def test_approve_after_the_starting_worker_was_killed(user: Any, provider: FakeProvider,
                                                            cluster: Cluster) -> None:
    """Worker A pauses the turn and is ``kill -9``'d. The surviving worker's lease watch does
    not take the paused turn for an interrupted one (it holds no lease), a new tab on B gets the
    pending card from its snapshot, approves, and the turn resumes and completes on B."""
    lease = 2
    worker_a, worker_b = cluster.start("a", "b", JXAI_TURN_LEASE_SECONDS=str(lease), **TOOLS)
    cookie, cid = await sync_to_async(session_cookie)(user), await setup(user)
    provider.add(calls_script(("call_p", "probe", {"word": "survivor"})), text_script(["Still here."]))

    async with WsClient(worker_a.port, cookie) as doomed:
        await subscribe([doomed], cid)
        await doomed.send(type="send", conversationId=cid, text="Probe, then lose the worker.")
        await doomed.until(paused, what="the paused conversation")
    kill_hard(worker_a)

    async with WsClient(worker_b.port, cookie) as survivor:
        # Several lease periods of B's watch (it looks every second) pass without a recovery.
        loop = asyncio.get_running_loop()
        await survivor.collect_until(loop.time() + 3 * lease + 1)
        assert await state(cid) == ("awaiting_approval", "awaiting_approval")
        await survivor.send(type="subscribe", conversationId=cid)
        snapshot = await survivor.until(lambda f: f["type"] == "snapshot", what="the snapshot")
        assert snapshot["conversation"]["status"] == "awaiting_approval"
        [pending] = [c for m in snapshot["messages"] for c in m["toolCalls"] if c["approval"]]
        assert (pending["id"], pending["approval"]["state"]) == ("call_p", "awaiting_approval")

        await survivor.send(type="approve", conversationId=cid, callId="call_p")
        await survivor.until_event("turn_end", outcome="complete")
        await survivor.until(idle, what="idle after the resumed turn")

    assert f"resuming conversation {cid}" in worker_b.log()
    assert tool_replies(provider, 1)["call_p"] == {"success": True, "data": {"echo": "survivor"}}
    assert await state(cid) == ("idle", "approved")
