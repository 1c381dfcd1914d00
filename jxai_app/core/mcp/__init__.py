"""Tools served by MCP servers (docs/mcp.md).

Framework-free core: nothing here imports Django. Modules: ``config`` (one server's
configuration, ``McpServerConfig``), ``naming`` (registry names of MCP tools), ``results``
(an MCP ``CallToolResult`` as our tool result), ``connection`` (one server's client session,
kept open and reconnected), ``manager`` (every server of a worker, synced into a
``ToolRegistry``).

The package itself imports only ``config`` and ``naming``: the SDK takes over a second to
import, so ``connection`` and ``manager`` are imported where sessions are made.
"""

from __future__ import annotations

from jxai_app.core.mcp.config import McpServerConfig
from jxai_app.core.mcp.naming import registry_name

__all__ = ["McpServerConfig", "registry_name"]
