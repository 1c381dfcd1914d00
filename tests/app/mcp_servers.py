"""MCP servers the tests run, written with the ``mcp`` SDK's server side (``MCPServer``).

``python tests/app/mcp_servers.py stdio`` serves over stdin/stdout (``stdio legacy``: it serves
only the 2025 protocol's ``initialize`` handshake, as servers of that protocol do, so the
client falls back to it and hears of changes through unsolicited notifications);
``python tests/app/mcp_servers.py http PORT`` serves streamable HTTP on 127.0.0.1:PORT at
``/mcp``. Each start and each tool call appends one JSON line to the file named by
``JXAI_TEST_MCP_LOG`` (passed to a stdio server through its configured environment names),
so a test can tell what the server saw, and its process id.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from typing import Any

from mcp import stdio_server
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.runner import serve_loop
from mcp.types import ResourceLink

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

server = MCPServer("testing")


def log(**entry: Any) -> None:
    path = os.environ.get("JXAI_TEST_MCP_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    log(call="add", a=a, b=b)
    return a + b


@server.tool()
def echo(text: str, ctx: Context) -> dict[str, Any]:
    """Echo the text back with the headers the client sent that concern jxai (HTTP only)."""
    headers = {k: v for k, v in (ctx.headers or {}).items() if k in ("x-jxai-user", "x-team")}
    log(call="echo", text=text, headers=headers)
    return {"text": text, "headers": headers}


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the reason."""
    log(call="fail", reason=reason)
    raise ValueError(reason)


@server.tool(structured_output=False)
def picture() -> list[Any]:
    """A tiny image, a resource link and a line of text."""
    log(call="picture")
    return ["A red dot.", Image(data=PNG_1X1, format="png"),
            ResourceLink(type="resource_link", uri="https://example.com/dot.png", name="dot.png")]


@server.tool()
def html() -> str:
    """Text that would be markup if a page trusted it."""
    log(call="html")
    return '<img src=x onerror="window.__pwned=\'mcp\'"><script>window.__pwned=\'mcp-script\'</script>'


@server.tool()
async def slow(seconds: float) -> str:
    """Wait this many seconds, then answer."""
    log(call="slow", seconds=seconds)
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add a tool named ``late`` and tell the client the tool list changed."""
    log(call="grow", protocol=ctx.protocol_version)

    def late(word: str) -> str:
        """A tool added at run time."""
        log(call="late", word=word)
        return word.upper()

    server.add_tool(late)
    if ctx.protocol_version in ("2026-07-28",):
        await ctx.notify_tools_changed()  # to the client's subscriptions/listen stream
    else:
        await ctx.session.send_tool_list_changed()  # the 2025 protocol: unsolicited
    return "grown"


async def serve_legacy() -> None:
    """Serve the handshake era only over stdio (the SDK's loop driver for that era)."""
    lowlevel = server._lowlevel_server  # the SDK's own client reaches it the same way
    async with stdio_server() as (read, write), lowlevel.lifespan(lowlevel) as state:
        await serve_loop(lowlevel, read, write, lifespan_state=state,
                         init_options=lowlevel.create_initialization_options())


def main() -> None:
    log(started=os.getpid())
    if sys.argv[1:] == ["stdio", "legacy"]:
        asyncio.run(serve_legacy())
    elif sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")


if __name__ == "__main__":
    main()
