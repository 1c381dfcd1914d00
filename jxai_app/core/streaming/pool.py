"""Shared provider connections: one pooled ``httpx.AsyncClient`` per event loop, for the time
to first token (docs/streaming.md "Connections").

Without a pool every model request builds an ``httpx.AsyncClient`` and opens a new TCP
connection, plus a TLS handshake for an ``https`` provider (one or more round trips, tens of
milliseconds to a remote API) before the request is even sent. A :class:`ConnectionPool`
hands every stream of one event loop (one worker process) the same client, so a provider
that keeps connections alive is reached over a warm connection.

Rules kept from the per-request client (:mod:`jxai_app.core.streaming.base`):

- closing a stream before its end (Stop, a client disconnect, a timeout) closes **that
  stream's connection**, never the pool: httpcore only returns a connection whose response
  was read to its end, and closes any other;
- no cap on concurrent connections (a stream holds its connection for the whole answer);
  ``max_keepalive`` bounds only the idle ones kept for reuse, each for ``keepalive_expiry``;
- the same verified TLS context, no redirects, proxies from the environment (read once, when
  the loop's client is made) except for a provider on a loopback address, which is always
  reached directly (:data:`DIRECT_MOUNTS`); the connect limit travels with each request.

A client is bound to the loop it was made on (its connections are), hence one per loop;
a loop that ends takes its client with it. Framework-free (no Django).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Final

import httpx


DIRECT_MOUNTS: Final[dict[str, None]] = {
    "all://127.0.0.1": None, "all://localhost": None, "all://[::1]": None}
"""``mounts`` for every client: a provider on a loopback address (``make run``'s local model, a
test's fake provider) is reached directly, never through ``HTTP_PROXY``/``HTTPS_PROXY``/
``ALL_PROXY`` from the environment, which httpx otherwise applies to every host not in
``NO_PROXY`` (a proxy cannot reach the machine's own loopback). The rule is Go's
``ProxyFromEnvironment``; docs/streaming.md "Connections"."""


def ssl_context() -> Any:
    """One verified TLS context for every client, pooled or not (building one costs milliseconds)."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx.create_ssl_context()
    return _SSL_CONTEXT


_SSL_CONTEXT: Any = None

__all__ = ["DIRECT_MOUNTS", "ConnectionPool", "shared_pool"]

DEFAULT_MAX_KEEPALIVE: Final[int] = 32
"""Idle connections kept for reuse (all providers together)."""
DEFAULT_KEEPALIVE_EXPIRY: Final[float] = 15.0
"""Seconds an idle connection is kept (under the usual 60 s+ of provider front ends)."""


class ConnectionPool:
    """One pooled ``httpx.AsyncClient`` per running event loop (see the module docstring).

    Args:
        max_keepalive: idle connections kept for reuse.
        keepalive_expiry: seconds an idle connection is kept.
    """

    def __init__(self, *, max_keepalive: int = DEFAULT_MAX_KEEPALIVE,
                 keepalive_expiry: float = DEFAULT_KEEPALIVE_EXPIRY) -> None:
        self.limits = httpx.Limits(max_connections=None, max_keepalive_connections=max_keepalive,
                                   keepalive_expiry=keepalive_expiry)
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary())

    def client(self) -> httpx.AsyncClient:
        """The running loop's client (made on first use; a closed one is replaced).

        Raises:
            RuntimeError: called outside a running event loop.
        """
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            client = httpx.AsyncClient(verify=ssl_context(), limits=self.limits, follow_redirects=False,
                                       timeout=httpx.Timeout(None), mounts=DIRECT_MOUNTS)
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the running loop's client and its idle connections (streams in progress
        are cut); the next request makes a new one."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


_SHARED = ConnectionPool()


def shared_pool() -> ConnectionPool:
    """The process-wide pool (what :func:`jxai_app.conf.build_client` gives every model)."""
    return _SHARED
