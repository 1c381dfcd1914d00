"""Tool definitions, result helpers and the ``@tool`` decorator (docs/agent.md "Definitions").

A tool result is a JSON object the model reads back::

    {"success": true, "data": <any JSON>, "summary": "<optional short text>"}
    {"success": false, "error": "<sentence>"}
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from jxai_app.core.errors import ToolError
from jxai_app.core.tools.context import ToolContext
from jxai_app.core.tools.schema import function_schema

__all__ = ["ToolDefinition", "ToolExecute", "as_tool_result", "tool", "tool_error", "tool_success"]

ToolExecute = Callable[[dict[str, Any], ToolContext], Any]
"""``execute(args, context)``: returns a result dict (or any JSON value), or an awaitable of it."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's function-name rule


def tool_success(data: Any, summary: str | None = None) -> dict[str, Any]:
    """A successful tool result (docs/agent.md "Definitions").

    Args:
        data: any JSON-serialisable value.
        summary: an optional short text for people (shown in the UI next to the call).

    Returns:
        ``{"success": True, "data": data}`` plus ``"summary"`` when one is given.
    """
    result: dict[str, Any] = {"success": True, "data": data}
    if summary is not None:
        result["summary"] = summary
    return result


def tool_error(message: str) -> dict[str, Any]:
    """A failed tool result (docs/agent.md "Definitions"): ``{"success": False, "error": message}``."""
    return {"success": False, "error": str(message)}


def as_tool_result(value: Any) -> dict[str, Any]:
    """Normalise what a tool returned into a result dict.

    A mapping with a boolean ``success`` key is taken as a result already; anything else
    (a plain dict, list, string, number, ``None``) becomes ``tool_success(value)``, so
    ``@tool`` functions may simply return their data.
    """
    if isinstance(value, Mapping) and isinstance(value.get("success"), bool):
        return dict(value)
    return tool_success(value)


@dataclass(frozen=True)
class ToolDefinition:
    """One tool the model may call (docs/agent.md "Definitions").

    Attributes:
        name: the function name the model uses; 1–64 of ``[A-Za-z0-9_-]`` (OpenAI's rule).
        description: what the tool does, for the model.
        parameters: the JSON Schema (Draft 2020-12) of the arguments object.
        execute: ``execute(args, context)``, sync (run in a thread) or async (awaited);
            returns a result dict (``tool_success``/``tool_error``) or plain JSON data.
        strict: validate arguments against ``parameters`` before executing (on by default). Unrelated to ``llm_strict``.
        llm_strict: add ``"strict": true`` to the provider listing (OpenAI strict function
            calling; the listed schema is rewritten to the strict subset). Off by default.
        timeout: seconds the call may take before it is answered with a failed result;
            ``None`` for no limit.

    Raises:
        ToolError: a bad name, a ``parameters`` that is not an object schema or not a valid
            Draft 2020-12 schema, a non-callable ``execute`` or a non-positive timeout.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    execute: ToolExecute = field(repr=False)
    strict: bool = True
    llm_strict: bool = False
    timeout: float | None = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ToolError(f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'")
        if not isinstance(self.parameters, Mapping) or self.parameters.get("type") != "object":
            raise ToolError(f"tool {self.name!r}: parameters must be a JSON Schema with type 'object'")
        try:
            Draft202012Validator.check_schema(self.parameters)
        except SchemaError as exc:
            raise ToolError(f"tool {self.name!r}: parameters is not a valid JSON Schema: {exc.message}") from exc
        if not callable(self.execute):
            raise ToolError(f"tool {self.name!r}: execute must be callable")
        if self.timeout is not None and not (isinstance(self.timeout, (int, float)) and self.timeout > 0 and math.isfinite(self.timeout)):
            raise ToolError(f"tool {self.name!r}: timeout must be a positive number of seconds or None")

    @property
    def is_async(self) -> bool:
        """Whether ``execute`` is a coroutine function (awaited rather than run in a thread)."""
        target = self.execute
        while isinstance(target, functools.partial):
            target = target.func
        return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(getattr(target, "__call__", None))


def _build(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    strict: bool,
    llm_strict: bool,
    timeout: float | None,
) -> ToolDefinition:
    info = function_schema(fn)
    params = info.parameters["properties"]
    required = tuple(info.parameters.get("required", ()))

    def arguments(args: Mapping[str, Any], context: ToolContext) -> dict[str, Any] | str:
        missing = [k for k in required if k not in args]
        if missing:
            return " ".join(f"Missing required argument '{k}'." for k in missing)
        kwargs = {k: v for k, v in args.items() if k in params}
        for key in info.nullable_defaults:
            kwargs.setdefault(key, None)
        if info.context_param is not None:
            kwargs[info.context_param] = context
        return kwargs

    execute: ToolExecute
    if inspect.iscoroutinefunction(fn):

        async def execute_async(args: dict[str, Any], context: ToolContext) -> Any:
            kwargs = arguments(args, context)
            return tool_error(kwargs) if isinstance(kwargs, str) else await fn(**kwargs)

        execute = execute_async
    else:

        def execute_sync(args: dict[str, Any], context: ToolContext) -> Any:
            kwargs = arguments(args, context)
            return tool_error(kwargs) if isinstance(kwargs, str) else fn(**kwargs)

        execute = execute_sync
    functools.update_wrapper(execute, fn)
    text = description if description is not None else info.description
    return ToolDefinition(
        name=name or fn.__name__,
        description=text,
        parameters=info.parameters,
        execute=execute,
        strict=strict,
        llm_strict=llm_strict,
        timeout=timeout,
    )


@overload
def tool(fn: Callable[..., Any], /) -> ToolDefinition: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = True,
    llm_strict: bool = False,
    timeout: float | None = 30.0,
) -> Callable[[Callable[..., Any]], ToolDefinition]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = True,
    llm_strict: bool = False,
    timeout: float | None = 30.0,
) -> ToolDefinition | Callable[[Callable[..., Any]], ToolDefinition]:
    """Turn a function into a ``ToolDefinition``, its schema built from its signature.

    Used bare (``@tool``) or with options (``@tool(name="x", timeout=5)``). The function
    receives its arguments as keywords (unknown keys dropped, omitted ``Optional``
    parameters given ``None``), plus the ``ToolContext`` in a parameter named ``context``
    or annotated ``ToolContext`` (left out of the schema). It may be sync or async and may
    return a result dict or plain data (wrapped by ``tool_success``). See
    ``jxai_app.core.tools.schema`` for the type-hint rules; the docstring's first part is the
    description, its ``Args:`` entries describe the parameters.

    Args:
        fn: the function (when used bare).
        name: the tool name (default: the function's ``__name__``).
        description: overrides the docstring's description.
        strict: validate arguments before executing (default on).
        llm_strict: send ``strict: true`` to the provider (default off).
        timeout: seconds before the call is answered with a failed result; ``None`` = none.

    Returns:
        A ``ToolDefinition`` (or a decorator producing one).

    Raises:
        ToolError: the signature cannot be described in JSON Schema.
    """
    def decorate(inner: Callable[..., Any]) -> ToolDefinition:
        return _build(
            inner, name=name, description=description, strict=strict, llm_strict=llm_strict, timeout=timeout
        )

    return decorate(fn) if fn is not None else decorate

