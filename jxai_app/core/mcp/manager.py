"""Every MCP server of one worker, synced into its tool registry (docs/mcp.md "Sessions").

One :class:`McpTools` per worker process (per event loop), made by the Django layer
(:mod:`jxai_app.tools.mcp`). It runs one :class:`~jxai_app.core.mcp.connection.McpConnection`
per enabled server and, after each listing, replaces that server's tools in the registry:
each MCP tool becomes a ``ToolDefinition`` named by :func:`~jxai_app.core.mcp.naming.registry_name`,
with the server's input schema (validated like any tool's arguments, before the server sees
them), its description, and the server's timeout. A turn copies the registry when it starts
(``toolpolicy.tool_view_for``), so a tool added or removed on a server shows from the next turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import mcp_types as types

from jxai_app.core.errors import ToolError
from jxai_app.core.mcp.config import McpServerConfig
from jxai_app.core.mcp.connection import McpConnection, ServerHealth
from jxai_app.core.mcp.naming import registry_name
from jxai_app.core.tools.context import ToolContext
from jxai_app.core.tools.definition import ToolDefinition
from jxai_app.core.tools.registry import ToolRegistry

__all__ = ["McpTools"]

logger = logging.getLogger("jxai_app.core.mcp")


def _user_id(context: ToolContext) -> str | None:
    pk = getattr(context.user, "pk", None)
    return None if pk is None else str(pk)


class McpTools:
    """The MCP servers of one worker (module docstring).

    Args:
        registry: the worker's registry; MCP tools are added to it and removed from it.
        configs: the servers; disabled ones are listed in :meth:`health` only.
        allow_internal: HTTP servers may be on private or loopback addresses
            (``JXAI_MCP_ALLOW_INTERNAL``; docs/security.md "MCP servers").
    """

    def __init__(self, registry: ToolRegistry, configs: Iterable[McpServerConfig], *, allow_internal: bool = False) -> None:
        self.registry = registry
        self.configs = list(configs)
        self._allow_internal = allow_internal
        self.connections: dict[str, McpConnection] = {}
        self._names: dict[str, list[str]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def start(self) -> None:
        """Open every enabled server's session and wait for each first attempt, at most
        the largest configured timeout (a server slower than that joins later)."""
        started = []
        for config in self.configs:
            if config.enabled and config.name not in self.connections:
                connection = McpConnection(config, on_tools=self._sync, allow_internal=self._allow_internal)
                self.connections[config.name] = connection
                self._tasks[config.name] = asyncio.ensure_future(connection.run())
                started.append(connection)
        waits = [asyncio.ensure_future(c.first_attempt()) for c in started]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=max(c.config.timeout for c in started))
            for wait in pending:
                wait.cancel()

    async def refresh(self) -> None:
        """List every server's tools again (reconnect the ones that are down) and return
        when each has answered or failed."""
        await asyncio.gather(*(c.refresh_and_wait() for c in self.connections.values()))

    async def reconfigure(self, configs: Iterable[McpServerConfig]) -> None:
        """Use ``configs`` from now on: servers removed, disabled or changed are closed (and
        their tools removed), new and changed ones started (:meth:`start`); the sessions of
        unchanged servers stay open."""
        wanted = {c.name: c for c in configs}
        gone = [name for name, c in self.connections.items() if wanted.get(name) != c.config]
        await self._close(gone)
        self.configs = list(wanted.values())
        await self.start()

    async def close(self) -> None:
        """Close every session (a stdio child ends with it) and remove the MCP tools."""
        await self._close(list(self.connections))

    async def _close(self, names: list[str]) -> None:
        for name in names:
            self.connections[name].close()
        tasks = [self._tasks[name] for name in names]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=10.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for name in names:
            del self.connections[name], self._tasks[name]
            for tool in self._names.pop(name, []):
                self.registry.unregister(tool)

    def health(self) -> list[ServerHealth]:
        """Each configured server's health, in configuration order (a disabled one ``disabled``)."""
        out = []
        for config in self.configs:
            connection = self.connections.get(config.name)
            out.append(connection.health() if connection is not None else ServerHealth(
                name=config.name, transport=config.transport, state="disabled", last_error="", tool_count=0,
                connected_since=None, protocol_version=""))
        return out

    def sources(self) -> dict[str, str]:
        """Registry name → server name, for every MCP tool in the registry."""
        return {name: server for server, names in self._names.items() for name in names}

    # ------------------------------------------------------------------ registry
    def _definition(self, connection: McpConnection, tool: types.Tool, name: str) -> ToolDefinition:
        async def execute(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
            return await connection.call(tool.name, args, _user_id(context))

        return ToolDefinition(name=name, description=tool.description or tool.title or "",
                              parameters=dict(tool.input_schema), execute=execute, timeout=connection.config.timeout)

    def _sync(self, connection: McpConnection) -> None:
        server = connection.config.name
        for name in self._names.pop(server, []):
            self.registry.unregister(name)
        taken = set(self.sources())
        names: list[str] = []
        for tool in connection.tools:
            name = registry_name(server, tool.name)
            if name in self.registry or name in taken or name in names:
                logger.warning("MCP server %s: tool %r is left out: the name %s is taken", server, tool.name, name)
                continue
            try:
                definition = self._definition(connection, tool, name)
            except ToolError as exc:
                logger.warning("MCP server %s: tool %r is left out: %s", server, tool.name, exc)
                continue
            self.registry.register(definition)
            names.append(name)
        self._names[server] = names
