"""Gated views: per-turn filtering and call caps without touching the registry (docs/agent.md "Gated views")."""

from __future__ import annotations

from typing import Any

import pytest

from jxai_app.core.errors import ToolError
from jxai_app.core.tools import GatedToolRegistry, ToolContext, ToolDefinition, ToolRegistry

ANY = {"type": "object"}


def make_registry(ran: list[str]) -> ToolRegistry:
    def runner(name: str) -> Any:
        return lambda args, context: ran.append(name) or name

    return ToolRegistry([ToolDefinition(n, f"{n} tool", ANY, runner(n)) for n in ("read", "write", "admin")])


async def test_the_view_lists_only_offered_tools_and_refuses_the_others() -> None:
    ran: list[str] = []
    registry = make_registry(ran)
    view = GatedToolRegistry(registry, lambda d: d.name != "admin")
    assert [d.name for d in view.list()] == ["read", "write"]
    assert [t["function"]["name"] for t in view.list_for_llm()] == ["read", "write"]
    assert view.get_definition("admin") is None
    assert view.validate("admin", {}) == ['Tool "admin" is not available in this conversation']
    assert await view.execute("admin", "{}") == {"success": False, "error": 'Tool "admin" is not available in this conversation'}
    assert await view.execute("ghost", "{}") == {"success": False, "error": 'Unknown tool: "ghost"'}
    assert await view.execute("read", "{}") == {"success": True, "data": "read"}
    assert ran == ["read"]
    # the registry itself is untouched
    assert [d.name for d in registry.list()] == ["read", "write", "admin"]
    assert await registry.execute("admin", "{}") == {"success": True, "data": "admin"}


async def test_the_predicate_is_re_read_each_time() -> None:
    allowed = {"read", "write"}
    view = GatedToolRegistry(make_registry([]), lambda d: d.name in allowed)
    assert len(view.list()) == 2
    allowed.discard("write")
    assert [d.name for d in view.list()] == ["read"]
    assert (await view.execute("write", "{}"))["success"] is False


async def test_a_predicate_that_raises_hides_the_tool() -> None:
    def picky(defn: ToolDefinition) -> bool:
        if defn.name == "write":
            raise RuntimeError("permission lookup failed")
        return True

    view = GatedToolRegistry(make_registry([]), picky)
    assert [d.name for d in view.list()] == ["read", "admin"]
    assert (await view.execute("write", "{}"))["error"] == 'Tool "write" is not available in this conversation'


async def test_predicates_can_use_the_users_permissions() -> None:
    class User:
        def __init__(self, perms: set[str]) -> None:
            self.perms = perms

        def has_perm(self, perm: str) -> bool:
            return perm in self.perms

    user = User({"tools.use_read"})
    view = GatedToolRegistry(make_registry([]), lambda d: user.has_perm(f"tools.use_{d.name}"))
    assert [d.name for d in view.list()] == ["read"]
    assert (await view.execute("write", "{}", ToolContext(user=user)))["success"] is False


async def test_call_caps_refuse_calls_over_the_cap() -> None:
    ran: list[str] = []
    view = GatedToolRegistry(make_registry(ran), call_caps={"read": 2, "write": 0})
    results = [await view.execute("read", "{}") for _ in range(3)]
    assert [r["success"] for r in results] == [True, True, False]
    assert results[2]["error"] == 'Tool "read" may be called at most 2 times per turn; do not call it again'
    assert (await view.execute("write", "{}"))["error"] == 'Tool "write" may be called at most 0 times per turn; do not call it again'
    assert (await view.execute("admin", "{}"))["success"] is True  # no cap
    assert ran == ["read", "read", "admin"]
    assert view.calls("read") == 2
    # a fresh view (a new turn) starts from zero
    assert (await GatedToolRegistry(make_registry(ran), call_caps={"read": 2}).execute("read", "{}"))["success"] is True


async def test_calls_with_bad_arguments_still_count_against_the_cap() -> None:
    view = GatedToolRegistry(make_registry([]), call_caps={"read": 1})
    assert (await view.execute("read", "not json"))["success"] is False
    assert (await view.execute("read", "{}"))["error"].startswith('Tool "read" may be called at most 1 time per turn')


async def test_views_compose() -> None:
    ran: list[str] = []
    inner = GatedToolRegistry(make_registry(ran), lambda d: d.name != "admin", call_caps={"read": 1})
    outer = GatedToolRegistry(inner, lambda d: d.name != "write")
    assert [d.name for d in outer.list()] == ["read"]
    assert (await outer.execute("admin", "{}"))["error"] == 'Tool "admin" is not available in this conversation'
    assert (await outer.execute("read", "{}"))["success"] is True
    assert (await outer.execute("read", "{}"))["success"] is False  # the inner cap applies
    assert ran == ["read"]


@pytest.mark.parametrize("cap", [-1, 1.5, True, "2"])
def test_bad_caps_are_refused(cap: Any) -> None:
    with pytest.raises(ToolError, match="non-negative integer"):
        GatedToolRegistry(make_registry([]), call_caps={"read": cap})
