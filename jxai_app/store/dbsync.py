"""Calling sync database code from async code without leaving connections open.

Django closes a thread's unusable or expired (``CONN_MAX_AGE``) connections at the start and
end of each request, in the thread that handles the request (``close_old_connections`` on
``request_started``/``request_finished``). Work handed to a worker thread by plain
``asgiref.sync.sync_to_async`` or ``asyncio.to_thread`` is outside that cycle: a connection
opened there stays open for as long as the thread lives (on PostgreSQL an idle session, which
also keeps a test database from being dropped: "is being accessed by other users").

:func:`database_sync_to_async` is Channels' function of that name (close the worker thread's
old connections before and after the call) with one difference: it never closes a
connection inside a transaction (an ``atomic`` block). That happens when the "worker" is the
caller's own thread: thread-sensitive calls made under ``async_to_sync`` from sync code run
there, e.g. Django's test ``Client`` calling an async view inside a test's transaction, and
closing that connection would lose the caller's transaction.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from asgiref.sync import SyncToAsync
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

from jxai_app.core.problems import problem_error

__all__ = ["DatabaseSyncToAsync", "close_stale_connections", "database_sync_to_async", "db_request", "db_thread_call"]


def close_stale_connections() -> None:
    """Close this thread's connections that are unusable or older than ``CONN_MAX_AGE``
    (``0``: any), except those inside a transaction (``atomic`` block)."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


class DatabaseSyncToAsync(SyncToAsync):
    """``sync_to_async`` that runs :func:`close_stale_connections` in the worker thread
    before and after the call (module docstring). Same arguments as ``sync_to_async``."""

    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        """Run the call in the worker thread between two :func:`close_stale_connections`."""
        close_stale_connections()
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            close_stale_connections()


database_sync_to_async = DatabaseSyncToAsync
"""Use as ``await database_sync_to_async(func)(*args)`` or as a decorator."""


@functools.cache
def _db_threads() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, int(settings.JXAI_DB_THREADS)), thread_name_prefix="jxai-db")


def db_thread_call(func: Callable[..., Any]) -> DatabaseSyncToAsync:
    """``func`` as a coroutine function run in one of the worker's database threads
    (``JXAI_DB_THREADS``, default 8), in parallel with other calls: the turns' database work
    does not queue behind one thread (asgiref's thread-sensitive default). Each thread keeps
    its own connection (``CONN_MAX_AGE``, checked before reuse) and closes it as
    :class:`DatabaseSyncToAsync` does. Not for code that must see the caller's own
    transaction (a sync test's, under ``async_to_sync``): that needs
    :func:`database_sync_to_async`."""
    return DatabaseSyncToAsync(func, thread_sensitive=False, executor=_db_threads())


async def db_request(func: Callable[..., Any], *args: Any) -> Any:
    """``func(*args)`` for a client's request, in a database thread (:func:`db_thread_call`).

    Raises:
        ProblemError: ``service-unavailable`` (with ``retry_after``) when the database cannot
            be reached; a transaction ``func`` opened did not commit, so nothing was saved.
        Whatever else ``func`` raises.
    """
    try:
        return await db_thread_call(func)(*args)
    except (OperationalError, InterfaceError) as exc:
        raise problem_error("service-unavailable", "The database is not answering; nothing was saved. "
                                                   "Try again in a moment.", retry_after=2) from exc
