"""The deployment's tool registry: the built-in tools, their stores bound to this app, and the
modules named in ``JXAI_TOOL_MODULES`` (docs/agent.md "Tool calls"; the built-ins:
docs/approval.md "The demonstration tool", docs/store.md "Search").

The built-ins act as the user the turn acts for (``ToolContext.user``); their stores run in
the worker's database threads (:func:`jxai_app.db.db_call`).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from jxai_app import conf
from jxai_app.core.errors import ConfigurationError
from jxai_app.core.tools import ToolRegistry, default_registry
from jxai_app.db import db_call
from jxai_app.store import conversation_search
from jxai_app.store.notes import note_save

__all__ = ["builtin_tool_names", "get_tool_registry"]


async def _search_conversations(owner: Any, query: str, limit: int) -> list[dict[str, Any]]:
    """``search_conversations``' store: the owner's own conversations
    (:func:`jxai_app.store.conversation_search`)."""
    return await db_call(conversation_search, owner=owner, query=query, limit=limit)


async def _save_note(owner: Any, text: str) -> dict[str, Any]:
    """``save_note``'s store (:func:`jxai_app.store.notes.note_save`)."""
    return dict(await db_call(note_save, owner=owner, text=text))


def _builtin_registry() -> ToolRegistry:
    """The built-in tools, their stores bound to this app (the one place they are listed)."""
    return default_registry(search=_search_conversations, save_note=_save_note)


@functools.cache
def get_tool_registry() -> ToolRegistry:
    """The process-wide tool registry: the built-ins plus every module named in
    ``JXAI_TOOL_MODULES``, each of which must define ``register(registry)``.

    Raises:
        ConfigurationError: a tool module cannot be imported or has no ``register``.
    """
    registry = _builtin_registry()
    for dotted in conf.tool_modules():
        try:
            module = importlib.import_module(dotted)
            register = getattr(module, "register")
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(f"tool module {dotted!r} cannot be loaded: {exc}") from None
        register(registry)
    return registry


@receiver(setting_changed)
def _forget_on_change(*, setting: str, **_: Any) -> None:
    """A changed ``JXAI_TOOL_MODULES`` (``override_settings``) builds the registry again."""
    if setting == "JXAI_TOOL_MODULES":
        get_tool_registry.cache_clear()


@functools.cache
def builtin_tool_names() -> frozenset[str]:
    """The names of the built-in tools (admin groups the registry's tools by source)."""
    return frozenset(defn.name for defn in _builtin_registry().list())
