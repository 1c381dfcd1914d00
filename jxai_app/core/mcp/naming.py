"""Registry names of MCP tools (docs/mcp.md "Tool names").

``<server>__<tool>``: OpenAI's function names are ``^[A-Za-z0-9_-]{1,64}$``, so each other
character of the tool's name becomes ``_``; a name still longer than 64 characters keeps
its first 55 and ends with ``_`` and 8 hexadecimal digits of the SHA-256 of the full
``<server>__<tool>`` text, so two long names stay apart and a name is the same every time.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["registry_name"]

_OTHER = re.compile(r"[^A-Za-z0-9_-]")
_MAX = 64


def registry_name(server: str, tool: str) -> str:
    """The registry name of MCP tool ``tool`` of server ``server`` (module rule).

    Args:
        server: the server's configured name (already valid: ``config.SERVER_NAME_RE``).
        tool: the tool's name as the server lists it (any text).

    Returns:
        A name matching ``^[A-Za-z0-9_-]{1,64}$``.
    """
    full = f"{server}__{tool}"
    name = _OTHER.sub("_", full)
    if len(name) <= _MAX:
        return name
    digest = hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{name[:_MAX - 9]}_{digest}"
