"""What a user may use: the model aliases and the effective limits, from their groups'
:class:`~jxai_app.models.GroupEntitlements`, their own :class:`~jxai_app.models.UserLimits`
row and the settings (docs/security.md "Group entitlements").

The one place of the rule; the rate limit and the quotas
(:func:`jxai_app.policy.ratelimit.allowance_for`, so the quota reservations and the turn
budget too), the start of a turn, ``POST /ai/chat``, ``GET /ai/models``, the chat page's model
picker and admin all read it through :func:`entitlements_for`, and the stored-files quota
reads its ``storage_bytes_per_user`` there too.

- **Limits** (turns per minute, tokens per day, cost per day, stored bytes per user), each
  on its own: the user's ``UserLimits`` value when it is set (not ``None``); otherwise the
  most generous value among the groups that set it (``0`` = unlimited beats every number,
  else the largest); otherwise the setting (``JXAI_TURNS_PER_MINUTE``, ``JXAI_TOKENS_PER_DAY``,
  ``JXAI_COST_PER_DAY``, ``JXAI_STORAGE_PER_USER_BYTES``). A group's limit is each member's
  own allowance, not a pool the members share. ``UserLimits`` has no stored-bytes field, so
  that one comes from the groups or the setting.
- **Models**: a superuser may use every configured model. Otherwise only groups with an
  entitlements row have a say: with none, every model; when one of them lists no alias,
  every model; else the union of their lists (aliases no longer configured are ignored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Iterable, Mapping, Sequence

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from jxai_app import conf
from jxai_app.core.problems import problem_error
from jxai_app.core.providers import ModelRegistry

__all__ = ["LIMITS", "Entitlements", "entitlements_for", "group_entitlements", "most_generous"]

LIMITS: Final[tuple[str, ...]] = ("turns_per_minute", "tokens_per_day", "cost_per_day", "storage_bytes_per_user")
"""The limit fields of :class:`~jxai_app.models.GroupEntitlements`, in the order admin shows them."""

_LABELS: Final[Mapping[str, str]] = {
    "turns_per_minute": "Turns per minute", "tokens_per_day": "Tokens per day (UTC)",
    "cost_per_day": "Cost per day (USD, UTC)", "storage_bytes_per_user": "Stored files (bytes)"}
"""The :data:`LIMITS` as people read them (admin, ``manage.py group_entitlements``)."""

_USER_LIMITS: Final[tuple[str, ...]] = ("turns_per_minute", "tokens_per_day", "cost_per_day")
"""The limits a :class:`~jxai_app.models.UserLimits` row can set."""

_SETTINGS: Final[Mapping[str, str]] = {
    "turns_per_minute": "JXAI_TURNS_PER_MINUTE", "tokens_per_day": "JXAI_TOKENS_PER_DAY",
    "cost_per_day": "JXAI_COST_PER_DAY", "storage_bytes_per_user": "JXAI_STORAGE_PER_USER_BYTES"}


@dataclass(frozen=True, slots=True)
class Entitlements:
    """A user's (or a group's) effective entitlements (module rule). Every limit: ``0`` = unlimited.

    Attributes:
        models: the aliases that may be used; ``None`` = every configured model.
        turns_per_minute: turns started in any 60 s.
        tokens_per_day: tokens (input + output) per UTC day.
        cost_per_day: USD per UTC day.
        storage_bytes_per_user: bytes of stored files.
        sources: limit name, or ``"models"`` → where the value came from, for people
            (``"user limits"``, ``"group interns"``, ``"setting JXAI_TOKENS_PER_DAY"``, …).
    """

    models: frozenset[str] | None
    turns_per_minute: int
    tokens_per_day: int
    cost_per_day: Decimal
    storage_bytes_per_user: int
    sources: Mapping[str, str] = field(default_factory=dict)

    def may_use(self, alias: str) -> bool:
        """Whether model ``alias`` may be used."""
        return self.models is None or alias in self.models

    def default_alias(self, registry: ModelRegistry) -> str | None:
        """The model a request naming none uses: the registry's default when it may be used,
        else the first allowed alias in configuration order, ``None`` when none may be."""
        if self.may_use(registry.default_alias):
            return registry.default_alias
        return next((alias for alias in registry.aliases() if self.may_use(alias)), None)

    def usable_alias(self, alias: str, registry: ModelRegistry) -> str | None:
        """``alias`` when it may be used, else :meth:`default_alias` (``None`` when no model
        may be used): the model a copy of someone else's conversation gets ("Continue in my
        chat", docs/data.md "Share links")."""
        return alias if self.may_use(alias) else self.default_alias(registry)

    def allowed_aliases(self, registry: ModelRegistry) -> list[str]:
        """The configured aliases that may be used, in configuration order (what an
        unknown-model refusal names: ``core.gateway.unknown_model_detail``)."""
        return [alias for alias in registry.aliases() if self.may_use(alias)]

    def listing(self, registry: ModelRegistry) -> list[dict[str, Any]]:
        """The registry's public listing (``GET /ai/models``' ``models``) cut to the allowed
        aliases, ``default`` marking :meth:`default_alias`."""
        default = self.default_alias(registry)
        return [{**entry, "default": entry["alias"] == default}
                for entry in registry.public_listing() if self.may_use(entry["alias"])]

    def limit_rows(self) -> list[dict[str, str]]:
        """The limits for people, in :data:`LIMITS` order: ``{"name", "label", "value",
        "source"}``, the value ``unlimited`` for 0, USD with 4 decimals, counts grouped by
        thousands."""
        rows = []
        for name in LIMITS:
            value = getattr(self, name)
            shown = "unlimited" if value == 0 else (f"${value:,.4f}" if name == "cost_per_day" else f"{value:,}")
            rows.append({"name": name, "label": _LABELS[name], "value": shown, "source": self.sources[name]})
        return rows

    def check_model(self, alias: str) -> None:
        """Refuse model ``alias`` unless it may be used.

        Raises:
            ProblemError: 403 ``forbidden``, the detail naming the aliases that may be used.
        """
        if not self.may_use(alias):
            allowed = ", ".join(sorted(self.models or ())) or "none"
            raise problem_error("forbidden", f"Your groups may not use the model {alias!r}; "
                                             f"models you may use: {allowed}.")


