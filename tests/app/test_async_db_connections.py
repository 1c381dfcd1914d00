"""Database work started from async code leaves no connection open in a worker thread.

Django closes a connection at the end of a request only in the request's own thread; one
opened by a plain ``sync_to_async`` or ``asyncio.to_thread`` worker stays open, and on
PostgreSQL such a session keeps the test database from being dropped at the end of the run
("is being accessed by other users"). Each test records every connection Django opens while
the async code runs (the ``connection_created`` signal), then checks that each one is closed
and, on PostgreSQL, that its server process has left ``pg_stat_activity``.

The API token paths go through :mod:`jxai_app.web.authn` and :mod:`jxai_app.policy.budget`; the
``search_conversations`` tool through the search :mod:`jxai_app.tools.registry` binds. The last tests
check the other side of :mod:`jxai_app.db`: a caller's connection inside a transaction
is never closed under it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection, connections
from django.db.backends.signals import connection_created
from django.test import AsyncClient, Client

from jxai_app import store
from jxai_app.tools.registry import get_tool_registry

from jxai_app.db import close_stale_connections
from jxai_app.policy import ratelimit
from jxai_app.web.authn import user_for_token
from jxai_app.core.tools import ToolContext
from tests.app.apisupport import bearer, fake, frames, post_chat, problem_of, read_all, token  # noqa: F401
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Opened:
    """One connection Django opened: its wrapper, thread and (PostgreSQL) server process id."""

    wrapper: Any
    thread: str
    backend_pid: int | None


@contextmanager
def connections_opened() -> Iterator[list[Opened]]:
    """Record every database connection opened (in any thread) inside the block."""
    opened: list[Opened] = []

    def record(sender: Any, connection: Any, **kwargs: Any) -> None:
        info = getattr(connection.connection, "info", None)  # psycopg's ConnectionInfo
        opened.append(Opened(connection, threading.current_thread().name, getattr(info, "backend_pid", None)))

    connection_created.connect(record)
    try:
        yield opened
    finally:
        connection_created.disconnect(record)


def _live_backends(pids: list[int]) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [pids])
        return [row[0] for row in cursor.fetchall()]


async def assert_all_closed(opened: list[Opened]) -> None:
    """Every recorded connection is closed; on PostgreSQL its server process is gone too
    (polled for up to 5 s: a backend exits just after its client disconnects)."""
    assert opened, "the code under test opened no connection, so nothing was checked"
    still_open = [(o.thread, o.backend_pid) for o in opened if o.wrapper.connection is not None]
    assert still_open == [], f"connections left open in worker threads: {still_open}"
    pids = [o.backend_pid for o in opened if o.backend_pid is not None]
    if connection.vendor != "postgresql":
        return
    assert len(pids) == len(opened)
    for _ in range(50):
        live = await database_sync_to_async(_live_backends)(pids)
        if not live:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"PostgreSQL sessions still open after the call: {live}")


async def _fresh_shared_thread() -> None:
    """Close what the shared sync thread of ``sync_to_async`` holds (earlier tests' work), so
    the code under test has to open its own connection there."""
    await database_sync_to_async(connections.close_all)()


async def test_an_api_token_request_leaves_no_connection_open(fake: FakeProvider, token: str) -> None:
    """authenticate (token lookup), the turn admission and the usage record: all closed."""
    fake.add(Script(writes=openai_text_stream(["ok"], usage={"prompt_tokens": 3, "completion_tokens": 1})))
    await _fresh_shared_thread()
    with connections_opened() as opened:
        response = await post_chat(AsyncClient(), HELLO, bearer(token))
        assert response.status_code == 200
        assert frames(await read_all(response))[-1] == {"type": "done", "stopReason": "stop"}
    await assert_all_closed(opened)


async def test_a_refused_token_leaves_no_connection_open(fake: FakeProvider, token: str) -> None:
    await _fresh_shared_thread()
    with connections_opened() as opened:
        response = await post_chat(AsyncClient(), HELLO, bearer("jxai_not-a-real-token"))
    assert response.status_code == 401 and problem_of(response)["type"].endswith("/unauthorized")
    await assert_all_closed(opened)


def _conversation(user: Any, title: str) -> str:
    return str(store.conversation_create(user=user, model="m", title=title).pk)


async def test_the_search_tool_leaves_no_connection_open(user: Any) -> None:
    """``search_conversations`` from async code (as the agent calls it): the worker thread of
    the event loop's default executor, reused by later tasks, keeps no connection."""
    cid = await database_sync_to_async(_conversation)(user, "Dough recipes")
    registry = get_tool_registry()
    with connections_opened() as opened:
        for _ in range(3):  # a reused executor thread must not keep one between calls either
            result = await registry.execute("search_conversations", '{"query": "dough"}', ToolContext(user=user))
            assert result["success"] is True, result
            assert [row["id"] for row in result["data"]["results"]] == [cid]
    assert all(o.thread != threading.current_thread().name for o in opened)  # off the event loop
    await assert_all_closed(opened)


@pytest.mark.django_db  # the test's own transaction
def test_a_connection_inside_a_transaction_is_never_closed_under_it(user: Any, settings: Any) -> None:
    """The check :func:`jxai_app.db.db_call` runs around each call leaves a connection alone
    while it is inside a transaction, even one past ``CONN_MAX_AGE``."""
    ratelimit.check_turn_allowed(user)
    connection.close_at = 0  # obsolete: outside a transaction it would be closed now
    close_stale_connections()
    assert connection.in_atomic_block and connection.connection is not None
    assert ratelimit.turns_in_last_minute(user) == 1


@pytest.mark.django_db
def test_a_sync_client_token_request_inside_a_transaction_keeps_the_connection(fake: FakeProvider,
                                                                                token: str) -> None:
    """Django's sync test ``Client`` runs the async view under ``async_to_sync``; the token
    lookup runs in a database thread and leaves the test transaction's connection here alone."""
    response = Client().post("/ai/chat", data=b'{"messages": [{"role": "user", "content": "hi"}]}',
                             content_type="application/json", headers=bearer("jxai_not-a-real-token"))
    assert response.status_code == 401
    assert connection.in_atomic_block and connection.connection is not None
    assert user_for_token(token) is not None  # the token exists only inside this transaction
