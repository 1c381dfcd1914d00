"""Tools act as the user (docs/security.md, threat 2): ``toolpolicy.tool_view_for`` against real
``ToolPolicy`` rows, groups and superusers, exercised through the view's ``execute`` the way
the agent loop calls it; and admin's "who may use it" from the same rule."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Annotated, Any, TypeVar

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from jxai_app import conf
from jxai_app.tools.registry import get_tool_registry

from jxai_app.tools import policy as toolpolicy
from jxai_app.models import ToolPolicy
from jxai_app.core.tools import ToolContext, ToolRegistry, tool, tool_success

pytestmark = pytest.mark.django_db

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@tool(timeout=30.0)
async def slow_lookup(seconds: Annotated[float, "How long to take."]) -> dict[str, Any]:
    """Take a while, then answer."""
    await asyncio.sleep(seconds)
    return tool_success({"slept": seconds})


@tool(timeout=30.0)
def echo(text: Annotated[str, "Text to repeat."]) -> dict[str, Any]:
    """Repeat the text."""
    return tool_success({"text": text})


@tool(timeout=30.0)
def delete_everything(confirm: Annotated[bool, "Must be true."]) -> dict[str, Any]:
    """A dangerous tool only operators may use."""
    return tool_success({"deleted": confirm})


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([slow_lookup, echo, delete_everything])


@pytest.fixture
def operators() -> Group:
    return Group.objects.create(name="operators")


def _policy(name: str, *, groups: tuple[Group, ...] = (), **fields: Any) -> ToolPolicy:
    policy = ToolPolicy.objects.create(tool_name=name, **fields)
    policy.allowed_groups.set(groups)
    return policy


def _offered(view: Any) -> list[str]:
    return [d.name for d in view.list()]


def _context(user: Any) -> ToolContext:
    return ToolContext(user=user, conversation_id="c-1", call_id="call_1")


def test_a_tool_restricted_to_a_group_is_offered_to_members_and_superusers_only(
    registry: ToolRegistry, operators: Group, user: Any, other_user: Any, django_user_model: Any
) -> None:
    _policy("delete_everything", groups=(operators,))
    other_user.groups.add(operators)
    root = django_user_model.objects.create_superuser("root", "root@example.com", None)

    assert _offered(toolpolicy.tool_view_for(user, registry)) == ["slow_lookup", "echo"]
    assert _offered(toolpolicy.tool_view_for(other_user, registry)) == ["slow_lookup", "echo", "delete_everything"]
    assert _offered(toolpolicy.tool_view_for(root, registry)) == ["slow_lookup", "echo", "delete_everything"]
    listing = [t["function"]["name"] for t in toolpolicy.tool_view_for(user, registry).list_for_llm()]
    assert listing == ["slow_lookup", "echo"]


def test_a_tool_the_model_names_without_it_being_offered_is_refused(
    registry: ToolRegistry, operators: Group, user: Any, other_user: Any
) -> None:
    _policy("delete_everything", groups=(operators,))
    other_user.groups.add(operators)
    view = toolpolicy.tool_view_for(user, registry)
    refused = run(view.execute("delete_everything", '{"confirm": true}', _context(user)))
    assert refused == {"success": False, "error": 'Tool "delete_everything" is not available in this conversation'}
    assert view.validate("delete_everything", {"confirm": True}) == [
        'Tool "delete_everything" is not available in this conversation']
    # The member's view runs it; an unknown name stays "unknown".
    member = toolpolicy.tool_view_for(other_user, registry)
    assert run(member.execute("delete_everything", '{"confirm": true}', _context(other_user))) == {
        "success": True, "data": {"deleted": True}}
    assert run(view.execute("no_such_tool", "{}", _context(user)))["error"] == 'Unknown tool: "no_such_tool"'


def test_a_disabled_tool_is_offered_to_nobody_not_even_a_superuser(
    registry: ToolRegistry, django_user_model: Any
) -> None:
    _policy("echo", enabled=False)
    root = django_user_model.objects.create_superuser("root", "root@example.com", None)
    view = toolpolicy.tool_view_for(root, registry)
    assert _offered(view) == ["slow_lookup", "delete_everything"]
    assert run(view.execute("echo", '{"text": "hi"}', _context(root)))["success"] is False


def test_tools_without_a_policy_follow_the_default_setting(
    registry: ToolRegistry, settings: Any, user: Any, django_user_model: Any
) -> None:
    _policy("echo")  # a row with no groups: every user, whatever the default
    assert _offered(toolpolicy.tool_view_for(user, registry)) == ["slow_lookup", "echo", "delete_everything"]
    settings.JXAI_TOOLS_DEFAULT_ALLOWED = False
    root = django_user_model.objects.create_superuser("root", "root@example.com", None)
    assert _offered(toolpolicy.tool_view_for(user, registry)) == ["echo"]
    assert _offered(toolpolicy.tool_view_for(root, registry)) == ["echo"]


def test_the_per_turn_call_cap_refuses_extra_calls_and_a_new_turn_starts_afresh(
    registry: ToolRegistry, user: Any
) -> None:
    _policy("echo", max_calls_per_turn=2)

    async def three_calls(view: Any) -> list[dict[str, Any]]:
        return [await view.execute("echo", f'{{"text": "{i}"}}', _context(user)) for i in range(3)]

    first = run(three_calls(toolpolicy.tool_view_for(user, registry)))
    assert [r["success"] for r in first] == [True, True, False]
    assert first[2]["error"] == 'Tool "echo" may be called at most 2 times per turn; do not call it again'
    again = run(three_calls(toolpolicy.tool_view_for(user, registry)))
    assert [r["success"] for r in again] == [True, True, False]


def test_a_policy_timeout_overrides_the_tool_s_own_in_this_turn_only(registry: ToolRegistry, user: Any) -> None:
    _policy("slow_lookup", timeout_seconds=0.05)
    view = toolpolicy.tool_view_for(user, registry)
    assert view.get_definition("slow_lookup").timeout == 0.05
    result = run(view.execute("slow_lookup", '{"seconds": 2}', _context(user)))
    assert result == {"success": False, "error": 'Tool "slow_lookup" timed out after 0.05 seconds'}
    # The shared registry is untouched: its definition keeps 30 s and runs to the end.
    assert registry.get_definition("slow_lookup") is slow_lookup and slow_lookup.timeout == 30.0
    assert run(registry.execute("slow_lookup", '{"seconds": 0.1}'))["success"] is True


def test_a_bad_timeout_written_around_admin_is_ignored(registry: ToolRegistry, user: Any) -> None:
    ToolPolicy.objects.create(tool_name="echo", timeout_seconds=-1)  # bypasses the form's validator
    view = toolpolicy.tool_view_for(user, registry)
    assert view.get_definition("echo").timeout == 30.0
    assert run(view.execute("echo", '{"text": "ok"}', _context(user)))["success"] is True


def test_a_model_without_tool_support_is_offered_no_tools(registry: ToolRegistry, user: Any) -> None:
    view = toolpolicy.tool_view_for(user, registry, model_supports_tools=False)
    assert view.list() == [] and view.list_for_llm() == []
    assert run(view.execute("echo", '{"text": "hi"}', _context(user)))["success"] is False


def test_the_deployment_registry_with_a_disabled_builtin(user: Any) -> None:
    conf.reset_caches()
    _policy("calculate", enabled=False)
    view = toolpolicy.tool_view_for(user, get_tool_registry())
    assert "calculate" not in _offered(view) and "current_datetime" in _offered(view)
    refused = run(view.execute("calculate", '{"expression": "2+2"}', _context(user)))
    assert refused["success"] is False and "not available" in refused["error"]
    assert run(view.execute("current_datetime", "{}", _context(user)))["success"] is True


@pytest.mark.parametrize("default", [True, False])
def test_admin_says_who_may_use_each_tool_by_the_same_rule(
    default: bool, settings: Any, operators: Group, user: Any, other_user: Any, django_user_model: Any
) -> None:
    settings.JXAI_TOOLS_DEFAULT_ALLOWED = default
    conf.reset_caches()
    _policy("search_conversations", groups=(operators,), max_calls_per_turn=3)
    _policy("calculate", enabled=False)
    other_user.groups.add(operators)
    root = django_user_model.objects.create_superuser("root", "root@example.com", None)
    client = Client()
    client.force_login(root)
    response = client.get(reverse("admin:jxai_app_registered_tools"))
    assert response.status_code == 200
    who = {row["tool"].name: row["who"] for row in response.context["rows"]}
    assert who == {
        "current_datetime": "every user (no policy)" if default
        else "nobody (no policy; JXAI_TOOLS_DEFAULT_ALLOWED is off)",
        "calculate": "nobody (disabled)",
        "search_conversations": "members of operators, and superusers",
        "save_note": "every user",  # its policy row (requires approval) comes with the migrations
    }
    # What admin says is what each user's turn is offered.
    registry = get_tool_registry()
    offered = {u.username: set(_offered(toolpolicy.tool_view_for(u, registry))) for u in (user, other_user, root)}
    everyone = ({"current_datetime"} if default else set()) | {"save_note"}
    assert offered == {"alice": everyone, "mallory": everyone | {"search_conversations"},
                       "root": everyone | {"search_conversations"}}


def test_the_rules_read_every_group_of_a_policy_in_one_query(django_assert_num_queries: Any) -> None:
    """Allowed and approving groups come joined to their rows: several of each, and a row
    with none, read in one query, each group once and sorted by name."""
    names = {n: Group.objects.create(name=n) for n in ("ops", "admins", "reviewers", "leads")}
    both = ToolPolicy.objects.create(tool_name="both", requires_approval="always", max_calls_per_turn=3)
    both.allowed_groups.set([names["ops"], names["admins"]])
    both.approval_groups.set([names["reviewers"], names["leads"]])
    ToolPolicy.objects.create(tool_name="plain", enabled=False)
    with django_assert_num_queries(1):
        rules = toolpolicy.load_rules()
    assert rules["both"].group_names == ("admins", "ops")
    assert rules["both"].group_ids == {names["ops"].pk, names["admins"].pk}
    assert rules["both"].approval_group_names == ("leads", "reviewers")
    assert rules["both"].requires_approval and rules["both"].max_calls_per_turn == 3
    assert rules["plain"].group_ids == frozenset() and not rules["plain"].enabled
    assert set(toolpolicy.load_rules(["plain"])) == {"plain"}
