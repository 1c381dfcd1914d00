"""An MCP ``CallToolResult`` as our tool result (docs/mcp.md "Results").

- ``isError`` → a failed result whose error is the text the server sent;
- structured content (JSON) → ``data`` is that object;
- otherwise text only → ``data`` is the text (blocks joined by blank lines);
- otherwise ``data`` is the list of blocks, each a small JSON object: text as
  ``{"type": "text", "text"}``, an image or audio as ``{"type", "mimeType", "bytes"}``
  (a description, never the bytes: the model and the page get a size, not a payload), a
  resource link as ``{"type": "resource_link", "uri", "name"}``, an embedded resource as its
  ``uri`` and its text (or its size, for binary contents).

What a server returns is data: the page renders tool results as text, sanitised like
model output (docs/security.md "MCP servers").
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import mcp_types as types

from jxai_app.core.tools.definition import tool_error, tool_success

__all__ = ["tool_result"]


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _block(block: Any) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, (types.ImageContent, types.AudioContent)):
        return {"type": block.type, "mimeType": block.mime_type, "bytes": _size(block.data)}
    if isinstance(block, types.ResourceLink):
        return {"type": "resource_link", "uri": str(block.uri), "name": block.name}
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        entry: dict[str, Any] = {"type": "resource", "uri": str(resource.uri), "mimeType": resource.mime_type}
        if isinstance(resource, types.TextResourceContents):
            entry["text"] = resource.text
        else:
            entry["bytes"] = _size(resource.blob)
        return entry
    return {"type": str(getattr(block, "type", "unknown"))}


def _summary(blocks: list[dict[str, Any]]) -> str:
    kinds = [b["type"] for b in blocks if b["type"] != "text"]
    return ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds))


def tool_result(server: str, tool: str, result: types.CallToolResult) -> dict[str, Any]:
    """``result`` as ``{"success": True, "data": …[, "summary"]}`` or ``{"success": False, "error": …}``.

    Args:
        server: the server's name (for the error text).
        tool: the tool's name on the server.
        result: what ``tools/call`` answered.
    """
    blocks = [_block(b) for b in result.content]
    text = "\n\n".join(b["text"] for b in blocks if b["type"] == "text")
    if result.is_error:
        return tool_error(text or f'MCP tool "{tool}" of server "{server}" reported an error')
    if result.structured_content is not None:
        return tool_success(result.structured_content)
    if all(b["type"] == "text" for b in blocks):
        return tool_success(text)
    return tool_success(blocks, summary=_summary(blocks))
