"""Turns that survive faults, with real parts (marker ``scaleout``).

Real ``daphne`` workers (:class:`tests.support.workers.Cluster`) serve
``project.asgi:application`` on the test database (PostgreSQL) and Redis, each through a
TCP proxy of the test's own, so an outage is played by cutting a proxy, never by touching
the shared servers. The model is a FakeProvider on 127.0.0.1; the tabs are real websocket
clients logged in by session cookie. One test per fault:

* a worker killed (``kill -9``) mid-turn: a follower on the other worker gets a terminal
  ``snapshot`` within 10 s, and the conversation takes a new send within 10 s;
* PostgreSQL unreachable for 10 s as a turn ends: ``saving`` meanwhile, then the answer
  saved whole and every tab told (``message_saved``, ``turn_end``);
* Redis unreachable: a new websocket connects and streams its own worker's turn;
* SIGTERM mid-turn: the turn finishes within the drain time and is saved, both sockets get
  ``turn_end`` then close with 4001 (going away); a send during the drain is refused ``service-unavailable``;
* 200 sends within a second at one worker: all complete, no event lost.

Beside those: the database away for longer than ``JXAI_STORE_RETRY_SECONDS`` (the turn ends
as an error on every tab, nothing stays half-written), and following across workers
resuming by itself once Redis is back.

The behaviour is the contract in ``docs/websocket.md`` and the settings
``JXAI_TURN_LEASE_SECONDS`` (default 6), ``JXAI_STORE_RETRY_SECONDS`` (default 120) and
``JXAI_DRAIN_SECONDS`` (default 30). :func:`test_a_turn_through_the_proxies` is the same
harness with no fault. The embedded default (SQLite file, in-memory layer) shares nothing
between processes: there the module is skipped with that reason.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async as sync_to_async

from jxai_app.turns.hub import CLOSE_GOING_AWAY

from tests.app.cluster_support import SCALEOUT_MARKS, cluster, provider, saved_messages, subscribe  # noqa: F401
from tests.app.turns_support import MODEL, text_script
from tests.support.fake_provider import FakeProvider, Script, Write, openai_text_stream
from tests.support.workers import Cluster, Frame, Worker, WsClient, kill_hard, make_users, session_cookie

pytestmark = SCALEOUT_MARKS

FAULT_DEADLINE = 10.0
"""Seconds within which a fault's terminal frame, or a new send's acceptance, must arrive."""


# -- helpers -----------------------------------------------------------------------------
def _new_conversation(owner: Any) -> str:
    from jxai_app.models import Conversation

    return str(Conversation.objects.create(owner=owner, model=MODEL).pk)


new_conversation = sync_to_async(_new_conversation)
saved = sync_to_async(saved_messages)


def _status(conversation_id: str) -> str:
    from jxai_app.models import Conversation

    return str(Conversation.objects.get(pk=conversation_id).status)


status = sync_to_async(_status)


def _half_written(conversation_id: str) -> list[Any]:
    """What is left streaming of the conversation: its status when ``streaming``, and its
    messages whose status is ``streaming``; empty when nothing is."""
    rows: list[Any] = [m for m in saved_messages(conversation_id) if m[2] == "streaming"]
    return rows + (["conversation streaming"] if _status(conversation_id) == "streaming" else [])


half_written = sync_to_async(_half_written)


def words(prefix: str, count: int) -> list[str]:
    """An answer's deltas: ``["<prefix>0 ", "<prefix>1 ", …]``."""
    return [f"{prefix}{i} " for i in range(count)]


def held_answer(provider: FakeProvider, parts: list[str], delay: float) -> threading.Event:
    """Queue an answer streaming ``parts`` (``delay`` s apart) that holds its last part, the
    finish chunk and ``[DONE]`` until the returned event is set: the turn's end on the test's cue."""
    gate = threading.Event()
    stream = openai_text_stream(parts)  # role, one chunk per part, finish, [DONE]
    provider.add(Script(writes=[*stream[:-3], Write(b"".join(stream[-3:]), gate=gate)], delay=delay))
    return gate


async def prepared(cluster: Cluster, user: Any, *names: str, **env: str) -> tuple[list[Worker], str, str]:
    """Start the workers ``names`` (``env`` added to theirs); return them, a session cookie
    of ``user`` and a new conversation of ``user``'s."""
    workers = cluster.start(*names, **env)
    return workers, await sync_to_async(session_cookie)(user), await new_conversation(user)


