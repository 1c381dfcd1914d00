"""Tools the model may call: definitions, schema generation, registry, built-ins (docs/agent.md "The tool registry").

Framework-free core: nothing here imports Django.

Modules: ``context`` (``ToolContext``), ``definition`` (``ToolDefinition``, ``tool``,
``tool_success``, ``tool_error``), ``schema`` (JSON Schema from type hints), ``validation``
(argument preparation and checks), ``invoke`` (one call's steps), ``registry``
(``ToolRegistry``), ``gate`` (``GatedToolRegistry``), ``builtin`` (built-in tools).
"""

from __future__ import annotations

from jxai_app.core.tools.builtin import (
    calculate, current_datetime, default_registry, make_save_note_tool, make_search_conversations_tool,
)
from jxai_app.core.tools.context import ToolContext
from jxai_app.core.tools.definition import ToolDefinition, as_tool_result, tool, tool_error, tool_success
from jxai_app.core.tools.gate import GatedToolRegistry
from jxai_app.core.tools.registry import ToolRegistry, ToolView, llm_listing

__all__ = [
    "GatedToolRegistry",
    "ToolContext",
    "ToolDefinition",
    "ToolRegistry",
    "ToolView",
    "as_tool_result",
    "calculate",
    "current_datetime",
    "default_registry",
    "llm_listing",
    "make_save_note_tool",
    "make_search_conversations_tool",
    "tool",
    "tool_error",
    "tool_success",
]
