"""What a turn's runner is given: the plan its start prepared (:mod:`jxai_app.turns.start`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from jxai_app import store
from jxai_app.core.mcp import McpServerConfig
from jxai_app.core.providers import ModelConfig
from jxai_app.core.tools import GatedToolRegistry
from jxai_app.policy.budget import TurnBudget
from jxai_app.store.serializers import conversation_dict

__all__ = ["TurnPlan"]


@dataclass(kw_only=True, slots=True)
class TurnPlan:
    """Everything a turn's runner needs, read in the hop that saved the turn's start."""

    user: Any
    """The requesting user (the tools act as them; the budget is theirs)."""
    turn: store.TurnStart
    """What the start saved."""
    budget: TurnBudget
    model: ModelConfig
    tools: GatedToolRegistry
    """The tools this turn offers (:func:`jxai_app.tools.offer.tool_view`)."""
    system_prompt: str
    """The deployment's system prompt with the user's custom instructions (docs/store.md
    "Custom instructions")."""
    mcp_servers: list[McpServerConfig]
    """The MCP configuration read with the start (:func:`jxai_app.tools.mcp.apply`)."""
    snapshot: dict[str, Any] | None = None
    """A new branch's ``snapshot`` (edit, regenerate, retry): the active path up to the turn's
    question and the turn at seq 0, published before the turn's first frame."""

    @property
    def conversation_id(self) -> uuid.UUID:
        """The conversation the turn runs in."""
        return self.turn.conversation_id

    @property
    def turn_id(self) -> str:
        """The turn's id (as its frames carry it)."""
        return str(self.turn.turn_id)

    @property
    def conversation(self) -> dict[str, Any]:
        """The conversation as the start left it (protocol dict, status ``streaming``)."""
        return conversation_dict(self.turn.conversation)
