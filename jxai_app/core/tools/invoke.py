"""The steps of one tool call: parse the arguments, run the tool, normalise the result.

Each step answers with a failed result instead of raising (docs/agent.md "Execution never
raises"). The model-visible prefixes stay stable: ``Failed to parse arguments: ``,
``Unknown tool: "<name>"``, ``Tool "<name>" execution error: ``,
``Tool "<name>" returned a result that cannot be serialized: ``, ``Validation failed: ``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import inspect
import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from jxai_app.core.tools.context import ToolContext
from jxai_app.core.tools.definition import ToolDefinition, as_tool_result, tool_error

__all__ = ["normalise_result", "parse_arguments", "run_definition"]

logger = logging.getLogger("jxai_app.core.tools")


class _Raised:
    """An exception raised by the tool itself (kept apart from the timeout's TimeoutError)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array"


def parse_arguments(arguments: str | Mapping[str, Any] | None, max_chars: int) -> dict[str, Any] | str:
    """Decode a call's argument text (docs/agent.md "Tool calls": empty is ``{}``, only an object passes).

    Args:
        arguments: the JSON text the model produced (``None``, ``""`` or blanks mean ``{}``),
            or an already decoded mapping.
        max_chars: the longest argument text accepted.

    Returns:
        The arguments dict, or the error sentence (``Failed to parse arguments: …``).
    """
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not isinstance(arguments, str):
        return f"Failed to parse arguments: arguments must be JSON text, got {type(arguments).__name__}"
    if not arguments.strip():
        return {}
    if len(arguments) > max_chars:
        return f"Failed to parse arguments: the arguments are longer than {max_chars} characters"
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        return f"Failed to parse arguments: {exc}"
    if not isinstance(value, dict):
        return f"Failed to parse arguments: arguments must be a JSON object, got {_json_kind(value)}"
    return value


async def _call(defn: ToolDefinition, args: dict[str, Any], context: ToolContext) -> Any:
    try:
        if defn.is_async:
            value = await defn.execute(args, context)
        else:
            value = await asyncio.to_thread(defn.execute, args, context)
        if inspect.isawaitable(value):  # a sync callable that handed back a coroutine
            value = await value
        return value
    except Exception as exc:  # the tool's own failure, reported to the model
        return _Raised(exc)


async def run_definition(defn: ToolDefinition, args: dict[str, Any], context: ToolContext) -> Any:
    """Run a tool with its timeout; never raises except on cancellation of the caller.

    Sync tools run in a worker thread (``asyncio.to_thread``); async tools are awaited.
    When the timeout passes, an async tool is cancelled; a sync tool's thread cannot be
    killed, so it runs on to its end in the background and its result is abandoned.

    Args:
        defn: the tool.
        args: the prepared arguments.
        context: the call's context, handed to the tool as is (docs/agent.md "Tool context").

    Returns:
        What the tool returned, or a failed result for an exception or a timeout.

    Raises:
        asyncio.CancelledError: the caller itself was cancelled.
    """
    try:
        value = await asyncio.wait_for(_call(defn, args, context), timeout=defn.timeout)
    except TimeoutError:
        logger.warning("tool %s timed out after %ss", defn.name, defn.timeout)
        return tool_error(f'Tool "{defn.name}" timed out after {defn.timeout:g} seconds')
    if isinstance(value, _Raised):
        logger.warning("tool %s raised", defn.name, exc_info=value.exc)
        message = str(value.exc) or type(value.exc).__name__
        return tool_error(f'Tool "{defn.name}" execution error: {message}')
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def normalise_result(name: str, value: Any, max_chars: int) -> dict[str, Any]:
    """Make a tool's return value a JSON-safe result dict (docs/agent.md "Execution never raises").

    The value is wrapped by ``as_tool_result`` and sent through a JSON round trip
    (datetimes, dates and times become ISO strings, enums their values, sets lists, UUIDs
    strings). A value that cannot be serialised (circular, NaN/Infinity, unknown objects)
    or whose JSON is longer than ``max_chars`` becomes a failed result.

    Args:
        name: the tool's name, for the error text.
        value: what the tool returned.
        max_chars: the longest result JSON accepted.

    Returns:
        The normalised result dict.
    """
    try:
        text = json.dumps(as_tool_result(value), default=_json_default, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError, OverflowError) as exc:
        return tool_error(f'Tool "{name}" returned a result that cannot be serialized: {exc}')
    if len(text) > max_chars:
        return tool_error(f'Tool "{name}" returned a result longer than {max_chars} characters')
    result: dict[str, Any] = json.loads(text)
    if result.get("success") is False and not isinstance(result.get("error"), str):
        result["error"] = f'Tool "{name}" failed without a message'
    return result
