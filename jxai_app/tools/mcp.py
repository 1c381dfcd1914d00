"""The worker's MCP servers: which are configured, and the sessions of this process
(docs/mcp.md "Sessions" and "Health in admin").

Servers come from ``conf.get_mcp_servers()`` (the JSON file or variable) and from the
``McpServer`` rows of admin; a row replaces a file entry of the same name. Each worker
process keeps one :class:`~jxai_app.core.mcp.McpTools` on its event loop, made on first use:

- every turn reads the configuration in the database thread that saves its message (one
  query, ``turns.start``) and :func:`apply` starts, closes or restarts the
  servers whose configuration changed, so an edit in admin reaches every worker at its next
  turn. Nothing else starts a server: management commands, migrations and tests that run no
  turn never spawn one.
- ``project/asgi.py`` calls :func:`sync` once in the background at the worker's first
  request, so admin's page shows the servers of a worker that has run no turn yet.
- :func:`close` ends this loop's sessions (the hub's shutdown; a stdio child ends with its
  session).

Admin's page runs in a thread: :func:`current` and :func:`refresh_from_thread` reach the
sessions of the process serving the page, and only those (docs/mcp.md "Health in admin").
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from jxai_app import conf
from jxai_app.core.errors import ConfigurationError
from jxai_app.core.mcp import McpServerConfig
from jxai_app.core.mcp.manager import McpTools
from jxai_app.db import db_request
from jxai_app.models import McpServer
from jxai_app.tools.registry import get_tool_registry

__all__ = ["StartOnFirstRequest", "apply", "close", "current", "refresh_from_thread", "server_configs", "sync"]

logger = logging.getLogger("jxai_app.mcp")

_managers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, McpTools] = weakref.WeakKeyDictionary()
_latest_loop: list[asyncio.AbstractEventLoop] = []
"""The loop :func:`sync` ran on last in this process (admin's thread reaches it through it)."""
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def server_configs() -> list[McpServerConfig]:
    """Every configured MCP server (module docstring), file entries first. Sync (one query).

    A row or file the configuration refuses is logged and left out: a mistake in one server
    never stops the others or the turn."""
    try:
        configs = {c.name: c for c in conf.get_mcp_servers()}
    except ConfigurationError as exc:
        logger.error("MCP servers from the environment are ignored: %s", exc)
        configs = {}
    for row in McpServer.objects.all():
        try:
            configs[row.name] = row.to_config()
        except (ConfigurationError, TypeError, ValueError) as exc:
            logger.error("MCP server %s (admin) is ignored: %s", row.name, exc)
    return list(configs.values())


async def sync() -> bool:
    """Read the configuration (a database thread) and :func:`apply` it."""
    return await apply(await db_request(server_configs))


async def apply(configs: list[McpServerConfig]) -> bool:
    """Bring this loop's servers in line with ``configs`` (from :func:`server_configs`): start,
    close or restart the servers whose configuration changed, making the loop's manager when
    the first server is configured. Waits for the first connection attempt of a server it
    starts (at most that server's timeout).

    Returns:
        True when a server was started, closed or restarted (the registry's MCP tools may
        have changed); False when everything already matched.

    Comparing takes no lock (turns starting together never wait for each other); only a
    change takes the loop's lock, so two turns never apply it twice.
    """
    loop = asyncio.get_running_loop()
    _latest_loop[:] = [loop]
    manager = _managers.get(loop)
    if (manager.configs if manager is not None else []) == configs:
        return False
    async with _locks.setdefault(loop, asyncio.Lock()):
        manager = _managers.get(loop)
        if manager is None:
            manager = _managers[loop] = McpTools(get_tool_registry(), [],
                                                 allow_internal=conf.mcp_allow_internal())
        if configs == manager.configs:
            return False
        await manager.reconfigure(configs)
    return True


async def close() -> None:
    """Close this loop's sessions and forget its manager."""
    loop = asyncio.get_running_loop()
    manager = _managers.pop(loop, None)
    if manager is not None:
        await manager.close()


def current() -> McpTools | None:
    """The manager of this process's worker loop (the loop :func:`sync` ran on last), or
    ``None`` before any server was configured there."""
    return _managers.get(_latest_loop[0]) if _latest_loop else None


def refresh_from_thread(timeout: float) -> bool:
    """From a thread other than the loop's (admin's view): re-read the configuration, then
    list every server's tools again, reconnecting those that are down, on this process's
    worker loop. True when that ended within ``timeout`` seconds; False when it did not, or
    when no worker loop ran :func:`sync` in this process yet."""
    if not _latest_loop or _latest_loop[0].is_closed():
        return False

    async def run() -> None:
        await sync()
        manager = _managers.get(asyncio.get_running_loop())
        if manager is not None:
            await manager.refresh()

    future = asyncio.run_coroutine_threadsafe(run(), _latest_loop[0])
    try:
        future.result(timeout)
    except FutureTimeout:
        future.cancel()
        return False
    return True


class StartOnFirstRequest:
    """ASGI middleware: the worker's first request (HTTP or websocket) starts :func:`sync`
    in the background, so admin's page shows the servers of a worker that has run no turn
    yet. No request waits for it; a failure is logged and the next turn tries again."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if self._task is None and scope.get("type") in ("http", "websocket"):
            self._task = asyncio.ensure_future(self._start())
        return await self.app(scope, receive, send)

    @staticmethod
    async def _start() -> None:
        try:
            await sync()
        except Exception:
            logger.exception("starting the MCP servers failed; the next turn tries again")
