"""One MCP server's configuration (docs/mcp.md "Configuring a server").

Secrets are never part of it: a stdio server names the environment variables it is given,
an HTTP server names the variable that holds each header's value; the values are read from
this process's environment when the connection opens.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jxai_app.core.errors import ConfigurationError

__all__ = ["DEFAULT_TIMEOUT", "DEFAULT_USER_HEADER", "McpServerConfig", "SERVER_NAME_RE"]

SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,23}$")
"""A server name: 1-24 letters, digits, ``-`` or single ``_`` (``__`` separates server and tool)."""
_HEADER_RE = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
DEFAULT_TIMEOUT = 30.0
DEFAULT_USER_HEADER = "X-Jxai-User"
Transport = Literal["stdio", "streamable-http"]


@dataclass(frozen=True)
class McpServerConfig:
    """How to reach one MCP server (docs/mcp.md "Configuring a server").

    Attributes:
        name: the server's name, the prefix of its tools' registry names (``SERVER_NAME_RE``).
        transport: ``stdio`` (a command run as a child process) or ``streamable-http`` (a URL).
        command: the program of a stdio server.
        args: its arguments.
        env_names: names of this process's environment variables passed to the child
            (besides the SDK's safe defaults such as ``PATH`` and ``HOME``).
        url: the endpoint of a streamable-HTTP server.
        header_env: header name → name of the environment variable holding its value.
        timeout: seconds for connecting and for each call (a tool policy may override the
            call's timeout).
        pass_user_id: send the requesting user's id with each call (docs/security.md "MCP servers").
        user_header: the header carrying it (HTTP servers).
        enabled: off: the server is not connected and offers no tools.
    """

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env_names: tuple[str, ...] = ()
    url: str = ""
    header_env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    pass_user_id: bool = False
    user_header: str = DEFAULT_USER_HEADER
    enabled: bool = True

    def __post_init__(self) -> None:
        where = f"MCP server {self.name!r}"
        if not isinstance(self.name, str) or not SERVER_NAME_RE.match(self.name):
            raise ConfigurationError(f"{where}: the name must be 1-24 letters, digits, '-' or single '_'")
        if self.transport == "stdio":
            if not self.command:
                raise ConfigurationError(f"{where}: a stdio server needs a command")
        elif self.transport == "streamable-http":
            if not self.url.startswith(("http://", "https://")):
                raise ConfigurationError(f"{where}: a streamable-http server needs an http(s) URL")
        else:
            raise ConfigurationError(f"{where}: transport must be 'stdio' or 'streamable-http'")
        for env in (*self.env_names, *self.header_env.values()):
            if not _ENV_RE.match(env):
                raise ConfigurationError(f"{where}: {env!r} is not an environment variable name")
        for header in (*self.header_env, self.user_header):
            if not _HEADER_RE.match(header):
                raise ConfigurationError(f"{where}: {header!r} is not a header name")
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0 and math.isfinite(self.timeout)):
            raise ConfigurationError(f"{where}: timeout must be a positive number of seconds")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> McpServerConfig:
        """A configuration from its JSON form (docs/mcp.md "Without admin: a JSON file")::

            {"name": "tickets", "transport": "streamable-http", "url": "https://…/mcp",
             "headers": {"Authorization": "TICKETS_AUTH"}, "timeout": 20, "pass_user_id": true}
            {"name": "files", "transport": "stdio", "command": "npx",
             "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"], "env": ["HOME"]}

        Raises:
            ConfigurationError: an unknown member, or a value of the wrong kind.
        """
        known = {"name", "transport", "command", "args", "env", "url", "headers", "timeout", "pass_user_id",
                 "user_header", "enabled"}
        if not isinstance(data, Mapping):
            raise ConfigurationError("an MCP server must be a JSON object")
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigurationError(f"MCP server {data.get('name')!r}: unknown member(s) {', '.join(unknown)}")
        try:
            return cls(
                name=data.get("name", ""), transport=data.get("transport", "stdio"),
                command=str(data.get("command", "")), args=tuple(str(a) for a in data.get("args", ())),
                env_names=tuple(str(e) for e in data.get("env", ())), url=str(data.get("url", "")),
                header_env={str(k): str(v) for k, v in dict(data.get("headers", {})).items()},
                timeout=float(data.get("timeout", DEFAULT_TIMEOUT)), pass_user_id=bool(data.get("pass_user_id", False)),
                user_header=str(data.get("user_header", DEFAULT_USER_HEADER)), enabled=bool(data.get("enabled", True)),
            )
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"MCP server {data.get('name')!r}: {exc}") from None
