"""MCP servers of the tests' own, as the deployment would configure them (docs/mcp.md).

The servers are ``tests/app/mcp_servers.py`` run by the real SDK: a stdio child of the worker,
or a streamable-HTTP subprocess on 127.0.0.1. Each logs its start (with its pid) and every
call it receives to ``McpLog.path``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.net import free_port, port_answers

SERVER_SCRIPT = Path(__file__).with_name("mcp_servers.py")


@dataclass
class McpLog:
    """What the servers logged, one JSON object a line."""

    path: Path

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def calls(self, name: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.entries() if "call" in e and (name is None or e["call"] == name)]

    def pids(self) -> list[int]:
        return [e["started"] for e in self.entries() if "started" in e]


def stdio_server(name: str = "local", **extra: Any) -> dict[str, Any]:
    """The JSON configuration of the stdio test server (its log file through ``env``)."""
    return {"name": name, "transport": "stdio", "command": sys.executable, "args": [str(SERVER_SCRIPT), "stdio"],
            "env": ["JXAI_TEST_MCP_LOG"], "timeout": 30, **extra}


class HttpServer:
    """The streamable-HTTP test server in a subprocess on 127.0.0.1 (stopped by :meth:`stop`)."""

    def __init__(self, log: McpLog) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process = subprocess.Popen([sys.executable, str(SERVER_SCRIPT), "http", str(self.port)],
                                        env={**os.environ, "JXAI_TEST_MCP_LOG": str(log.path)})
        deadline = time.monotonic() + 20
        while not port_answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