def ended(conversation_id: str) -> Callable[[Frame], bool]:
    """Matches the ``conversation`` frame that shows ``conversation_id`` no longer streaming."""
    return lambda f: (f["type"] == "conversation" and f["conversation"]["id"] == conversation_id
                      and f["conversation"]["status"] != "streaming")


def turn_ended(turn_id: str) -> Callable[[Frame], bool]:
    """Matches the ``events`` frame that carries the turn's ``turn_end``."""
    return lambda f: (f["type"] == "events" and f["turnId"] == turn_id
                      and any(i["event"]["type"] == "turn_end" for i in f["items"]))


def assistant_saved(content: str) -> Callable[[Frame], bool]:
    """Matches the ``message_saved`` frame of an assistant message with ``content``."""
    return lambda f: (f["type"] == "message_saved" and f["message"]["role"] == "assistant"
                      and f["message"]["content"] == content)


async def streaming(clients: list[WsClient]) -> str:
    """Wait until every client has received a ``delta``; return the turn id."""
    for client in clients:
        await client.until_event("delta")
    (turn_id,) = clients[0].items
    return turn_id


async def send_answered(client: WsClient, conversation_id: str, text: str, timeout: float) -> Frame:
    """Send ``text`` into the conversation; return the frame that answers it: the user
    message's ``message_saved`` (accepted) or an ``error`` frame (refused)."""
    since = len(client.frames)
    await client.send(type="send", conversationId=conversation_id, text=text)
    return await client.wait_for(
        lambda f: f["type"] == "error" or (f["type"] == "message_saved" and f["message"]["content"] == text),
        timeout, what=f"answer to the send {text!r}", since=since)


def assert_whole_turn(client: WsClient, turn_id: str, text: str) -> None:
    """The turn's items on ``client``: seq 1..n once each, in order, the deltas making
    ``text``, one ``turn_end`` (outcome complete) last."""
    items = client.items[turn_id]
    assert [i["seq"] for i in items] == list(range(1, len(items) + 1)), [i["seq"] for i in items]
    assert client.text(turn_id) == text
    ends = [e for e in client.events(turn_id) if e["type"] == "turn_end"]
    assert [e["outcome"] for e in ends] == ["complete"] and items[-1]["event"]["type"] == "turn_end"


# -- no fault: the harness ---------------------------------------------------------------
async def test_a_turn_through_the_proxies(user: Any, provider: FakeProvider, cluster: Cluster) -> None:
    """Two workers with the database and Redis through the proxies, a final chunk held by a
    gate: the turn streams on both workers, ends, and is saved; an idle worker given
    SIGTERM closes its socket and exits. (What today's code already does.)"""
    (worker_a, worker_b), cookie, cid = await prepared(cluster, user, "a", "b")
    parts = words("p", 30)
    gate = held_answer(provider, parts, 0.002)

    async with WsClient(worker_a.port, cookie) as owner, WsClient(worker_b.port, cookie) as follower:
        await subscribe([owner, follower], cid)
        answer = await send_answered(owner, cid, "Count through the proxies.", FAULT_DEADLINE)
        assert answer["type"] == "message_saved", answer
        for client in (owner, follower):
            await client.until(lambda f: f["type"] == "events" and client.text(f["turnId"]) == "".join(parts[:-1]),
                               what="every delta before the gate")
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(c.collect_until(loop.time() + 0.3) for c in (owner, follower)))
        assert not any(e["type"] == "turn_end" for c in (owner, follower) for t in c.items for e in c.events(t))
        gate.set()
        for client in (owner, follower):
            await client.until(ended(cid), what="the conversation idle again")
        (turn_id,) = owner.items
        for client in (owner, follower):
            assert_whole_turn(client, turn_id, "".join(parts))
            assert client.of_type("message_saved")[-1]["message"]["content"] == "".join(parts)

    assert [(r, s) for r, _, s in await saved(cid)] == [("user", "complete"), ("assistant", "complete")]
    assert await status(cid) == "idle"
    assert cluster.db_proxy.accepted >= 2 and cluster.redis_proxy.accepted >= 2, "a worker bypassed a proxy"

    async with WsClient(worker_b.port, cookie) as idle:
        await subscribe([idle], cid)
        worker_b.signal(signal.SIGTERM)
        await idle.until_closed(timeout=FAULT_DEADLINE)
    assert worker_b.wait_exit(FAULT_DEADLINE) is not None
    kill_hard(worker_a)
    assert worker_a.process.returncode == -signal.SIGKILL


