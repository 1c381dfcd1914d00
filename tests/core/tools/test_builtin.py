"""Built-in tools: date/time, safe arithmetic, search of one's own conversations (docs/agent.md "Built-in tools")."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import re
import time
import threading
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from jxai_app.core.tools import ToolContext, default_registry, make_search_conversations_tool
from jxai_app.core.tools.builtin import (
    ARITHMETIC_PATTERN, MAX_EXPRESSION_CHARS, MAX_INT_BITS, MAX_NOTE_CHARS, MAX_ROUND_DIGITS, evaluate_expression,
)


@pytest.fixture
def registry():  # type: ignore[no-untyped-def]
    return default_registry()


# --- current_datetime ------------------------------------------------------------------


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris", "Asia/Kolkata", "America/St_Johns"])
async def test_current_datetime_in_a_zone(registry, zone: str) -> None:  # type: ignore[no-untyped-def]
    before = dt.datetime.now(ZoneInfo(zone))
    result = await registry.execute("current_datetime", f'{{"timezone": "{zone}"}}')
    after = dt.datetime.now(ZoneInfo(zone))
    assert result["success"] is True
    data = result["data"]
    when = dt.datetime.fromisoformat(data["iso"])
    assert before.replace(microsecond=0) <= when <= after
    assert when.utcoffset() == before.utcoffset()
    expected_offset = before.strftime("%z")
    assert data["utc_offset"] == f"{expected_offset[:3]}:{expected_offset[3:]}"
    assert data["timezone"] == zone
    assert data["date"] == when.date().isoformat() and data["weekday"] == when.strftime("%A")
    assert abs(data["unix"] - int(before.timestamp())) <= 2
    assert zone in result["summary"]


async def test_current_datetime_defaults_to_utc(registry) -> None:  # type: ignore[no-untyped-def]
    result = await registry.execute("current_datetime", "")
    assert result["data"]["timezone"] == "UTC" and result["data"]["utc_offset"] == "+00:00"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../../etc/passwd", "/etc/localtime", "", "America"])
async def test_current_datetime_refuses_unknown_zones(registry, zone: str) -> None:  # type: ignore[no-untyped-def]
    result = await registry.execute("current_datetime", {"timezone": zone})
    assert result["success"] is False
    assert result["error"].startswith("Unknown time zone") and "IANA" in result["error"]


# --- calculate -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("10 / 2", 5),
        ("7 // 2", 3),
        ("-7 % 3", 2),
        ("2 ** 10", 1024),
        ("2 ** -1", 0.5),
        ("-(3 - 5)", 2),
        ("+4", 4),
        ("sqrt(16) + abs(-2)", 6),
        ("round(pi, 3)", 3.142),
        ("max(1, 5, 3) - min(4, 2)", 3),
        ("10 ** 100", 10**100),
        ("0.1 + 0.2", 0.1 + 0.2),
        ("log(e)", 1),
    ],
)
async def test_calculate_evaluates_arithmetic(registry, expression: str, value: Any) -> None:  # type: ignore[no-untyped-def]
    result = await registry.execute("calculate", {"expression": expression})
    assert result["success"] is True, result
    assert result["data"] == {"expression": expression, "result": value}
    assert result["summary"] == f"{expression} = {value}"


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("__import__('os').system('true')", "attribute access is not allowed"),
        ("(1).__class__", "attribute access is not allowed"),
        ("math.sqrt(4)", "attribute access is not allowed"),
        ("x + 1", "unknown name 'x'"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("(lambda: 1)()", "only the named math functions can be called"),
        ("[1, 2]", "List is not allowed"),
        ("'a' * 3", "only numbers are allowed"),
        ("True + 1", "only numbers are allowed"),
        ("2 ** 101", "exponents larger than 100"),
        ("2 ** -101", "exponents larger than 100"),
        ("99999 ** 99", "too large"),
        ("10 ** 100 * 10 ** 100 * 10 ** 100 * 10 ** 100", "too large"),
        ("1e308 * 10", "too large"),
        ("1e999", "too large"),
        ("exp(1000)", "too large"),
        ("(-8) ** 0.5", "not a real number"),
        ("2 ^ 3", "use '**'"),
        ("1 << 3", "LShift is not allowed"),
        ("1 +", "not valid arithmetic"),
        ("sqrt(-1)", "math domain error"),
        ("sqrt(x=4)", "at most 10 plain arguments"),
        ("a if 1 else 2", "IfExp is not allowed"),
        ("round(1, -10**7)", "at most 300 digits"),
        ("round(1.5, 10**9)", "at most 300 digits"),
        ("round(1, 0.5)", "whole number of digits"),
        ("(2 ** 100) ** 10", "too large"),
        ("floor(1e300) * floor(1e300)", "too large"),
    ],
)
async def test_calculate_refuses(registry, expression: str, fragment: str) -> None:  # type: ignore[no-untyped-def]
    result = await registry.execute("calculate", {"expression": expression})
    assert result["success"] is False
    assert result["error"].startswith("Cannot calculate: ")
    assert fragment in result["error"]


@pytest.mark.parametrize(
    ("words", "computed", "value"),
    [
        ("12 times 7", "12 * 7", 84),
        ("What is 12 times 7?", "12 * 7", 84),
        ("6 multiplied by 7", "6 * 7", 42),
        ("12 x 7", "12 * 7", 84),
        ("12x7", "12 * 7", 84),
        ("(1 + 2)x3", "(1 + 2) * 3", 9),
        ("12 × 7", "12 * 7", 84),
        ("25 plus 17", "25 + 17", 42),
        ("10 minus 3 minus 2", "10 - 3 - 2", 5),
        ("10 − 3", "10 - 3", 7),
        ("100 divided by 8", "100 / 8", 12.5),
        ("3 over 4", "3 / 4", 0.75),
        ("100 ÷ 4", "100 / 4", 25),
        ("2 to the power of 10", "2 ** 10", 1024),
        ("2 raised to the power of 3", "2 ** 3", 8),
        ("9 squared", "9 ** 2", 81),
        ("3 cubed", "3 ** 3", 27),
        ("17 mod 5", "17 % 5", 2),
        ("17 modulo 5", "17 % 5", 2),
        ("calculate 2 Times 3 =", "2 * 3", 6),
        ("0x10 + 1", "0x10 + 1", 17),  # a hex literal stays one
    ],
)
async def test_calculate_reads_operator_words(registry, words: str, computed: str, value: Any) -> None:  # type: ignore[no-untyped-def]
    result = await registry.execute("calculate", {"expression": words})
    assert result == {"success": True, "data": {"expression": computed, "result": value},
                      "summary": f"{computed} = {value}"}


@pytest.mark.parametrize(
    ("words", "fragment"),
    [
        ("2 to the power of 101", "exponents larger than 100"),
        ("99999 to the power of 99", "too large"),
        ("round(1, minus 10**7)", "at most 300 digits"),
        ("12 times 7 apples", "not valid arithmetic"),
        ("twelve times 7", "unknown name 'twelve'"),
        (" times ".join(["9"] * 30), "longer than 200 characters"),  # counted before the words become operators
    ],
)
async def test_operator_words_keep_every_bound(registry, words: str, fragment: str) -> None:  # type: ignore[no-untyped-def]
    result = await registry.execute("calculate", {"expression": words})
    assert result["success"] is False and fragment in result["error"], result


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("What is 12 times 7?", True),
        ("What is 1234 * 5678?", True),
        ("How much is 9 x 8?", True),
        ("what's 3.5 divided by 2", True),
        ("2 to the power of 8, please", True),
        ("What is 9 squared?", True),
        ("And sqrt(2)?", True),
        ("What is 2+2", True),
        ("What is the capital of Italy?", False),
        ("Write a short poem about the sea.", False),
        ("Write a poem about 3 cats", False),
        ("I have 2 dogs and 3 cats", False),
        ("Name three rivers of Europe.", False),
    ],
)
def test_the_arithmetic_pattern_finds_arithmetic_in_a_sentence(text: str, found: bool) -> None:
    assert (re.search(ARITHMETIC_PATTERN, text) is not None) is found


async def test_calculate_refuses_overlong_input(registry) -> None:  # type: ignore[no-untyped-def]
    expression = "+".join(["1"] * 101)
    assert len(expression) > MAX_EXPRESSION_CHARS
    result = await registry.execute("calculate", {"expression": expression})
    assert result == {"success": False, "error": f"Cannot calculate: the expression is longer than {MAX_EXPRESSION_CHARS} characters."}


@pytest.mark.parametrize("expression", ["1 / 0", "5 // 0", "5 % 0", "0 ** -1"])
async def test_calculate_division_by_zero(registry, expression: str) -> None:  # type: ignore[no-untyped-def]
    assert await registry.execute("calculate", {"expression": expression}) == {"success": False, "error": "Division by zero."}


@pytest.mark.parametrize("expression", ["round(1, -10**7)", f"round(1, -{MAX_ROUND_DIGITS + 1})",
                                        "99 ** 99 * 99 ** 99"])
def test_an_expression_with_a_huge_result_fails_in_milliseconds(expression: str) -> None:
    started = time.thread_time()
    with pytest.raises(ValueError):
        evaluate_expression(expression)
    assert time.thread_time() - started < 0.05


def _random_expression(rng: random.Random) -> str:
    """Arithmetic from the evaluator's whole grammar, big operands favoured, at most 200 characters."""
    leaves = ["9" * rng.randint(1, 60), "1e300", "1e-300", "pi", str(rng.randint(-400, 400)), "0.5", "-7"]
    text = rng.choice(leaves)
    while True:
        other = rng.choice(leaves)
        form = rng.choice(["({a}) {op} ({b})", "round({a}, {n})", "{f}({a})", "max({a}, {b})"])
        grown = form.format(a=text, b=other, op=rng.choice(["+", "-", "*", "/", "//", "%", "**"]),
                            n=rng.randint(-400, 400), f=rng.choice(["floor", "ceil", "abs", "sqrt", "sin", "log"]))
        if len(grown) > MAX_EXPRESSION_CHARS:
            return text
        text = grown