def most_generous(values: Iterable[Any]) -> Any:
    """The most generous of limit ``values`` (``None`` ones are left out): ``0`` (unlimited)
    when one is ``0``, else the largest; ``None`` when no value is set."""
    present = [value for value in values if value is not None]
    if not present:
        return None
    return 0 if any(value == 0 for value in present) else max(present)


def _defaults() -> dict[str, Any]:
    limits = conf.get_limits()
    return {"turns_per_minute": limits.turns_per_minute, "tokens_per_day": limits.tokens_per_day,
            "cost_per_day": conf.cost_per_day(), "storage_bytes_per_user": conf.get_attachment_limits().per_user_bytes}


def _decide(user_row: Mapping[str, Any], groups: Sequence[Mapping[str, Any]], *, every_model: bool) -> Entitlements:
    """The module rule over plain rows: ``user_row`` the ``UserLimits`` values (``{}``: none),
    ``groups`` one mapping per group with an entitlements row (``name``, ``model_aliases`` and
    the :data:`LIMITS`), sorted by name."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    defaults = _defaults()
    for name in LIMITS:
        if user_row.get(name) is not None:
            values[name], sources[name] = user_row[name], "user limits"
            continue
        best = most_generous(group[name] for group in groups)
        if best is None:
            values[name], sources[name] = defaults[name], f"setting {_SETTINGS[name]}"
        else:
            values[name] = best
            sources[name] = "group " + next(group["name"] for group in groups if group[name] == best)
    models: frozenset[str] | None = None
    if every_model:
        sources["models"] = "superuser"
    elif not groups:
        sources["models"] = "no group entitlements"
    elif open_group := next((group["name"] for group in groups if not group["model_aliases"]), None):
        sources["models"] = f"group {open_group}"
    else:
        models = frozenset(str(alias) for group in groups for alias in group["model_aliases"])
        sources["models"] = "groups " + ", ".join(group["name"] for group in groups)
    return Entitlements(models=models, turns_per_minute=int(values["turns_per_minute"]),
                        tokens_per_day=int(values["tokens_per_day"]), cost_per_day=Decimal(values["cost_per_day"]),
                        storage_bytes_per_user=int(values["storage_bytes_per_user"]), sources=sources)


def entitlements_for(user: Any) -> Entitlements:
    """The effective entitlements of ``user`` (module rule), in one query: the user's row
    joined to their ``UserLimits`` and their groups' entitlements. Sync: async callers use
    :func:`jxai_app.db.db_call`.

    Args:
        user: a saved user (``None`` or unsaved: the settings alone, every model).

    Raises:
        django.db.DatabaseError: the database is unreachable.
        ConfigurationError: ``JXAI_COST_PER_DAY`` is not a number.
    """
    if user is None or getattr(user, "pk", None) is None:
        return _decide({}, [], every_model=True)
    joined = ("groups__name", "groups__jxai_entitlements__pk", "groups__jxai_entitlements__model_aliases",
              *(f"groups__jxai_entitlements__{name}" for name in LIMITS))
    rows = get_user_model()._default_manager.filter(pk=user.pk).values_list(
        *(f"jxai_limits__{name}" for name in _USER_LIMITS), *joined)
    user_row: dict[str, Any] = {}
    groups: list[dict[str, Any]] = []
    for row in rows:
        user_row = dict(zip(_USER_LIMITS, row))
        group_name, entitlements_pk, aliases, *limits = row[len(_USER_LIMITS):]
        if entitlements_pk is not None:
            groups.append({"name": group_name, "model_aliases": list(aliases or ()), **dict(zip(LIMITS, limits))})
    groups.sort(key=lambda group: group["name"])
    return _decide(user_row, groups, every_model=bool(getattr(user, "is_superuser", False)))


def group_entitlements(group: Group) -> Entitlements:
    """What a member of ``group`` alone, with no ``UserLimits`` row, gets (the module rule
    over this one group's row; without a row: the settings and every model)."""
    row = group.jxai_entitlements if hasattr(group, "jxai_entitlements") else None
    groups = [] if row is None else [{"name": group.name, "model_aliases": list(row.model_aliases or ()),
                                      **{name: getattr(row, name) for name in LIMITS}}]
    return _decide({}, groups, every_model=False)
