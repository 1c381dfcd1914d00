"""The tool registry and the read interface it shares with gated views (docs/agent.md "The tool registry").

Everything the agent loop needs goes through ``ToolView``: ``list``, ``list_for_llm``,
``get_definition``, ``validate`` and ``execute``. ``ToolRegistry`` holds the definitions;
``GatedToolRegistry`` (``jxai_app.core.tools.gate``) filters them per turn without mutating the
registry.
"""

from __future__ import annotations

import builtins
import copy
import logging
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from jxai_app.core.errors import ToolError
from jxai_app.core.tools.context import ToolContext
from jxai_app.core.tools.definition import ToolDefinition, tool_error
from jxai_app.core.tools.invoke import normalise_result, parse_arguments, run_definition
from jxai_app.core.tools.schema import openai_strict_schema
from jxai_app.core.tools.validation import prepare_arguments, validation_errors

__all__ = ["ToolRegistry", "ToolView", "llm_listing"]

logger = logging.getLogger("jxai_app.core.tools")


def llm_listing(defn: ToolDefinition) -> dict[str, Any]:
    """One tool in OpenAI function-calling shape (docs/agent.md "Listing for the model").

    Returns:
        ``{"type": "function", "function": {"name", "description", "parameters"}}``, with
        ``"strict": True`` in ``function`` and the schema rewritten to the strict subset
        only when the definition has ``llm_strict`` (never for its own ``strict`` flag).
        The schema is a copy: changing it does not change the registry.
    """
    function: dict[str, Any] = {"name": defn.name, "description": defn.description}
    if defn.llm_strict:
        function["parameters"] = openai_strict_schema(defn.parameters)
        function["strict"] = True
    else:
        function["parameters"] = copy.deepcopy(defn.parameters)
    return {"type": "function", "function": function}


class ToolView(ABC):
    """The read-and-run interface of a registry or a gated view of one."""

    @abstractmethod
    def list(self) -> list[ToolDefinition]:
        """The definitions offered, in registration order."""

    @abstractmethod
    def get_definition(self, name: str) -> ToolDefinition | None:
        """The definition offered under ``name``, or ``None``."""

    @property
    @abstractmethod
    def root(self) -> ToolRegistry:
        """The registry at the bottom of this view (which holds the limits)."""

    def _knows(self, name: str) -> bool:
        """Whether ``name`` exists in the registry, offered here or not."""
        return self.root.get_definition(name) is not None

    def _admit(self, defn: ToolDefinition) -> str | None:
        """Count a call about to run; return a refusal sentence, or ``None`` to go on."""
        return None

    def requires_approval(self, name: str) -> bool:
        """Whether a call of ``name`` waits for a person's approval before it runs
        (docs/approval.md "Policy"); a registry alone requires none."""
        return False

    def list_for_llm(self) -> builtins.list[dict[str, Any]]:
        """The offered tools in OpenAI function-calling shape (see ``llm_listing``)."""
        return [llm_listing(defn) for defn in self.list()]

    def _unknown(self, name: str) -> str:
        if self._knows(name):
            return f'Tool "{name}" is not available in this conversation'
        return f'Unknown tool: "{name}"'

    def validate(self, name: str, args: Any) -> builtins.list[str]:
        """Check arguments against the tool's schema (docs/agent.md "Validation").

        Args:
            name: the tool name.
            args: the decoded arguments.

        Returns:
            Short sentences naming each bad argument; empty when valid or when the tool
            has ``strict=False``. An unknown (or not offered) tool gives one sentence.
        """
        defn = self.get_definition(name)
        if defn is None:
            return [self._unknown(name)]
        if not defn.strict:
            return []
        if not isinstance(args, Mapping):
            return ["The arguments must be a JSON object."]
        return validation_errors(defn.parameters, prepare_arguments(defn.parameters, args))

    async def execute(
        self,
        name: str,
        arguments_json: str | Mapping[str, Any] | None,
        context: ToolContext | None = None,
    ) -> dict[str, Any]:
        """Run one tool call; never raises (docs/agent.md "Execution never raises").

        Unknown or not offered tool, a call over its per-turn cap, unparseable or
        non-object arguments, failed validation, an exception in the
        tool, a timeout, and an unserialisable or oversized result all come
        back as ``{"success": False, "error": "<sentence>"}``.

        Args:
            name: the tool the model named.
            arguments_json: the model's argument text (``""`` means ``{}``), or a mapping.
            context: handed to the tool as is; ``None`` gives a detached context (docs/agent.md "Tool context").

        Returns:
            The normalised result dict (``{"success": True, "data": …[, "summary"]}`` or
            ``{"success": False, "error": …}``).

        Raises:
            asyncio.CancelledError: only when the awaiting task itself is cancelled.
        """
        try:
            defn = self.get_definition(name)
            if defn is None:
                return tool_error(self._unknown(name))
            refusal = self._admit(defn)
            if refusal is not None:
                return tool_error(refusal)
            root = self.root
            args = parse_arguments(arguments_json, root.max_argument_chars)
            if isinstance(args, str):
                return tool_error(args)
            if defn.strict:
                args = prepare_arguments(defn.parameters, args)
                errors = validation_errors(defn.parameters, args)
                if errors:
                    return tool_error("Validation failed: " + "; ".join(errors))
            value = await run_definition(defn, args, context if context is not None else ToolContext.detached())
            return normalise_result(defn.name, value, root.max_result_chars)
        except Exception as exc:  # a bug of ours (e.g. a predicate): still answer the model
            logger.exception("tool call %s failed in the registry", name)
            return tool_error(f'Tool "{name}" execution error: {exc}')


class ToolRegistry(ToolView):
    """The tools a deployment offers, in registration order (docs/agent.md "The tool registry").

    Args:
        definitions: definitions to register at once.
        max_argument_chars: the longest argument text a call may carry.
        max_result_chars: the longest result JSON a tool may return to the model.
    """

    def __init__(
        self,
        definitions: Iterable[ToolDefinition] = (),
        *,
        max_argument_chars: int = 100_000,
        max_result_chars: int = 200_000,
    ) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        self.max_argument_chars = max_argument_chars
        self.max_result_chars = max_result_chars
        for defn in definitions:
            self.register(defn)

    @property
    def root(self) -> ToolRegistry:
        return self

    def register(self, defn: ToolDefinition) -> ToolDefinition:
        """Add a definition; registering a name again warns and replaces it.

        Args:
            defn: the definition (``@tool`` produces one).

        Returns:
            ``defn`` (so ``register`` can be used as a decorator on a ``ToolDefinition``).

        Raises:
            ToolError: ``defn`` is not a ``ToolDefinition``.
        """
        if not isinstance(defn, ToolDefinition):
            raise ToolError(f"register() takes a ToolDefinition, got {type(defn).__name__} (decorate it with @tool)")
        if defn.name in self._tools:
            warnings.warn(f"tool {defn.name!r} registered again; replacing the earlier definition", RuntimeWarning, stacklevel=2)
            logger.warning("tool %s registered again; replacing the earlier definition", defn.name)
        self._tools[defn.name] = defn
        return defn

    def unregister(self, name: str) -> ToolDefinition | None:
        """Remove tool ``name`` (a source whose tools change at run time: MCP servers,
        docs/mcp.md "Sessions"); returns the removed definition, or ``None`` when absent."""
        return self._tools.pop(name, None)

    def list(self) -> list[ToolDefinition]:
        return list(self._tools.values())

    def get_definition(self, name: str) -> ToolDefinition | None:
        return self._tools.get(name) if isinstance(name, str) else None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)