# -- faults ------------------------------------------------------------------------------
async def test_killed_worker_turn_is_ended_for_followers_elsewhere(user: Any, provider: FakeProvider,
                                                                    cluster: Cluster) -> None:
    """``kill -9`` of the worker running a turn: within 10 s the follower on the other worker
    gets an unasked ``snapshot`` (no turn, not streaming, the partial answer gone) and a
    ``conversation`` frame with the new status; a new send there is accepted within 10 s."""
    (worker_a, worker_b), cookie, cid = await prepared(cluster, user, "a", "b")
    provider.add(text_script(words("long", 3000), delay=0.01), text_script(words("after", 5)))

    async with WsClient(worker_a.port, cookie) as owner, WsClient(worker_b.port, cookie) as follower:
        await subscribe([owner, follower], cid)
        await owner.send(type="send", conversationId=cid, text="Tell me a long story.")
        await streaming([owner, follower])
        loop = asyncio.get_running_loop()
        since = len(follower.frames)
        kill_hard(worker_a)
        deadline = loop.time() + FAULT_DEADLINE

        snapshot = await follower.wait_for(
            lambda f: f["type"] == "snapshot" and f["turn"] is None and f["conversation"]["status"] != "streaming",
            deadline - loop.time(), what="terminal snapshot after the kill", since=since)
        assert snapshot["conversationId"] == cid
        assert not any("long0" in m["content"] for m in snapshot["messages"]), "the partial answer is still there"
        await follower.wait_for(ended(cid), deadline - loop.time(), what="conversation frame after the kill",
                                since=since)

        answer = await send_answered(follower, cid, "Are you still there?", deadline - loop.time())
        assert answer["type"] == "message_saved", f"the send after the kill was refused: {answer}"
        await follower.until(ended(cid), what="the new turn's end")
        new_turn = next(t for t in follower.items if any(e["type"] == "turn_end" for e in follower.events(t)))
        assert_whole_turn(follower, new_turn, "".join(words("after", 5)))

    rows = await saved(cid)
    assert all(s == "complete" for _, _, s in rows) and not any("long0" in c for _, c, _ in rows), rows
    assert rows[-2:] == [("user", "Are you still there?", "complete"),
                         ("assistant", "".join(words("after", 5)), "complete")]


async def test_database_outage_at_the_end_of_a_turn_loses_nothing(user: Any, provider: FakeProvider,
                                                                  cluster: Cluster) -> None:
    """PostgreSQL cut (for both workers) for 10 s right as the answer's last chunk arrives:
    every tab (one per worker) gets one ``saving`` frame during the outage and no
    ``turn_end``; once the proxy is back the answer is saved whole and every tab gets the
    assistant ``message_saved``, ``turn_end`` (complete) and the conversation idle."""
    (worker_a, worker_b), cookie, cid = await prepared(cluster, user, "a", "b")
    parts = words("w", 40)
    answer = "".join(parts)
    gate = held_answer(provider, parts, 0.005)

    async with WsClient(worker_a.port, cookie) as owner, WsClient(worker_b.port, cookie) as follower:
        tabs = [owner, follower]
        await subscribe(tabs, cid)
        await owner.send(type="send", conversationId=cid, text="Answer, then the database goes away.")
        for tab in tabs:
            await tab.until(lambda f: f["type"] == "events" and tab.text(f["turnId"]) == "".join(parts[:-1]),
                            what="every delta before the held chunk")
        (turn_id,) = owner.items
        loop = asyncio.get_running_loop()
        cluster.db_proxy.cut()
        gate.set()
        back_at = loop.time() + 10.0
        await asyncio.gather(*(tab.collect_until(back_at) for tab in tabs))
        during = [list(tab.frames) for tab in tabs]
        cluster.db_proxy.restore()

        for tab, frames in zip(tabs, during):
            assert [f.get("turnId") for f in frames if f["type"] == "saving" and f.get("conversationId") == cid] == \
                [turn_id], f"expected one saving frame during the outage on {tab.port}; last frames: {tab.tail()}"
            assert not any(e["type"] == "turn_end" for e in tab.events(turn_id)), "turn_end before the answer was saved"
        for tab in tabs:
            await tab.wait_for(assistant_saved(answer), 20.0, what="assistant message_saved after the outage")
            await tab.wait_for(ended(cid), 20.0, what="conversation idle after the outage")
            assert_whole_turn(tab, turn_id, answer)
            assert len(tab.of_type("saving")) == 1

    assert await saved(cid) == [("user", "Answer, then the database goes away.", "complete"),
                                ("assistant", answer, "complete")]
    assert await status(cid) == "idle"


