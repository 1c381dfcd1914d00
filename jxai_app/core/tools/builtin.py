"""Built-in tools: the current date and time, safe arithmetic, search of one's own conversations,
and a note in one's own notes (the tool the approval demonstration uses).

(docs/agent.md "Built-in tools".) ``search_conversations`` takes its search function
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
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jxai_app.core.tools.context import ToolContext
from jxai_app.core.tools.definition import ToolDefinition, tool, tool_error, tool_success
from jxai_app.core.tools.registry import ToolRegistry

__all__ = [
    "ARITHMETIC_PATTERN",
    "MAX_EXPRESSION_CHARS",
    "MAX_EXPONENT",
    "MAX_INT_BITS",
    "MAX_ROUND_DIGITS",
    "MAX_SEARCH_RESULTS",
    "SearchFunction",
    "calculate",
    "current_datetime",
    "default_registry",
    "evaluate_expression",
    "make_save_note_tool",
    "make_search_conversations_tool",
    "spell_out",
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
MAX_ROUND_DIGITS = 300
"""The largest ``|ndigits|`` of ``round(x, ndigits)`` accepted (``10 ** 300`` has 997 bits)."""
MAX_INT_BITS = 1000
"""The largest integer the evaluator makes, in bits (about ``1e301``): every operation whose
integer result could be larger is refused before it runs."""
_MAX_FLOAT = 1e300
_LOG2_10 = math.log2(10)

Number = int | float


def _bits(value: Number) -> int:
    """Size of a number's magnitude in bits: an int's bit length, a float's binary exponent
    (at most 997 for the floats the evaluator keeps, 0 below 1)."""
    if isinstance(value, int):
        return value.bit_length()
    return max(math.frexp(value)[1], 0)


def _float_bound(args: Sequence[Number]) -> int:
    """``/`` and the float functions: 0, a float is 64 bits whatever its value."""
    return 0


def _largest_bound(args: Sequence[Number]) -> int:
    """``abs``, ``min``, ``max``, ``floor``, ``ceil``: no larger than the largest operand."""
    return max((_bits(a) for a in args), default=0)


def _sum_bound(args: Sequence[Number]) -> int:
    return _largest_bound(args) + 1


def _product_bound(args: Sequence[Number]) -> int:
    return sum(_bits(a) for a in args)


def _quotient_bound(args: Sequence[Number]) -> int:
    return _bits(args[0])


def _remainder_bound(args: Sequence[Number]) -> int:
    return _bits(args[1])


def _power_bound(args: Sequence[Number]) -> int:
    base, exponent = args
    if abs(exponent) > MAX_EXPONENT:
        raise _CalcError(f"exponents larger than {MAX_EXPONENT} in absolute value are not allowed")
    if base == 0 and exponent < 0:
        raise ZeroDivisionError("zero cannot be raised to a negative power")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        return _bits(base) * exponent
    return 0


def _round_bound(args: Sequence[Number]) -> int:
    if len(args) != 2:
        return _largest_bound(args)  # round(x) makes an int no larger than x; others raise
    value, ndigits = args
    if isinstance(ndigits, bool) or not isinstance(ndigits, int):
        raise _CalcError("round takes a whole number of digits")
    if abs(ndigits) > MAX_ROUND_DIGITS:
        raise _CalcError(f"round takes at most {MAX_ROUND_DIGITS} digits either side of the point")
    # An int rounded to ndigits < 0 is computed through 10 ** -ndigits.
    return max(_bits(value), math.ceil(-ndigits * _LOG2_10)) + 1


# Each operation comes with the bound of its integer result's size in bits, computed from
# the operands' sizes before the operation runs (docs/security.md, "Tools that cannot hold a
# worker"). Unary + and - keep the size. An operation added here needs its bound; there are
# no factorials, shifts, bit operations or strings, whose results grow without such a bound.
_BINARY: dict[type[ast.operator], tuple[Callable[[Any, Any], Any], Callable[[Sequence[Number]], int]]] = {
    ast.Add: (operator.add, _sum_bound),
    ast.Sub: (operator.sub, _sum_bound),
    ast.Mult: (operator.mul, _product_bound),
    ast.Div: (operator.truediv, _float_bound),
    ast.FloorDiv: (operator.floordiv, _quotient_bound),
    ast.Mod: (operator.mod, _remainder_bound),
    ast.Pow: (operator.pow, _power_bound),
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, tuple[Callable[..., Any], Callable[[Sequence[Number]], int]]] = {
    "abs": (abs, _largest_bound),
    "round": (round, _round_bound),
    "min": (min, _largest_bound),
    "max": (max, _largest_bound),
    "sqrt": (math.sqrt, _float_bound),
    "floor": (math.floor, _largest_bound),
    "ceil": (math.ceil, _largest_bound),
    "exp": (math.exp, _float_bound),
    "log": (math.log, _float_bound),
    "log10": (math.log10, _float_bound),
    "log2": (math.log2, _float_bound),
    "sin": (math.sin, _float_bound),
    "cos": (math.cos, _float_bound),
    "tan": (math.tan, _float_bound),
    "asin": (math.asin, _float_bound),
    "acos": (math.acos, _float_bound),
    "atan": (math.atan, _float_bound),
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


class _CalcError(ValueError):
    """An expression ``calculate`` refuses, with the sentence for the model."""


def _bounded(bound: int) -> None:
    if bound > MAX_INT_BITS:
        raise _CalcError("the result is too large")


def _check(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _CalcError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _CalcError("the result is too large")
    if isinstance(value, float) and (not math.isfinite(value) or abs(value) > _MAX_FLOAT):
        raise _CalcError("the result is too large or not a number")
    return value


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise _CalcError(f"only numbers are allowed, not {node.value!r}")
        return _check(node.value)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.BitXor):
            raise _CalcError("'^' is not a power here; use '**'")
        entry = _BINARY.get(type(node.op))
        if entry is None:
            raise _CalcError(f"the operator {type(node.op).__name__} is not allowed")
        op, bound = entry
        left, right = _eval(node.left), _eval(node.right)
        _bounded(bound((left, right)))
        return _check(op(left, right))
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
        function, bound = _FUNCTIONS[node.func.id]
        args = [_eval(a) for a in node.args]
        _bounded(bound(args))
        return _check(function(*args))
    if isinstance(node, ast.Attribute):
        raise _CalcError("attribute access is not allowed")
    raise _CalcError(f"{type(node).__name__} is not allowed; use numbers, + - * / // % **, parentheses and math functions")


# Words people (and small models) write for the operators, each with the operator it stands
# for (docs/agent.md "Built-in tools"). One word becomes one operator, so the operations an
# expression of MAX_EXPRESSION_CHARS characters can hold stay as few as with symbols.
_OPERATOR_WORDS: tuple[tuple[str, str], ...] = (
    (r"multiplied\s+by|times", "*"),
    (r"divided\s+by|over", "/"),
    (r"plus", "+"),
    (r"minus", "-"),
    (r"(?:raised\s+)?to\s+the\s+power\s+of", "**"),
    (r"modulo|mod", "%"),
)
_WORD_OPERATORS = [(re.compile(rf"\b(?:{words})\b", re.IGNORECASE), f" {symbol} ") for words, symbol in _OPERATOR_WORDS]
_SIGNS: dict[str, str] = {"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-"}
_SIGN = re.compile("|".join(map(re.escape, _SIGNS)))
_TIMES_X = re.compile(r"(?<=[\d.)])(?<!\b0)\s*[xX]\s*(?=[\d.(])")
"""``x`` between two operands (``12 x 7``, ``12x7``, ``(1+2)x3``), never a hex prefix (``0x10``)."""
_POWER_WORDS = re.compile(r"\s*\b(squared|cubed)\b", re.IGNORECASE)
_LEAD_WORDS = re.compile(r"^\s*(?:what\s+is|what's|how\s+much\s+is|calculate|compute)\s+", re.IGNORECASE)
_TRAILING = re.compile(r"[\s?=!]+$")

_NUMBER = r"\d+(?:\.\d+)?"
ARITHMETIC_PATTERN = (
    rf"(?i){_NUMBER}\s*(?:\*\*|[-+*/%^×·÷−x]|\b(?:{'|'.join(w for w, _ in _OPERATOR_WORDS)})\b)\s*\(?\s*-?{_NUMBER}"
    rf"|{_NUMBER}\s*\b(?:squared|cubed)\b"
    rf"|\b(?:{'|'.join(_FUNCTIONS)})\s*\(\s*-?{_NUMBER}"
)
"""A regular expression that finds arithmetic in a sentence: two numbers joined by an operator
or one of the words ``calculate`` reads (``12 times 7``, ``3.5 / 2``, ``2 to the power of 8``),
a number ``squared`` or ``cubed``, or a function of a number (``sqrt(2)``). Not in "the
capital of Italy" or "a poem about 3 cats". The embedded model's calculator alias forces
``calculate`` only on a user message it finds in (its ``tool_choice_when``, README "The
embedded local model")."""


def spell_out(expression: str) -> str:
    """``expression`` with the words and signs people write for operators replaced by
    Python's: ``times``/``multiplied by``/``x``/``×`` → ``*``, ``divided by``/``over``/``÷`` →
    ``/``, ``plus`` → ``+``, ``minus``/``−`` → ``-``, ``to the power of`` → ``**``,
    ``squared``/``cubed`` → ``** 2``/``** 3``, ``mod``/``modulo`` → ``%``; a leading "what
    is" / "calculate" and a trailing ``?`` or ``=`` are dropped. Text without any of them is
    returned unchanged (so a symbolic expression keeps its spacing).

    Example: ``spell_out("What is 12 times 7?") == "12 * 7"``.
    """
    text = _LEAD_WORDS.sub("", expression)
    text = _TRAILING.sub("", text)
    text = _SIGN.sub(lambda m: f" {_SIGNS[m.group(0)]} ", text)
    text = _TIMES_X.sub(" * ", text)
    text = _POWER_WORDS.sub(lambda m: " ** 2" if m.group(1).lower() == "squared" else " ** 3", text)
    for pattern, symbol in _WORD_OPERATORS:
        text = pattern.sub(symbol, text)
    return expression.strip() if text == expression else " ".join(text.split())


def evaluate_expression(expression: str) -> Number:
    """Evaluate arithmetic safely (no ``eval``): an ``ast`` whitelist walk whose cost is bounded.

    Allowed: int and float literals, ``+ - * / // % **``, unary ``+``/``-``, parentheses,
    the constants ``pi``, ``e``, ``tau``, the functions in ``_FUNCTIONS`` and the operator
    words :func:`spell_out` replaces (``12 times 7``). Bounds, each
    checked *before* the operation runs: ``MAX_EXPRESSION_CHARS`` characters (of the text as
    given: a word becomes one operator, so words allow no more operations than symbols),
    ``|exponent| ≤ MAX_EXPONENT``, ``|ndigits| ≤ MAX_ROUND_DIGITS`` for ``round``, every
    integer result ≤ ``MAX_INT_BITS`` bits (estimated from the operands' sizes); every float
    ≤ 1e300 in magnitude. So a call is at most ~100 operations on numbers of at most 1000
    bits: microseconds, never long enough to hold a worker (docs/security.md, "Tools that
    cannot hold a worker").

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
        tree = ast.parse(spell_out(expression), mode="eval")
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
    # Words are read too ("12 times 7"); the result names the expression as computed ("12 * 7").
    try:
        value = evaluate_expression(expression)
    except ZeroDivisionError:
        return tool_error("Division by zero.")
    except ValueError as exc:
        return tool_error(f"Cannot calculate: {exc}.")
    computed = spell_out(expression)
    return tool_success({"expression": computed, "result": value}, summary=f"{computed} = {value}")


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


# --- a note in the requesting user's own notes (the approval demonstration) ---------------

MAX_NOTE_CHARS = 2000
"""The longest note ``save_note`` writes, in characters. Checked in the tool, not as the
schema's ``maxLength``: llama.cpp's server turns the schema into a grammar for its tool call,
and a ``maxLength`` of 2000 repeats a rule past what its grammar parser accepts (it refused the
grammar and crashed; docs/approval.md "The demonstration tool")."""
SaveNoteFunction = Callable[[Any, str], Any]
"""``save(owner, text)`` → the saved note as a JSON-ready dict (async)."""


def make_save_note_tool(save: SaveNoteFunction) -> ToolDefinition:
    """Build ``save_note``, which writes a note to the requesting user's own notes: a tool that
    changes the user's data, so a deployment's policy makes it wait for the user's approval
    (docs/approval.md "The demonstration tool"). The owner is always ``context.user``; without
    an authenticated one the tool refuses.

    Args:
        save: ``await save(owner, text)`` → ``{"id", "text", "created_at"}``.
    """

    @tool(name="save_note", timeout=15.0)
    async def save_note(
        text: Annotated[str, "The note to keep, in a sentence or two.", {"minLength": 1}],
        context: ToolContext,
    ) -> dict[str, Any]:
        """Save a short note to the user's own notes (the user approves each note first)."""
        owner = context.user
        if owner is None or not getattr(owner, "is_authenticated", False):
            return tool_error("save_note needs a logged-in user.")
        if len(text) > MAX_NOTE_CHARS:
            return tool_error(f"A note is at most {MAX_NOTE_CHARS} characters; this one has {len(text)}.")
        note = await save(owner, text.strip())
        return tool_success(note, summary=f"saved note {note.get('id')}")

    return save_note


def default_registry(search: SearchFunction | None = None, save_note: SaveNoteFunction | None = None) -> ToolRegistry:
    """A registry with the built-in tools.

    Args:
        search: the conversation search function; ``search_conversations`` is registered
            only when one is given.
        save_note: the note store; ``save_note`` is registered only when one is given.

    Returns:
        A new ``ToolRegistry`` with ``current_datetime``, ``calculate`` and, given
        ``search``, ``search_conversations``, given ``save_note``, ``save_note``.
    """
    registry = ToolRegistry([current_datetime, calculate])
    if search is not None:
        registry.register(make_search_conversations_tool(search))
    if save_note is not None:
        registry.register(make_save_note_tool(save_note))
    return registry