def test_no_expression_that_fits_makes_a_large_number_or_takes_long() -> None:
    rng = random.Random(14)
    slowest, accepted = 0.0, 0
    for _ in range(3000):
        expression = _random_expression(rng)
        started = time.thread_time()
        try:
            value = evaluate_expression(expression)
        except (ValueError, ZeroDivisionError):
            value = None
        slowest = max(slowest, time.thread_time() - started)
        if isinstance(value, int):
            accepted += 1
            assert value.bit_length() <= MAX_INT_BITS
    assert accepted > 100  # the sample reaches the evaluator's work, not only its refusals
    assert slowest < 0.05  # CPU seconds of this thread: a busy machine does not count


def test_evaluate_expression_never_uses_names_from_python() -> None:
    with pytest.raises(ValueError, match="unknown name 'eval'"):
        evaluate_expression("eval")


# --- search_conversations ------------------------------------------------------------------


class Recorder:
    """A fake search that records which owner it was asked for."""

    def __init__(self, rows: list[dict[str, Any]] | None = None) -> None:
        self.calls: list[tuple[Any, str, int]] = []
        self.threads: list[int] = []
        self.rows = rows if rows is not None else [{"id": i, "title": f"chat {i}"} for i in range(30)]

    def __call__(self, owner: Any, query: str, limit: int) -> list[dict[str, Any]]:
        self.calls.append((owner, query, limit))
        self.threads.append(threading.get_ident())
        return [dict(row, owner=str(owner)) for row in self.rows[:limit]]