async def test_database_outage_past_the_retry_time_ends_the_turn_as_error(user: Any, provider: FakeProvider,
                                                                         cluster: Cluster) -> None:
    """PostgreSQL cut at the end of a turn for longer than ``JXAI_STORE_RETRY_SECONDS`` (3 s
    here): every tab gets an ``error`` event, then ``turn_end`` with outcome ``error``, while
    the database is still away; once it is back, nothing half-written stays (no message left
    streaming, the conversation not streaming)."""
    retry = 3.0
    (worker_a, worker_b), cookie, cid = await prepared(cluster, user, "a", "b",
                                                       JXAI_STORE_RETRY_SECONDS=str(int(retry)))
    parts = words("g", 20)
    gate = held_answer(provider, parts, 0.005)

    async with WsClient(worker_a.port, cookie) as owner, WsClient(worker_b.port, cookie) as follower:
        tabs = [owner, follower]
        await subscribe(tabs, cid)
        await owner.send(type="send", conversationId=cid, text="Answer, then the database stays away.")
        turn_id = await streaming(tabs)
        cluster.db_proxy.cut()
        gate.set()
        try:
            for tab in tabs:
                end = await tab.wait_for(turn_ended(turn_id), retry + 10, what="turn_end after giving up")
                assert [i["event"]["outcome"] for i in end["items"] if i["event"]["type"] == "turn_end"] == ["error"]
                kinds = [e["type"] for e in tab.events(turn_id)]
                assert "error" in kinds and kinds.index("error") < kinds.index("turn_end"), kinds
        finally:
            cluster.db_proxy.restore()

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15.0
    while left := await half_written(cid):
        assert loop.time() < deadline, f"half-written rows stayed after the database came back: {left}"
        await asyncio.sleep(0.2)


async def test_new_websocket_works_while_redis_is_cut(user: Any, provider: FakeProvider, cluster: Cluster) -> None:
    """Redis proxy cut after the worker used it: a new websocket connects (no HTTP 500) and a
    send on it streams a whole turn of its own worker through ``turn_end``, and is saved."""
    (worker,), cookie, cid = await prepared(cluster, user, "a")
    parts = words("r", 50)
    provider.add(text_script(parts, delay=0.002))

    async with WsClient(worker.port, cookie) as before:
        await subscribe([before], cid)  # the worker's channel layer is connected through the proxy
        assert cluster.redis_proxy.accepted >= 1
        cluster.redis_proxy.cut()
        async with WsClient(worker.port, cookie) as tab:
            answer = await send_answered(tab, cid, "Answer without Redis.", FAULT_DEADLINE)
            assert answer["type"] == "message_saved", f"the send without Redis was refused: {answer}"
            await tab.until(ended(cid), what="the turn's end without Redis")
            (turn_id,) = tab.items
            assert_whole_turn(tab, turn_id, "".join(parts))

    assert [(r, c) for r, c, _ in await saved(cid)] == [("user", "Answer without Redis."),
                                                        ("assistant", "".join(parts))]


async def test_following_across_workers_resumes_after_redis_is_back(user: Any, provider: FakeProvider,
                                                                    cluster: Cluster) -> None:
    """Redis cut for 3 s under two workers with a follower on each: once it is back, a turn
    sent on worker A reaches the follower on worker B by itself (events or a resync
    snapshot) within 15 s: the answer saved, the conversation idle."""
    (worker_a, worker_b), cookie, cid = await prepared(cluster, user, "a", "b")
    parts = words("f", 30)
    answer = "".join(parts)
    provider.add(text_script(parts, delay=0.002))

    async with WsClient(worker_a.port, cookie) as owner, WsClient(worker_b.port, cookie) as follower:
        await subscribe([owner, follower], cid)
        cluster.redis_proxy.cut()
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(tab.collect_until(loop.time() + 3.0) for tab in (owner, follower)))
        cluster.redis_proxy.restore()
        back = loop.time()
        await owner.send(type="send", conversationId=cid, text="Reach the other worker.")
        await owner.until(ended(cid), what="the turn's end on its own worker")

        def has_answer(frame: Frame) -> bool:
            return assistant_saved(answer)(frame) or (
                frame["type"] == "snapshot" and any(m["content"] == answer for m in frame["messages"]))

        await follower.wait_for(has_answer, back + 15.0 - loop.time(), what="the answer on the other worker")
        await follower.wait_for(lambda f: ended(cid)(f) or (f["type"] == "snapshot" and f["turn"] is None
                                                            and f["conversation"]["status"] == "idle"),
                                back + 15.0 - loop.time(), what="the conversation idle on the other worker")


