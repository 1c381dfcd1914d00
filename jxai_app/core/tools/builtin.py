"""Built-in tools: the current date and time, safe arithmetic, search of one's own conversations.

SPEC §4 asks for at least these three. ``search_conversations`` takes its search function
from the Django layer (``make_search_conversations_tool``) and searches only the requesting
user's conversations: the owner always comes from the ``ToolContext``, never from arguments.
"""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import inspect
import math
import operator
from collections.abc import Callable
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jxai_app.core.tools.context import ToolContext
from jxai_app.core.tools.definition import ToolDefinition, tool, tool_error, tool_success
from jxai_app.core.tools.registry import ToolRegistry

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_EXPONENT",
    "MAX_SEARCH_RESULTS",
    "SearchFunction",
    "calculate",
    "current_datetime",
    "default_registry",
    "evaluate_expression",
    "make_search_conversations_tool",
]

# --- current date and time -------------------------------------------------------------


@tool(timeout=5.0)
def current_datetime(
    timezone: Annotated[str, "An IANA time zone name such as 'Europe/Paris' or 'America/New_York'."] = "UTC",
) -> dict[str, Any]:
    """Get the current date and time in a time zone.

    Use it whenever the answer depends on today's date, the day of the week or the time.
    """
    name = timezone.strip()
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return tool_error(f"Unknown time zone {timezone!r}; use an IANA name such as 'Europe/Paris' or 'UTC'.")
    now = dt.datetime.now(zone)
    offset = now.strftime("%z")
    data = {
        "timezone": name,
        "iso": now.isoformat(timespec="seconds"),
        "date": now.date().isoformat(),
        "time": now.strftime("%H:%M:%S"),
        "weekday": now.strftime("%A"),
        "utc_offset": f"{offset[:3]}:{offset[3:]}" if offset else "+00:00",
        "unix": int(now.timestamp()),
    }
    return tool_success(data, summary=f"{data['weekday']} {data['date']} {data['time']} ({name})")


# --- safe arithmetic ---------------------------------------------------------------------

MAX_EXPRESSION_CHARS = 200
"""The longest expression ``calculate`` accepts, in characters."""
MAX_EXPONENT = 100
"""The largest ``|exponent|`` of ``**`` accepted."""
_MAX_INT_BITS = 1000  # ~1e301: bounds every intermediate integer
_MAX_FLOAT = 1e300

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "floor": math.floor,
    "ceil": math.ceil,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


class _CalcError(ValueError):
    """An expression ``calculate`` refuses, with the sentence for the model."""


