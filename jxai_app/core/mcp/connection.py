"""One MCP server's client session, kept open and reconnected (docs/mcp.md "Sessions").

A :class:`McpConnection` runs one supervising task (:meth:`McpConnection.run`) that owns the
SDK's ``mcp.Client``: it connects (within the server's timeout), lists the tools, and then
waits. It lists them again on ``notifications/tools/list_changed`` (sent unasked by servers of
the 2025 protocol; asked for with ``subscriptions/listen`` on 2026-07-28 connections) and on
:meth:`refresh`. When the connection breaks (the listen stream drops, a call finds the
transport closed, a server process exits) it reconnects after a backoff that doubles from
``backoff[0]`` to ``backoff[1]`` seconds and starts again after a connection that worked.

Calls (:meth:`call`) come from the turns' tasks. While no session is open a call fails at
once with the last error, so a server that is down never holds a turn; a call the transport
drops mid-way fails as soon as the SDK notices (a dead stdio child: its pipe closes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Generator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from jxai_app.core.mcp.config import McpServerConfig
from jxai_app.core.streaming.pool import DIRECT_MOUNTS
from jxai_app.core.mcp.results import tool_result
from jxai_app.core.ssrf import check_base_url
from jxai_app.core.tools.definition import tool_error

__all__ = ["McpConnection", "ServerHealth", "USER_META_KEY"]

logger = logging.getLogger("jxai_app.core.mcp")

USER_META_KEY = "io.jxai/user-id"
"""The ``_meta`` member carrying the user's id on servers configured to receive it."""
SSE_READ_TIMEOUT = 300.0
"""Seconds an HTTP server's response stream may stay silent (the SDK's own default)."""


@dataclass(frozen=True)
class ServerHealth:
    """What one worker knows about one server (docs/mcp.md "Health in admin").

    Attributes:
        name: the server's name.
        transport: ``stdio`` or ``streamable-http``.
        state: ``connecting`` (before the first answer), ``connected``, ``down`` (waiting to
            reconnect) or ``closed``.
        last_error: the last connection, listing or transport error (``""`` when none), kept
            after a reconnection so staff can see why it dropped.
        tool_count: tools listed by the open session (the last listing, while down).
        connected_since: wall-clock time of the open session's start, or ``None``.
        protocol_version: the protocol version of the last session, or ``""``.
    """

    name: str
    transport: str
    state: str
    last_error: str
    tool_count: int
    connected_since: float | None
    protocol_version: str


class _UserHeader(httpx2.Auth):
    """Copies the user id a ``tools/call`` carries in ``_meta`` into the configured header.

    Requests of one session go out from the transport's own task, so the header is made
    from the request itself: the only per-call part of a shared session."""

    def __init__(self, header: str) -> None:
        self.header = header

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        body = request.content
        if USER_META_KEY.encode() in body:
            try:
                user = json.loads(body)["params"]["_meta"][USER_META_KEY]
            except (ValueError, KeyError, TypeError):
                user = None
            if isinstance(user, str):
                request.headers[self.header] = user
        yield request


