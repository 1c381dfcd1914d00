"""A tool module for the websocket policy tests (``JXAI_TOOL_MODULES = ["tests.app.ws_tools"]``).

``probe`` records every call it really runs (who it ran as, with which argument), so a test
can tell a refused call from one that ran.
"""

from __future__ import annotations

from typing import Annotated, Any

from jxai_app.core.tools import ToolContext, ToolRegistry, tool

CALLS: list[tuple[Any, str]] = []
"""``(user pk, word)`` of every call that ran."""


@tool(name="probe", timeout=5.0)
def probe(word: Annotated[str, "Any word."], context: ToolContext) -> dict[str, Any]:
    """Echo a word back (a test tool that records that it ran)."""
    CALLS.append((getattr(context.user, "pk", None), word))
    return {"echo": word}


def register(registry: ToolRegistry) -> None:
    """Add ``probe`` to the deployment's registry."""
    registry.register(probe)