async def test_search_uses_the_context_user_only() -> None:
    search = Recorder()
    registry = default_registry(search=search)
    alice = object()
    context = ToolContext(user=alice, conversation_id=1, call_id="c1")
    result = await registry.execute("search_conversations", '{"query": " budget ", "limit": "2"}', context)
    assert result["success"] is True
    assert search.calls == [(alice, "budget", 2)]
    assert len(result["data"]["results"]) == 2 and result["summary"] == "2 conversations found"
    assert search.threads[0] != threading.get_ident()  # a sync search (the ORM) runs off the loop


async def test_arguments_naming_another_owner_never_reach_the_search() -> None:
    search = Recorder()
    registry = default_registry(search=search)
    context = ToolContext(user="alice")
    refused = await registry.execute("search_conversations", '{"query": "x", "owner": "bob"}', context)
    assert refused == {"success": False, "error": "Validation failed: Unknown argument 'owner'."}
    assert search.calls == []
    # even when called directly, bypassing validation, the owner comes from the context
    defn = registry.get_definition("search_conversations")
    assert defn is not None
    direct = await defn.execute({"query": "x", "owner": "bob", "user": "bob"}, context)
    assert direct["success"] is True
    assert search.calls == [("alice", "x", 5)]
    assert all(row["owner"] == "alice" for row in direct["data"]["results"])