def _message(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _message(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class McpConnection:
    """One server's session (module docstring).

    Args:
        config: the server.
        on_tools: called with this connection after every listing (the manager syncs the
            registry from :attr:`tools`).
        allow_internal: skip the SSRF check of an HTTP server's URL (docs/security.md
            "MCP servers").

    Variables named in the configuration are read from ``os.environ`` at each connection; one
    that is not set is left out (no empty header is sent). A stdio server's standard error
    goes to this process's.
    """

    BACKOFF = (0.5, 30.0)
    """The first and the largest delay in seconds between reconnection attempts."""

    def __init__(self, config: McpServerConfig, *, on_tools: Callable[[McpConnection], None],
                 allow_internal: bool = False) -> None:
        self.config = config
        self.tools: list[types.Tool] = []
        """The tools of the last listing, as the server described them."""
        self._on_tools = on_tools
        self._allow_internal = allow_internal
        self._client: Client | None = None
        self._status = "connecting"
        """connecting | connected | down | closed (ServerHealth.state)."""
        self._error = ""
        self._since: float | None = None
        self._protocol = ""
        self._wake = asyncio.Event()
        self._changed = False
        self._broken = False
        self._closing = False
        self._attempted = asyncio.Event()
        self._settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # ------------------------------------------------------------------ state
    def health(self) -> ServerHealth:
        """This connection's :class:`ServerHealth` now."""
        return ServerHealth(name=self.config.name, transport=self.config.transport, state=self._status,
                            last_error=self._error, tool_count=len(self.tools), connected_since=self._since,
                            protocol_version=self._protocol)

    async def first_attempt(self) -> None:
        """Return once the first connection attempt has ended (connected or failed)."""
        await self._attempted.wait()

    def refresh(self) -> None:
        """List the tools again now (reconnect now, when down)."""
        self._changed = True
        self._wake.set()

    async def refresh_and_wait(self) -> None:
        """:meth:`refresh`, then return once that listing (or reconnection attempt) ended."""
        settled = self._settled
        self.refresh()
        await settled

    def _settle(self) -> None:
        settled, self._settled = self._settled, asyncio.get_running_loop().create_future()
        settled.set_result(None)

    def close(self) -> None:
        """Ask :meth:`run` to close the session and end."""
        self._closing = True
        self._wake.set()

    # ------------------------------------------------------------------ the supervising task
    async def run(self) -> None:
        """Connect, serve, and reconnect with backoff until :meth:`close` (module docstring).

        Never raises except when cancelled; a stdio child is ended when the session closes.
        """
        delay = self.BACKOFF[0]
        while not self._closing:
            try:
                await self._session()
                delay = self.BACKOFF[0]  # it worked: the next failure starts the backoff again
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - any failure of a session means: reconnect
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                self._error = _message(exc)
                if self._status != "connected":  # a failed attempt answers a refresh; a lost session reconnects first
                    self._settle()
                logger.warning("MCP server %s: %s; reconnecting in %.1f s", self.config.name, self._error, delay)
            finally:
                self._client = None
                self._since = None
                self._attempted.set()
            if self._closing:
                break
            self._status = "down"
            self._wake.clear()
            if not self._changed:  # a refresh asked while down reconnects at once
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    pass
            delay = min(delay * 2, self.BACKOFF[1])
        self._status = "closed"
        self._settle()

    def _target(self) -> Any:
        config = self.config
        if config.transport == "stdio":
            env = {name: os.environ[name] for name in config.env_names if name in os.environ}
            return StdioServerParameters(command=config.command, args=list(config.args), env=env)
        headers = {header: os.environ[env] for header, env in config.header_env.items() if env in os.environ}
        http = httpx2.AsyncClient(headers=headers, auth=_UserHeader(config.user_header) if config.pass_user_id else None,
                                  timeout=httpx2.Timeout(config.timeout, read=SSE_READ_TIMEOUT),
                                  mounts=DIRECT_MOUNTS)  # a loopback server is never reached through a proxy
        return streamable_http_client(config.url, http_client=http)

    async def _session(self) -> None:
        async with AsyncExitStack() as stack:
            async with asyncio.timeout(self.config.timeout):
                if self.config.transport == "streamable-http" and not self._allow_internal:
                    await check_base_url(self.config.url)
                client = Client(self._target(), message_handler=self._on_message, cache=None)
                await stack.enter_async_context(client)
                self._broken = False
                self._changed = False
                await self._list(client)
                watcher: asyncio.Task[None] | None = None
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    listening = await stack.enter_async_context(client.listen(tools_list_changed=True))
                    watcher = asyncio.ensure_future(self._watch(listening))
            self._client = client
            self._status = "connected"
            self._since = time.time()
            self._protocol = client.protocol_version
            self._attempted.set()
            self._settle()
            logger.info("MCP server %s connected (%s, %d tools)", self.config.name, self._protocol, len(self.tools))
            try:
                await self._serve(client)
            finally:
                if watcher is not None:
                    watcher.cancel()
                    await asyncio.gather(watcher, return_exceptions=True)

    async def _serve(self, client: Client) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            if self._broken:
                raise ConnectionError(self._error or "the connection was lost")
            if self._changed:
                self._changed = False
                async with asyncio.timeout(self.config.timeout):
                    await self._list(client)
                self._settle()

    async def _watch(self, listening: Any) -> None:
        try:
            async for _event in listening:
                self._changed = True
                self._wake.set()
            self._lost("the server ended the listen stream")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._lost(_message(exc))

    def _lost(self, reason: str) -> None:
        if not self._closing:
            self._error = reason
            self._broken = True
            self._wake.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._changed = True
            self._wake.set()
        elif isinstance(message, Exception):
            logger.warning("MCP server %s: %s", self.config.name, _message(message))

    async def _list(self, client: Client) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools
        self._on_tools(self)

    # ------------------------------------------------------------------ calls
    async def call(self, tool: str, arguments: dict[str, Any], user_id: str | None) -> dict[str, Any]:
        """Call ``tool`` on the server; never raises except on cancellation (module docstring).

        Args:
            tool: the tool's name on the server.
            arguments: the validated arguments.
            user_id: the requesting user's id, sent only when the server's configuration
                asks for it (``_meta["io.jxai/user-id"]``, and the user header over HTTP).

        Returns:
            Our tool result (:func:`jxai_app.core.mcp.results.tool_result`), or a failed
            result when no session is open or the call fails on the way.
        """
        client = self._client
        name = self.config.name
        if client is None:
            reason = self._error or "not connected yet"
            return tool_error(f'MCP server "{name}" is unavailable: {reason}')
        meta: types.RequestParamsMeta | None = None
        if self.config.pass_user_id and user_id is not None:
            meta = types.RequestParamsMeta()
            meta[USER_META_KEY] = user_id  # type: ignore[literal-required]  # an open map (extra_items)
        try:
            result = await client.call_tool(tool, arguments, meta=meta)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an error answer, a broken transport, or an answer that does not fit its schema
            broken = (exc.error.code == types.CONNECTION_CLOSED if isinstance(exc, MCPError)
                      else isinstance(exc, (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError)))
            if broken:  # reconnect; the tools of the last listing stay offered meanwhile
                self._lost(_message(exc))
            return tool_error(f'MCP server "{name}" failed the call: {_message(exc)}')
        return tool_result(name, tool, result)
