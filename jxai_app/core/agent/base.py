"""What the agent loop needs from its collaborators, and its policy (docs/agent.md)."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol, TypeAlias

from jxai_app.core.streaming.events import StreamEvent

__all__ = ["AgentPolicy", "ChatClient", "ContextFactory", "Signal", "ToolSource"]


class Signal(Protocol):
    """A cancel signal: an :class:`asyncio.Event` or anything with ``is_set()``."""

    def is_set(self) -> bool: ...


class ChatClient(Protocol):
    """A streaming client (docs/streaming.md "The client interface"): ends with exactly one ``done`` or ``error``."""

    def stream_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], system_prompt: str,
                    *, signal: Any = None) -> AsyncIterator[StreamEvent]: ...


class ToolSource(Protocol):
    """A tool registry or gated view (docs/agent.md "The tool registry"): ``execute`` should never raise."""

    def list_for_llm(self) -> list[dict[str, Any]]: ...

    async def execute(self, name: str, arguments_json: str, context: Any) -> Mapping[str, Any]: ...


ContextFactory: TypeAlias = Callable[[str, str], Any]
"""``context_factory(call_id, name) -> ToolContext`` for one call."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentPolicy:
    """Limits of one turn (docs/agent.md "Budgets", "Tool calls").

    Raises:
        ValueError: a count below 1 or a non-positive ``tool_timeout``.
    """

    max_tool_rounds: int = 5
    """Rounds that handled at least one tool call."""
    max_rounds: int = 25
    """Model requests in the turn, whatever they did."""
    tool_concurrency: int = 4
    """Calls of one round run at the same time at most."""
    tool_timeout: float | None = None
    """Seconds; a backstop over the registry's own per-tool timeout (``None``: none)."""
    max_tool_calls_per_round: int = 20
    """Calls of one round that run; later ones get a failed result without running
    (docs/agent.md "Tool calls")."""

    def __post_init__(self) -> None:
        for name in ("max_tool_rounds", "max_rounds", "tool_concurrency", "max_tool_calls_per_round"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"AgentPolicy.{name} must be an integer of at least 1, not {value!r}")
        if self.tool_timeout is not None and not self.tool_timeout > 0:
            raise ValueError(f"AgentPolicy.tool_timeout must be positive seconds, not {self.tool_timeout!r}")