async def test_sigterm_drains_the_running_turn(user: Any, provider: FakeProvider, cluster: Cluster) -> None:
    """SIGTERM to the worker running a turn, owner and follower sockets on it: a send during
    the drain (from a third socket, into another conversation, so that nothing but the drain
    can refuse it) is refused (``service-unavailable`` with ``retry_after``); the turn
    finishes within ``JXAI_DRAIN_SECONDS`` and is saved; both sockets get ``turn_end`` and
    then close with :data:`~jxai_app.turns.hub.CLOSE_GOING_AWAY` (daphne lets an application
    send no 1001), and so does the third; the worker exits."""
    drain = 10.0
    (worker,), cookie, cid = await prepared(cluster, user, "a", JXAI_DRAIN_SECONDS=str(int(drain)))
    other = await new_conversation(user)
    parts = words("d", 300)
    provider.add(text_script(parts, delay=0.01))  # about 3 s of answer after its start

    async with WsClient(worker.port, cookie) as owner, WsClient(worker.port, cookie) as follower, \
            WsClient(worker.port, cookie) as bystander:
        tabs = [owner, follower]
        await subscribe(tabs, cid)
        await subscribe([bystander], other)
        await owner.send(type="send", conversationId=cid, text="Keep going through the deploy.")
        turn_id = await streaming(tabs)
        loop = asyncio.get_running_loop()
        worker.signal(signal.SIGTERM)
        stop_asked = loop.time()
        await asyncio.sleep(0.5)  # no frame tells that the worker took the signal in: give it that long

        refusal = await send_answered(bystander, other, "A new turn during the drain.", 5.0)
        assert refusal["type"] == "error" and refusal["code"] == "service-unavailable", refusal
        assert refusal["problem"].get("retry_after"), refusal
        for tab in tabs:
            await tab.wait_for(turn_ended(turn_id), drain + 5, what="turn_end during the drain")
            assert loop.time() - stop_asked <= drain, "the turn outlived the drain"
            assert_whole_turn(tab, turn_id, "".join(parts))
            assert await tab.until_closed(timeout=drain + 5) == CLOSE_GOING_AWAY
        assert await bystander.until_closed(timeout=5) == CLOSE_GOING_AWAY
    assert worker.wait_exit(drain) is not None, "the worker still runs after its drain"

    assert [(r, c, s) for r, c, s in await saved(cid)][-1] == ("assistant", "".join(parts), "complete")
    assert await saved(other) == []


async def test_burst_of_200_sends_at_one_worker(provider: FakeProvider, cluster: Cluster) -> None:
    """200 users each send within one second to one worker: every turn completes through
    ``turn_end`` with every seq once and in order and the whole answer (no timing here:
    ``bench/burst.py`` measures the time to the provider)."""
    count = 200
    parts = words("b", 10)
    provider.handler = lambda request: text_script(parts)
    (worker,) = cluster.start("a")
    users = await sync_to_async(make_users)(count, "burst")
    conversations = [await new_conversation(u) for u, _ in users]
    tabs = [WsClient(worker.port, cookie) for _, cookie in users]
    for first in range(0, count, 50):
        await asyncio.gather(*(tab.open(timeout=30) for tab in tabs[first:first + 50]))
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(tab.send(type="send", conversationId=cid, text=f"burst {i}")
                               for i, (tab, cid) in enumerate(zip(tabs, conversations))))
        assert loop.time() - started < 1.0, "the test could not send its burst within a second"
        await asyncio.gather(*(tab.until(ended(cid), timeout=60, what="the burst turn's end")
                               for tab, cid in zip(tabs, conversations)))
        for tab in tabs:
            (turn_id,) = tab.items
            assert_whole_turn(tab, turn_id, "".join(parts))
    finally:
        await asyncio.gather(*(tab.close() for tab in tabs))
    assert len(provider.requests) == count
