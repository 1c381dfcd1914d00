"""Django's own database work on a request, made to follow jxai's rules (docs/operations.md
"Database connections").

jxai's coroutines reach the database through :mod:`jxai_app.db`, which answers a database
that does not answer (on PostgreSQL also: the pool stayed full for ``JXAI_DB_POOL_TIMEOUT``
seconds) with the ``service-unavailable`` problem. Django's own parts reach it in the
request's sync thread instead (one per request under ASGI: asgiref's
``ThreadSensitiveContext``) — the session and the user behind ``request.auser()`` (a
session-authenticated ``POST /ai/chat``), admin and the other sync views — and Django answers
their ``OperationalError`` with an HTTP 500, and closes (gives back to the pool) that thread's
connection only when the response is closed: after the whole SSE stream. Then each open
stream of a logged-in session keeps a connection, idle; worse, a request holding its
thread's connection while its view waits for a database thread's creates a hold-and-wait:
as many session requests at once as the pool has connections take them all, and each one's
next call waits for the pool until it times out. :class:`DatabaseConnectionsMiddleware`:

- gives the request thread's connection back as soon as ``request.auser()`` has read the
  user (it wraps the ``auser`` that ``AuthenticationMiddleware`` set), and once more when
  the view returned a streaming response, before its body is sent;
- answers a view that raised one of :data:`jxai_app.db.DATABASE_ERRORS` with the same
  ``application/problem+json`` 503 ``service-unavailable`` (``Retry-After``) as
  :func:`jxai_app.db.db_request`, never a 500.

A connection inside a transaction (a sync test client's, under ``async_to_sync``) is never
closed (:func:`jxai_app.db.close_stale_connections`). It goes right after
``AuthenticationMiddleware`` in ``MIDDLEWARE``.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from jxai_app.core.problems import PROBLEM_CONTENT_TYPE, problem_body
from jxai_app.db import DATABASE_ERRORS, close_stale_connections, database_unavailable

__all__ = ["DatabaseConnectionsMiddleware", "unavailable_response"]

logger = logging.getLogger("jxai_app.web.dbconnections")


def unavailable_response() -> HttpResponse:
    """The 503 ``service-unavailable`` problem of :func:`jxai_app.db.database_unavailable` as
    a response, with its ``Retry-After`` header (the shape of ``jxai_app.api.problem_response``)."""
    doc = database_unavailable().problem
    response = HttpResponse(json.dumps(problem_body(doc), ensure_ascii=False), status=int(doc["status"]),
                            content_type=PROBLEM_CONTENT_TYPE)
    response["Retry-After"] = str(doc["retry_after"])
    return response


def _release_after_auser(request: HttpRequest) -> None:
    """Wrap ``request.auser`` so the connection its first call used goes back at once."""
    read_user = getattr(request, "auser", None)
    if read_user is None:  # no AuthenticationMiddleware before this one
        return
    released = False

    async def auser() -> Any:
        nonlocal released
        user = await read_user()
        if not released:
            released = True
            await sync_to_async(close_stale_connections)()  # the request's thread, where it was read
        return user

    request.auser = auser


class DatabaseConnectionsMiddleware:
    """See the module docstring. Sync and async capable (async under daphne)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self._async:
            return self.__acall__(request)
        _release_after_auser(request)
        response = self.get_response(request)
        if getattr(response, "streaming", False):
            close_stale_connections()
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        _release_after_auser(request)
        response: HttpResponseBase = await self.get_response(request)
        if response.streaming:
            await sync_to_async(close_stale_connections)()  # the request's own sync thread
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """A view's database failure as the 503 problem; anything else is left to Django."""
        if not isinstance(exception, DATABASE_ERRORS):
            return None
        logger.warning("%s %s: the database did not answer (%s); answered service-unavailable",
                       request.method, request.path, exception)
        return unavailable_response()