@pytest.mark.parametrize("user", [None, type("Anon", (), {"is_authenticated": False})()])
async def test_search_refuses_without_a_signed_in_user(user: Any) -> None:
    search = Recorder()
    result = await default_registry(search=search).execute("search_conversations", '{"query": "x"}', ToolContext(user=user))
    assert result["success"] is False and "signed-in user" in result["error"]
    assert search.calls == []


async def test_search_limit_is_bounded_and_empty_queries_refused() -> None:
    search = Recorder()
    registry = default_registry(search=search)
    context = ToolContext(user="alice")
    too_many = await registry.execute("search_conversations", '{"query": "x", "limit": 500}', context)
    assert too_many["success"] is False and "Argument 'limit'" in too_many["error"]
    empty = await registry.execute("search_conversations", '{"query": "   "}', context)
    assert empty == {"success": False, "error": "Argument 'query' must not be empty."}
    assert search.calls == []


async def test_an_async_search_is_awaited() -> None:
    asked: list[Any] = []

    async def search(owner: Any, query: str, limit: int) -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        asked.append(owner)
        return [{"id": 1}]

    result = await make_search_conversations_tool(search).execute({"query": "q", "limit": 3}, ToolContext(user="u"))
    assert result == {"success": True, "data": {"query": "q", "results": [{"id": 1}]}, "summary": "1 conversation found"}
    assert asked == ["u"]


def test_default_registry_contents() -> None:
    assert [d.name for d in default_registry().list()] == ["current_datetime", "calculate"]
    assert [d.name for d in default_registry(search=Recorder()).list()] == ["current_datetime", "calculate", "search_conversations"]


async def test_a_note_longer_than_the_limit_is_refused_in_the_tool_not_the_schema() -> None:
    """``save_note``'s length limit is checked by the tool: its schema carries no ``maxLength``,
    which llama.cpp's grammar for the call could not take (MAX_NOTE_CHARS's docstring)."""
    saved: list[str] = []

    async def save(owner: Any, text: str) -> dict[str, Any]:
        saved.append(text)
        return {"id": len(saved), "text": text, "created_at": "now"}

    class Owner:
        is_authenticated = True

    registry = default_registry(save_note=save)
    schema = registry.get_definition("save_note").parameters["properties"]["text"]  # type: ignore[union-attr]
    assert "maxLength" not in schema
    too_long = await registry.execute("save_note", f'{{"text": "{"x" * (MAX_NOTE_CHARS + 1)}"}}', ToolContext(user=Owner()))
    assert too_long["success"] is False and str(MAX_NOTE_CHARS) in too_long["error"] and saved == []
    fits = await registry.execute("save_note", f'{{"text": "{"x" * MAX_NOTE_CHARS}"}}', ToolContext(user=Owner()))
    assert fits["success"] is True and saved == ["x" * MAX_NOTE_CHARS]
