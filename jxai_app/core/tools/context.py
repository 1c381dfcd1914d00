"""The context a tool receives with each call (docs/agent.md "Tool context").

Tools authorise in code from this object, never by trusting the prompt: the user comes
from the authenticated session, not from the model's arguments.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

__all__ = ["ToolContext"]


@dataclass(frozen=True)
class ToolContext:
    """Who is calling a tool, in which conversation, for which call.

    Attributes:
        user: the requesting user (a Django user in the app layer; any object in the core).
            ``None`` for a detached context; tools that read per-user data must refuse then.
        conversation_id: the conversation the turn belongs to, or ``None``.
        call_id: the model's tool-call id (``""`` for a detached context).
        signal: the turn's cancel signal; set means "stop as soon as you can". ``None``
            means the call can never be cancelled.
        model: the model alias (or provider model id) that asked for the call, or ``None``.
    """

    user: Any = None
    conversation_id: int | str | None = None
    call_id: str = ""
    signal: asyncio.Event | None = None
    model: str | None = None

    @classmethod
    def detached(cls) -> ToolContext:
        """A context with no user, no conversation, call id ``""`` and no signal."""
        return cls()

    @property
    def cancelled(self) -> bool:
        """Whether the turn's cancel signal is set."""
        return self.signal is not None and self.signal.is_set()
