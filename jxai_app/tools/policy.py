"""Which tools a user's turn offers, and within what limits: tools act as the user
(docs/security.md, threat 2 "Tool abuse").

The rule, one place for the turn runner and admin's "registered tools" page:

- a tool with a :class:`~jxai_app.models.ToolPolicy` row is offered only when the row is
  ``enabled`` and either it names no allowed groups, or the user is in one of them, or the
  user is a superuser;
- a tool without a row is offered when the setting ``JXAI_TOOLS_DEFAULT_ALLOWED`` is on
  (default on; off makes every tool opt-in through a policy row);
- a model without tool support is offered no tools at all;
- a row whose ``requires_approval`` is ``always`` makes each call of the tool wait for the
  user's approval (for every user, or only members of its ``approval_groups``): a property
  of the policy, whatever the tool's source (built-in, module, external; docs/approval.md).

:func:`tool_view_for` turns the rule into the per-turn view the agent loop uses: a
:class:`~jxai_app.core.tools.GatedToolRegistry` over a per-turn copy of the registry, in which a
policy's ``timeout_seconds`` replaces the tool's own timeout (the shared registry is never
changed) and ``max_calls_per_turn`` becomes the view's call cap. A tool the model names
that was not offered gets a failed result (``Tool "x" is not available in this
conversation``) even though it exists. The policy rows are read once, when the view is
built (at the start of the turn); a change in admin applies from the next turn.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


from jxai_app import conf
from jxai_app.core.errors import ToolError
from jxai_app.core.tools import GatedToolRegistry, ToolDefinition, ToolRegistry, ToolView
from jxai_app.models import ToolPolicy

__all__ = ["ToolRule", "default_allowed", "load_rules", "tool_view_for", "who_may_use"]

logger = logging.getLogger("jxai_app.tools")


def default_allowed() -> bool:
    """``JXAI_TOOLS_DEFAULT_ALLOWED``: whether a tool without a policy row is offered to
    every user (default ``True``)."""
    return conf.tools_default_allowed()


@dataclass(frozen=True, slots=True)
class ToolRule:
    """The policy of one tool as plain data (a ``ToolPolicy`` row, or none).

    Attributes:
        name: the tool name.
        has_policy: whether a ``ToolPolicy`` row exists; without one the other fields are
            the defaults and :func:`default_allowed` decides.
        enabled: the row's ``enabled``.
        group_ids: ids of the allowed groups; empty = every user.
        group_names: their names, sorted (for people).
        max_calls_per_turn: the per-turn cap, ``None`` = none.
        timeout_seconds: the timeout override in seconds, ``None`` = the tool's own.
        requires_approval: the row says ``always`` (docs/approval.md "Policy").
        approval_group_ids: with ``requires_approval``, the groups whose members approve
            each call; empty = every user.
        approval_group_names: their names, sorted.
    """

    name: str
    has_policy: bool = False
    enabled: bool = True
    group_ids: frozenset[int] = frozenset()
    group_names: tuple[str, ...] = ()
    max_calls_per_turn: int | None = None
    timeout_seconds: float | None = None
    requires_approval: bool = False
    approval_group_ids: frozenset[int] = frozenset()
    approval_group_names: tuple[str, ...] = ()

    def needs_approval(self, *, group_ids: Collection[int]) -> bool:
        """Whether a call by a user in ``group_ids`` waits for the user's approval: the policy
        says ``always`` and names no approval groups, or the user is in one of them
        (superusers are not exempt: approval guards the user's own data)."""
        if not self.requires_approval:
            return False
        return not self.approval_group_ids or not self.approval_group_ids.isdisjoint(group_ids)

    def describe_approval(self) -> str:
        """Admin's "requires approval" column: ``never``, ``always``, or ``always for members of …``."""
        if not self.requires_approval:
            return "never"
        if self.approval_group_ids:
            return "always for members of " + ", ".join(self.approval_group_names)
        return "always"

    def allows(self, *, group_ids: Collection[int], is_superuser: bool, default: bool) -> bool:
        """Whether a user in ``group_ids`` (superuser or not) may use the tool (module rule).

        Args:
            group_ids: ids of the user's groups.
            is_superuser: the user's ``is_superuser``.
            default: :func:`default_allowed`, for a tool without a policy row.
        """
        if not self.has_policy:
            return default
        if not self.enabled:
            return False
        return not self.group_ids or is_superuser or not self.group_ids.isdisjoint(group_ids)

    def describe(self, *, default: bool) -> str:
        """Who may use the tool, as a sentence for admin (the same rule as :meth:`allows`)."""
        if not self.has_policy:
            if default:
                return "every user (no policy)"
            return "nobody (no policy; JXAI_TOOLS_DEFAULT_ALLOWED is off)"
        if not self.enabled:
            return "nobody (disabled)"
        if self.group_ids:
            return "members of " + ", ".join(self.group_names) + ", and superusers"
        return "every user"


def load_rules(names: Iterable[str] | None = None) -> dict[str, ToolRule]:
    """The rules of the tools that have a ``ToolPolicy`` row, by tool name (one query: the rows
    joined to their allowed and approving groups, folded here).

    Args:
        names: only these tools; ``None`` for every row.
    """
    rows = ToolPolicy.objects.all()
    if names is not None:
        wanted = list(names)
        if not wanted:
            return {}
        rows = rows.filter(tool_name__in=wanted)
    found: dict[str, dict[str, Any]] = {}
    for name, enabled, cap, timeout, approval, allowed, allowed_name, approver, approver_name in rows.values_list(
            "tool_name", "enabled", "max_calls_per_turn", "timeout_seconds", "requires_approval",
            "allowed_groups__id", "allowed_groups__name", "approval_groups__id", "approval_groups__name"):
        row = found.setdefault(name, {"enabled": enabled, "cap": cap, "timeout": timeout, "approval": approval,
                                      "allowed": {}, "approvers": {}})
        if allowed is not None:
            row["allowed"][allowed] = allowed_name
        if approver is not None:
            row["approvers"][approver] = approver_name
    rules: dict[str, ToolRule] = {}
    for name, row in found.items():
        groups = sorted(row["allowed"].items(), key=lambda g: g[1])
        approvers = sorted(row["approvers"].items(), key=lambda g: g[1])
        rules[name] = ToolRule(
            name=name, has_policy=True, enabled=row["enabled"],
            group_ids=frozenset(pk for pk, _ in groups), group_names=tuple(n for _, n in groups),
            max_calls_per_turn=row["cap"], timeout_seconds=row["timeout"],
            requires_approval=row["approval"] == "always",
            approval_group_ids=frozenset(pk for pk, _ in approvers),
            approval_group_names=tuple(n for _, n in approvers),
        )
    return rules


def rule_for(name: str, rules: dict[str, ToolRule]) -> ToolRule:
    """``rules[name]``, or the rule of a tool without a policy row."""
    return rules.get(name) or ToolRule(name=name)


def who_may_use(name: str, rules: dict[str, ToolRule]) -> str:
    """Admin's "who may use it" for tool ``name`` under ``rules`` (see :meth:`ToolRule.describe`)."""
    return rule_for(name, rules).describe(default=default_allowed())


def effective_timeout(defn: ToolDefinition, rule: ToolRule) -> float | None:
    """The timeout a call of ``defn`` gets under ``rule``: the policy's, else the tool's own."""
    return defn.timeout if rule.timeout_seconds is None else rule.timeout_seconds


def _user_groups(user: Any) -> tuple[frozenset[int], bool]:
    if user is None or getattr(user, "pk", None) is None:
        return frozenset(), False
    return frozenset(user.groups.values_list("pk", flat=True)), bool(getattr(user, "is_superuser", False))


def _with_timeout(defn: ToolDefinition, rule: ToolRule) -> ToolDefinition:
    timeout = effective_timeout(defn, rule)
    if timeout == defn.timeout:
        return defn
    try:
        return dataclasses.replace(defn, timeout=timeout)
    except ToolError as exc:  # a bad value written around admin's validators
        logger.warning("tool policy %s: ignoring timeout %r (%s)", defn.name, rule.timeout_seconds, exc)
        return defn


def tool_view_for(user: Any, registry: ToolView, *, model_supports_tools: bool = True,
                  prior_calls: Mapping[str, int] | None = None) -> GatedToolRegistry:
    """The tools one turn of ``user`` offers (module rule), as a fresh gated view.

    Make one per turn: the view counts calls for the caps. Sync (reads ``ToolPolicy`` rows
    and the user's groups); call it from async code through :func:`jxai_app.db.db_call`.

    Args:
        user: the user the turn acts for (``None`` or anonymous: no groups, no superuser).
        registry: the deployment's registry (:func:`jxai_app.tools.registry.get_tool_registry`) or a view of it;
            it is copied, never changed.
        model_supports_tools: ``False`` gives a view that offers nothing.
        prior_calls: tool name → calls the turn already ran (a turn resumed after an
            approval: docs/approval.md "Limits"), counted against the caps.

    Returns:
        A :class:`~jxai_app.core.tools.GatedToolRegistry` whose ``list``/``list_for_llm`` are the
        offered tools, with per-tool timeouts from the policies and ``max_calls_per_turn`` as
        call caps, and the tools whose calls need the user's approval; ``execute`` of a tool not offered answers ``{"success": false, "error":
        'Tool "…" is not available in this conversation'}``.
    """
    if not model_supports_tools:
        return GatedToolRegistry(registry, lambda defn: False)
    definitions = registry.list()
    rules = load_rules(defn.name for defn in definitions)
    default = default_allowed()
    if any(rule.group_ids or rule.approval_group_ids for rule in rules.values()):
        group_ids, is_superuser = _user_groups(user)
    else:  # no rule limits a tool to groups: the user's groups cannot matter (one query less)
        group_ids, is_superuser = frozenset(), False
    offered: set[str] = set()
    caps: dict[str, int] = {}
    approval: set[str] = set()
    copies: list[ToolDefinition] = []
    for defn in definitions:
        rule = rule_for(defn.name, rules)
        if rule.allows(group_ids=group_ids, is_superuser=is_superuser, default=default):
            offered.add(defn.name)
            if rule.needs_approval(group_ids=group_ids):
                approval.add(defn.name)
        if rule.max_calls_per_turn is not None:
            caps[defn.name] = rule.max_calls_per_turn
        copies.append(_with_timeout(defn, rule))
    root = registry.root
    turn_registry = ToolRegistry(copies, max_argument_chars=root.max_argument_chars,
                                 max_result_chars=root.max_result_chars)
    chosen = frozenset(offered)
    return GatedToolRegistry(turn_registry, lambda defn: defn.name in chosen, call_caps=caps, approval=approval,
                               prior_calls=prior_calls)
