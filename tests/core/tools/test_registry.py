"""ToolRegistry: listing, strict vs llm_strict, and execute's never-raising failures (docs/agent.md "The tool registry")."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from typing import Any

import pytest

from jxai_app.core.errors import ToolError
from jxai_app.core.tools import ToolContext, ToolDefinition, ToolRegistry, tool, tool_error, tool_success

OBJ = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}


def echo(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    return tool_success(args)


def test_helpers_have_the_seed_shapes() -> None:
    assert tool_success([1]) == {"success": True, "data": [1]}
    assert tool_success(1, summary="one") == {"success": True, "data": 1, "summary": "one"}
    assert tool_error("bad") == {"success": False, "error": "bad"}


def test_definition_defaults_and_checks() -> None:
    defn = ToolDefinition("t", "d", OBJ, echo)
    assert (defn.strict, defn.llm_strict, defn.timeout) == (True, False, 30.0)
    with pytest.raises(ToolError, match="name"):
        ToolDefinition("has space", "d", OBJ, echo)
    with pytest.raises(ToolError, match="type 'object'"):
        ToolDefinition("t", "d", {"type": "string"}, echo)
    with pytest.raises(ToolError, match="valid JSON Schema"):
        ToolDefinition("t", "d", {"type": "object", "properties": {"n": {"type": "nope"}}}, echo)
    with pytest.raises(ToolError, match="timeout"):
        ToolDefinition("t", "d", OBJ, echo, timeout=0)


def test_list_keeps_registration_order_and_reregistering_warns_and_replaces() -> None:
    registry = ToolRegistry()
    first = registry.register(ToolDefinition("a", "first", OBJ, echo))
    registry.register(ToolDefinition("b", "", OBJ, echo))
    with pytest.warns(RuntimeWarning, match="registered again"):
        registry.register(ToolDefinition("a", "second", OBJ, echo))
    assert [d.name for d in registry.list()] == ["a", "b"]
    assert registry.get_definition("a") is not first
    assert registry.get_definition("a").description == "second"  # type: ignore[union-attr]
    assert registry.get_definition("zzz") is None
    with pytest.raises(ToolError):
        registry.register(echo)  # type: ignore[arg-type]


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("llm_strict", [True, False])
async def test_strict_and_llm_strict_are_unrelated(strict: bool, llm_strict: bool) -> None:
    registry = ToolRegistry([ToolDefinition("t", "d", OBJ, echo, strict=strict, llm_strict=llm_strict)])
    [listed] = registry.list_for_llm()
    assert listed["type"] == "function"
    assert set(listed["function"]) == {"name", "description", "parameters"} | ({"strict"} if llm_strict else set())
    assert listed["function"].get("strict") is (True if llm_strict else None)
    result = await registry.execute("t", "{}")
    if strict:
        assert result == {"success": False, "error": "Validation failed: Missing required argument 'n'."}
    else:
        assert result == {"success": True, "data": {}}


def test_listing_is_a_copy() -> None:
    registry = ToolRegistry([ToolDefinition("t", "d", OBJ, echo)])
    registry.list_for_llm()[0]["function"]["parameters"]["properties"].clear()
    assert registry.list_for_llm()[0]["function"]["parameters"] == OBJ


async def test_arguments_are_coerced_before_the_tool_sees_them() -> None:
    registry = ToolRegistry([ToolDefinition("t", "d", OBJ, echo)])
    assert await registry.execute("t", '{"n": "12"}') == {"success": True, "data": {"n": 12}}
    assert await registry.execute("t", '{"n": "x"}') == {
        "success": False,
        "error": "Validation failed: Argument 'n' must be an integer, got the non-numeric string \"x\".",
    }


@pytest.mark.parametrize("text", ["", "   ", None])
async def test_empty_arguments_mean_an_empty_object(text: str | None) -> None:
    registry = ToolRegistry([ToolDefinition("t", "d", {"type": "object"}, echo)])
    assert await registry.execute("t", text) == {"success": True, "data": {}}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"n": 1', "Failed to parse arguments: Expecting ',' delimiter"),
        ("not json", "Failed to parse arguments: Expecting value"),
        ("null", "Failed to parse arguments: arguments must be a JSON object, got null"),
        ("[1, 2]", "Failed to parse arguments: arguments must be a JSON object, got array"),
        ("3", "Failed to parse arguments: arguments must be a JSON object, got number"),
        ('"x"', "Failed to parse arguments: arguments must be a JSON object, got string"),
        ("true", "Failed to parse arguments: arguments must be a JSON object, got boolean"),
    ],
)
async def test_unparseable_or_non_object_arguments_never_reach_the_tool(text: str, error: str) -> None:
    ran: list[Any] = []
    registry = ToolRegistry([ToolDefinition("t", "d", {"type": "object"}, lambda a, c: ran.append(a))])
    result = await registry.execute("t", text)
    assert result["success"] is False and result["error"].startswith(error)
    assert ran == []


async def test_overlong_arguments_are_refused() -> None:
    registry = ToolRegistry([ToolDefinition("t", "d", {"type": "object"}, echo)], max_argument_chars=50)
    result = await registry.execute("t", '{"s": "' + "x" * 100 + '"}')
    assert result == {"success": False, "error": "Failed to parse arguments: the arguments are longer than 50 characters"}


async def test_unknown_tool() -> None:
    assert await ToolRegistry().execute("nope", "{}") == {"success": False, "error": 'Unknown tool: "nope"'}


async def test_a_tool_that_raises_becomes_a_failed_result() -> None:
    def boom(args: dict[str, Any], context: ToolContext) -> None:
        raise RuntimeError("disk on fire")

    async def aboom(args: dict[str, Any], context: ToolContext) -> None:
        raise KeyError("gone")

    registry = ToolRegistry([ToolDefinition("boom", "", {"type": "object"}, boom), ToolDefinition("aboom", "", {"type": "object"}, aboom)])
    assert await registry.execute("boom", "{}") == {"success": False, "error": 'Tool "boom" execution error: disk on fire'}
    assert await registry.execute("aboom", "{}") == {"success": False, "error": "Tool \"aboom\" execution error: 'gone'"}


async def test_a_tool_raising_timeouterror_itself_is_an_execution_error_not_a_timeout() -> None:
    def slowpoke(args: dict[str, Any], context: ToolContext) -> None:
        raise TimeoutError("upstream took too long")

    registry = ToolRegistry([ToolDefinition("s", "", {"type": "object"}, slowpoke)])
    assert await registry.execute("s", "{}") == {"success": False, "error": 'Tool "s" execution error: upstream took too long'}


async def test_hanging_tools_are_answered_after_their_timeout() -> None:
    release = threading.Event()

    def hang_sync(args: dict[str, Any], context: ToolContext) -> str:
        release.wait(10)
        return "late"

    async def hang_async(args: dict[str, Any], context: ToolContext) -> str:
        await asyncio.sleep(10)
        return "late"

    registry = ToolRegistry(
        [
            ToolDefinition("hs", "", {"type": "object"}, hang_sync, timeout=0.2),
            ToolDefinition("ha", "", {"type": "object"}, hang_async, timeout=0.2),
        ]
    )
    started = time.monotonic()
    results = await asyncio.gather(registry.execute("hs", "{}"), registry.execute("ha", "{}"))
    release.set()  # let the abandoned thread finish
    assert time.monotonic() - started < 2.0
    assert results == [
        {"success": False, "error": 'Tool "hs" timed out after 0.2 seconds'},
        {"success": False, "error": 'Tool "ha" timed out after 0.2 seconds'},
    ]


class Circular:
    pass


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (Circular(), "Object of type Circular is not JSON serializable"),
        ({"x": float("nan")}, "Out of range float values are not JSON compliant"),
        ({"b": b"bytes"}, "Object of type bytes is not JSON serializable"),
    ],
)
async def test_unserialisable_results_become_failed_results(value: Any, fragment: str) -> None:
    registry = ToolRegistry([ToolDefinition("t", "", {"type": "object"}, lambda a, c: value)])
    result = await registry.execute("t", "{}")
    assert result["success"] is False
    assert result["error"].startswith('Tool "t" returned a result that cannot be serialized: ')
    assert fragment in result["error"]


async def test_circular_result_becomes_a_failed_result() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    registry = ToolRegistry([ToolDefinition("t", "", {"type": "object"}, lambda a, c: loop)])
    result = await registry.execute("t", "{}")
    assert result == {"success": False, "error": 'Tool "t" returned a result that cannot be serialized: Circular reference detected'}


async def test_results_are_normalised_by_a_json_round_trip() -> None:
    when = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    registry = ToolRegistry(
        [
            ToolDefinition("plain", "", {"type": "object"}, lambda a, c: {"at": when, "day": when.date(), "tags": ("a",)}),
            ToolDefinition("shaped", "", {"type": "object"}, lambda a, c: tool_success({"n": 1}, summary="one")),
            ToolDefinition("failed", "", {"type": "object"}, lambda a, c: {"success": False}),
        ]
    )
    assert await registry.execute("plain", "{}") == {
        "success": True,
        "data": {"at": "2025-01-02T03:04:05+00:00", "day": "2025-01-02", "tags": ["a"]},
    }
    assert await registry.execute("shaped", "{}") == {"success": True, "data": {"n": 1}, "summary": "one"}
    assert await registry.execute("failed", "{}") == {"success": False, "error": 'Tool "failed" failed without a message'}


async def test_oversized_results_are_refused() -> None:
    registry = ToolRegistry([ToolDefinition("t", "", {"type": "object"}, lambda a, c: "x" * 500)], max_result_chars=100)
    assert await registry.execute("t", "{}") == {"success": False, "error": 'Tool "t" returned a result longer than 100 characters'}


async def test_sync_tools_run_in_another_thread_and_async_tools_on_the_loop() -> None:
    loop_thread = threading.get_ident()

    @tool
    def where_sync() -> int:
        """Thread id."""
        return threading.get_ident()

    @tool
    async def where_async() -> int:
        """Thread id."""
        return threading.get_ident()

    registry = ToolRegistry([where_sync, where_async])
    sync_result = await registry.execute("where_sync", "")
    async_result = await registry.execute("where_async", "")
    assert sync_result["data"] != loop_thread
    assert async_result["data"] == loop_thread


async def test_a_slow_sync_tool_does_not_block_the_event_loop() -> None:
    def slow(args: dict[str, Any], context: ToolContext) -> str:
        time.sleep(0.3)
        return "done"

    registry = ToolRegistry([ToolDefinition("slow", "", {"type": "object"}, slow)])
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    result = await registry.execute("slow", "{}")
    task.cancel()
    assert result == {"success": True, "data": "done"}
    assert ticks >= 5


async def test_the_context_is_handed_over_by_identity_or_detached() -> None:
    seen: list[ToolContext] = []
    registry = ToolRegistry([ToolDefinition("t", "", {"type": "object"}, lambda a, c: seen.append(c))])
    context = ToolContext(user="ann", conversation_id=7, call_id="call_1", signal=asyncio.Event(), model="m")
    await registry.execute("t", "{}", context)
    await registry.execute("t", "{}")
    assert seen[0] is context
    assert seen[1] == ToolContext(user=None, conversation_id=None, call_id="", signal=None, model=None)


async def test_decorated_tool_end_to_end_with_keywords_and_context() -> None:
    @tool(name="greet", timeout=3)
    async def greet_fn(name: str, context: ToolContext, times: int = 1) -> dict[str, Any]:
        """Greet someone.

        Args:
            name: who.
            times: how often.
        """
        return tool_success(" ".join([f"hi {name} from {context.user}"] * times))

    registry = ToolRegistry([greet_fn])
    assert greet_fn.timeout == 3 and greet_fn.is_async
    result = await registry.execute("greet", '{"name": "bo", "times": "2"}', ToolContext(user="ann"))
    assert result == {"success": True, "data": "hi bo from ann hi bo from ann"}


async def test_decorated_tool_with_strict_false_reports_missing_arguments_itself() -> None:
    @tool(strict=False)
    def need(n: int) -> int:
        """Needs n."""
        return n

    registry = ToolRegistry([need])
    assert await registry.execute("need", '{"other": 1}') == {"success": False, "error": "Missing required argument 'n'."}


async def test_cancelling_the_caller_propagates() -> None:
    async def slow(args: dict[str, Any], context: ToolContext) -> None:
        await asyncio.sleep(10)

    registry = ToolRegistry([ToolDefinition("slow", "", {"type": "object"}, slow)])
    task = asyncio.create_task(registry.execute("slow", "{}"))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_llm_strict_listing_is_strict_compliant_and_null_optionals_take_their_defaults() -> None:
    @tool(llm_strict=True)
    def find(query: str, limit: int = 5, kind: str | None = None) -> dict[str, Any]:
        """Find."""
        return {"query": query, "limit": limit, "kind": kind}

    registry = ToolRegistry([find])
    function = registry.list_for_llm()[0]["function"]
    assert function["strict"] is True
    assert function["parameters"] == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": ["integer", "null"]},
            "kind": {"type": ["string", "null"]},
        },
        "required": ["query", "limit", "kind"],
        "additionalProperties": False,
    }
    # what a strict-mode model sends for "no value": null → the default applies
    result = await registry.execute("find", '{"query": "q", "limit": null, "kind": null}')
    assert result == {"success": True, "data": {"query": "q", "limit": 5, "kind": None}}
    # the registry's own schema is unchanged
    assert find.parameters["required"] == ["query"]
