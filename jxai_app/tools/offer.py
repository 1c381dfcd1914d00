"""The tools one turn offers: the registry (with the MCP servers' tools) filtered and capped by
the tool policies for the turn's user and model (docs/security.md, threat 2 "Tool abuse")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jxai_app.core.providers import ModelConfig
from jxai_app.core.tools import GatedToolRegistry
from jxai_app.tools.policy import tool_view_for
from jxai_app.tools.registry import get_tool_registry

__all__ = ["tool_view"]


def tool_view(user: Any, model: ModelConfig, prior_calls: Mapping[str, int] | None = None) -> GatedToolRegistry:
    """The tools one turn of ``user`` on ``model`` offers (tools act as the user).

    Sync (reads ``ToolPolicy`` rows and the user's groups): call it in a database thread.
    Built once per turn, since the view counts calls for the per-turn caps (``prior_calls``:
    those a resumed turn ran before it paused).
    """
    return tool_view_for(user, get_tool_registry(), model_supports_tools=model.supports_tools,
                         prior_calls=prior_calls)
