"""Tools served by MCP servers (docs/mcp.md).

Framework-free core: nothing here imports Django. Modules: ``config`` (one server's
configuration, ``McpServerConfig``), ``naming`` (registry names of MCP tools), ``results``
(an MCP ``CallToolResult`` as our tool result), ``connection`` (one server's client session,
kept open and reconnected), ``manager`` (every server of a worker, synced into a
``ToolRegistry``).
"""

from __future__ import annotations

from jxai_app.core.mcp.config import McpServerConfig
from jxai_app.core.mcp.connection import McpConnection, ServerHealth
from jxai_app.core.mcp.manager import McpTools
from jxai_app.core.mcp.naming import registry_name

__all__ = ["McpConnection", "McpServerConfig", "McpTools", "ServerHealth", "registry_name"]