def _check(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _CalcError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        raise _CalcError("the result is too large")
    if isinstance(value, float) and (not math.isfinite(value) or abs(value) > _MAX_FLOAT):
        raise _CalcError("the result is too large or not a number")
    return value


def _power(base: int | float, exponent: int | float) -> int | float:
    if abs(exponent) > MAX_EXPONENT:
        raise _CalcError(f"exponents larger than {MAX_EXPONENT} in absolute value are not allowed")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        if base.bit_length() * exponent > _MAX_INT_BITS + 64:
            raise _CalcError("the result is too large")
    if base == 0 and exponent < 0:
        raise ZeroDivisionError("zero cannot be raised to a negative power")
    return _check(operator.pow(base, exponent))


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise _CalcError(f"only numbers are allowed, not {node.value!r}")
        return _check(node.value)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.BitXor):
            raise _CalcError("'^' is not a power here; use '**'")
        op = _BINARY.get(type(node.op))
        if op is None:
            raise _CalcError(f"the operator {type(node.op).__name__} is not allowed")
        left, right = _eval(node.left), _eval(node.right)
        return _power(left, right) if op is operator.pow else _check(op(left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise _CalcError(f"unknown name {node.id!r} (known constants: {', '.join(_CONSTANTS)})")
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            raise _CalcError("attribute access is not allowed")
        if not isinstance(node.func, ast.Name):
            raise _CalcError("only the named math functions can be called")
        if node.func.id not in _FUNCTIONS:
            raise _CalcError(f"unknown function {node.func.id!r} (known: {', '.join(_FUNCTIONS)})")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) > 10:
            raise _CalcError(f"call {node.func.id} with at most 10 plain arguments")
        args = [_eval(a) for a in node.args]
        return _check(_FUNCTIONS[node.func.id](*args))
    if isinstance(node, ast.Attribute):
        raise _CalcError("attribute access is not allowed")
    raise _CalcError(f"{type(node).__name__} is not allowed; use numbers, + - * / // % **, parentheses and math functions")


def evaluate_expression(expression: str) -> int | float:
    """Evaluate arithmetic safely (no ``eval``): an ``ast`` whitelist walk.

    Allowed: int and float literals, ``+ - * / // % **``, unary ``+``/``-``, parentheses,
    the constants ``pi``, ``e``, ``tau`` and the functions in ``_FUNCTIONS``. Bounds:
    ``MAX_EXPRESSION_CHARS`` characters, ``|exponent| ≤ MAX_EXPONENT``, every intermediate
    integer ≤ 1000 bits and float ≤ 1e300 in magnitude.

    Args:
        expression: the text, e.g. ``"(2 + 3) * 4 ** 2"``.

    Returns:
        The value; an integral float below 2**53 is returned as an ``int``.

    Raises:
        ValueError: a refused or malformed expression (the message says why).
        ZeroDivisionError: division or modulo by zero.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise _CalcError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise _CalcError(f"the expression is not valid arithmetic ({exc.msg})") from None
    try:
        value = _eval(tree)
    except (OverflowError, RecursionError):
        raise _CalcError("the result is too large") from None
    except TypeError as exc:
        raise _CalcError(str(exc)) from None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


@tool(timeout=5.0)
def calculate(
    expression: Annotated[
        str, "Arithmetic such as '(2 + 3) * 4 ** 2' or 'sqrt(2) / 3'; numbers, + - * / // % **, parentheses, pi, e."
    ],
) -> dict[str, Any]:
    """Evaluate an arithmetic expression exactly and safely.

    Use it for any calculation rather than computing in your head.
    """
    try:
        value = evaluate_expression(expression)
    except ZeroDivisionError:
        return tool_error("Division by zero.")
    except ValueError as exc:
        return tool_error(f"Cannot calculate: {exc}.")
    return tool_success({"expression": expression, "result": value}, summary=f"{expression.strip()} = {value}")


# --- search over the requesting user's conversations ---------------------------------------

SearchFunction = Callable[[Any, str, int], Any]
MAX_SEARCH_RESULTS = 20
"""The largest ``limit`` ``search_conversations`` accepts."""
"""``search(owner, query, limit)`` → matching conversations as JSON-ready dicts (sync or async)."""


def make_search_conversations_tool(search: SearchFunction) -> ToolDefinition:
    """Build ``search_conversations``, which searches only the requesting user's conversations.

    The owner is always ``context.user``; no argument can name another one (the schema has
    no owner argument and unknown arguments are refused). With no user, or an anonymous one
    (``is_authenticated`` false), the tool refuses.

    Args:
        search: ``search(owner, query, limit)`` returning a list of dicts (sync functions
            run in a reused worker thread (``asyncio.to_thread``) and must release what they
            open there, e.g. database connections; async ones are awaited).

    Returns:
        The ``ToolDefinition``.
    """
    is_async = inspect.iscoroutinefunction(search)

    @tool(name="search_conversations", timeout=15.0)
    async def search_conversations(
        query: Annotated[str, "Words to look for in the titles and messages of the user's past conversations."],
        context: ToolContext,
        limit: Annotated[int, "How many conversations to return, 1 to 20.", {"minimum": 1, "maximum": 20}] = 5,
    ) -> dict[str, Any]:
        """Search the current user's own past conversations by text.

        Returns the matching conversations, most relevant first.
        """
        owner = context.user
        if owner is None or getattr(owner, "is_authenticated", True) is False:
            return tool_error("search_conversations needs a signed-in user; there is none for this call.")
        text = query.strip()
        if not text:
            return tool_error("Argument 'query' must not be empty.")
        count = max(1, min(int(limit), MAX_SEARCH_RESULTS))
        if is_async:
            found = await search(owner, text, count)
        else:
            found = await asyncio.to_thread(search, owner, text, count)
            if inspect.isawaitable(found):
                found = await found
        results = list(found or [])[:count]
        noun = "conversation" if len(results) == 1 else "conversations"
        return tool_success({"query": text, "results": results}, summary=f"{len(results)} {noun} found")

    return search_conversations


def default_registry(search: SearchFunction | None = None) -> ToolRegistry:
    """A registry with the built-in tools.

    Args:
        search: the conversation search function; ``search_conversations`` is registered
            only when one is given.

    Returns:
        A new ``ToolRegistry`` with ``current_datetime``, ``calculate`` and, given
        ``search``, ``search_conversations``.
    """
    registry = ToolRegistry([current_datetime, calculate])
    if search is not None:
        registry.register(make_search_conversations_tool(search))
    return registry
