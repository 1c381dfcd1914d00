"""The database from async code: one executor, one way in (docs/architecture.md "The database
from async code").

Every coroutine of jxai that needs the ORM — the turns' writes, the lease watch, a socket's
requests, ``/ai/chat``, the token lookup, the health probe, the tools' stores — calls
:func:`db_call` (or :func:`db_request`, which answers an unreachable database with a
problem). Both run the function in the worker's database threads: one
``ThreadPoolExecutor`` of ``JXAI_DB_THREADS`` threads per process (and one lease thread,
:func:`lease_call`), so async work never has more connections checked out than that (with
PostgreSQL's pool, docs/operations.md "Database connections", they come from the pool and go
back to it after each call).

Django closes a thread's unusable or expired (``CONN_MAX_AGE``) connections at the start and
end of each request, in the thread that handles the request. Work handed to an executor
thread is outside that cycle, so :func:`db_call` does the same around every call: a
connection opened there is closed (returned to the pool) when the call ends, unless
``CONN_MAX_AGE`` keeps it, and a broken one is replaced before the next call.

On PostgreSQL the connection is checked out of the process's psycopg pool (at most
``JXAI_DB_POOL_MAX``, default ``JXAI_DB_THREADS`` + 3: these threads, the lease thread and
two for Django's request threads); when every one is busy a call waits
up to ``JXAI_DB_POOL_TIMEOUT`` seconds and then raises ``OperationalError`` (one of
:data:`DATABASE_ERRORS`), which :func:`db_request` answers as :func:`database_unavailable`.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from asgiref.sync import SyncToAsync
from django.db import InterfaceError, OperationalError, connections

from jxai_app import conf
from jxai_app.core.errors import ProblemError
from jxai_app.core.problems import problem_error

__all__ = ["DATABASE_ERRORS", "RETRY_AFTER_SECONDS", "close_stale_connections", "database_unavailable", "db_call",
           "db_request", "lease_call"]

T = TypeVar("T")

DATABASE_ERRORS = (OperationalError, InterfaceError)
"""What a call raises when the database cannot be reached (a lost connection, a refused
connect, the pool's wait timed out)."""

RETRY_AFTER_SECONDS = 2
"""The ``retry_after`` (and ``Retry-After`` header) of a request refused because the database
did not answer: a pool that was full has usually drained by then (docs/operations.md
"Database connections")."""


def database_unavailable() -> ProblemError:
    """The refusal of a request whose database call failed with one of :data:`DATABASE_ERRORS`:
    ``service-unavailable`` (503) with ``retry_after`` (:func:`db_request`, and
    :mod:`jxai_app.web.dbconnections` for the database calls of Django's own parts)."""
    return problem_error("service-unavailable", "The database is not answering; nothing was saved. "
                                                "Try again in a moment.", retry_after=RETRY_AFTER_SECONDS)


def close_stale_connections() -> None:
    """Close this thread's connections that are unusable or older than ``CONN_MAX_AGE``
    (``0``: any; with the pool: returned to it), except those inside a transaction."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


class _DatabaseThreadCall(SyncToAsync):
    """``sync_to_async`` on the database threads, with :func:`close_stale_connections`
    before and after the call (module docstring)."""

    def thread_handler(self, loop: Any, *args: Any, **kwargs: Any) -> Any:
        """Run the call in the database thread between two :func:`close_stale_connections`."""
        close_stale_connections()
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            close_stale_connections()


async def _run(executor: ThreadPoolExecutor, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    call = _DatabaseThreadCall(func, thread_sensitive=False, executor=executor)
    return await call(*args, **kwargs)  # type: ignore[no-any-return]


@functools.cache
def _db_threads() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=conf.db_threads(), thread_name_prefix="jxai-db")


async def db_call(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` in one of the worker's database threads (module docstring),
    in parallel with other calls, the caller's context variables carried over.

    Raises:
        Whatever ``func`` raises (:data:`DATABASE_ERRORS` when the database is unreachable).
    """
    return await _run(_db_threads(), func, *args, **kwargs)


@functools.cache
def _lease_thread() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="jxai-db-lease")


async def lease_call(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """:func:`db_call` on the worker's lease thread: the renewal of the worker's turn leases
    only (:class:`jxai_app.turns.hub.TurnHub`). It never queues behind the turns' and the
    requests' database work, however many sends arrive at once, so a busy worker's live turns
    are never taken for dead by another worker (docs/turns.md "Leases").

    Raises:
        Whatever ``func`` raises (:data:`DATABASE_ERRORS` when the database is unreachable).
    """
    return await _run(_lease_thread(), func, *args, **kwargs)


async def db_request(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """:func:`db_call` for a client's request: an unreachable database is a problem.

    Raises:
        ProblemError: ``service-unavailable`` (with ``retry_after``) when the database cannot
            be reached; a transaction ``func`` opened did not commit, so nothing was saved.
        Whatever else ``func`` raises.
    """
    try:
        return await db_call(func, *args, **kwargs)
    except DATABASE_ERRORS as exc:
        raise database_unavailable() from exc
