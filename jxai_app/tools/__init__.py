"""Tools the model may call: definitions, schema generation, registry, built-ins (SPEC §4).

Framework-free core: nothing here imports Django.
"""

from __future__ import annotations

from jxai_app.tools.context import ToolContext

__all__ = ["ToolContext"]
