"""The usage ledger: tokens, cost and provider requests per user, model and UTC day
(docs/security.md, threat 3, and "Limits: why the database, and what it costs";
docs/operations.md "Cost").

One :class:`~jxai_app.models.UsageLedger` row per ``(user, day, model)``, only ever increased with
``F()`` expressions, so concurrent writers in any number of processes add up exactly:

1. ``UPDATE … SET input_tokens = input_tokens + n … WHERE user = u AND day = d AND model = m``;
2. when no row was updated, ``INSERT`` the row inside a savepoint;
3. when that insert loses a race (``IntegrityError`` on the ``(user, day)`` unique
   constraint: another process inserted first), run the ``UPDATE`` again.

On PostgreSQL the losing ``INSERT`` waits for the winner's transaction and then fails on the
unique index, so step 3 always finds the row; on SQLite writers are serialised by the
``IMMEDIATE`` transactions the settings configure. Nothing is read and written back, so no
increment is ever lost.

The daily quotas (:mod:`jxai_app.policy.ratelimit`) read :func:`spent_on` (the sum over the
day's rows of every model); admin lists the rows and charts them (:mod:`jxai_app.policy.usage_report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any, Mapping

from django.db import IntegrityError, transaction
from django.db.models import F, Sum

from jxai_app.core.tokens import token_count
from jxai_app.models import UsageLedger

__all__ = ["Spent", "UsageCounts", "counts_from", "ledger_add", "spent_on"]


@dataclass(frozen=True, slots=True)
class UsageCounts:
    """Tokens of one provider request; ``estimated`` when made up (the provider sent none)."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those the provider read from its prompt cache (priced lower)."""

    @property
    def total(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens


def counts_from(usage: Mapping[str, Any] | None, *, estimated: bool = False) -> UsageCounts:
    """Read ``{"inputTokens", "outputTokens"[, "estimated"]}`` (the ``usage`` event's wire
    form or the saved shape, :mod:`jxai_app.store.usage`); a missing or bad count is 0.

    ``estimated`` is true when the caller says so or the mapping carries ``"estimated": true``.
    """
    if not isinstance(usage, Mapping):
        return UsageCounts(estimated=estimated)
    inp = (token_count(usage.get("inputTokens")) or 0)
    return UsageCounts(input_tokens=inp, output_tokens=(token_count(usage.get("outputTokens")) or 0),
                       estimated=bool(estimated or usage.get("estimated") is True),
                       cached_input_tokens=min(inp, (token_count(usage.get("cachedInputTokens")) or 0)))


def ledger_add(user_id: Any, day: date, counts: UsageCounts, *, model: str = "", cost: Decimal = Decimal(0),
               requests: int = 1, failed: bool = False) -> None:
    """Add one request's counts to the user's row for ``day`` and ``model`` (created when missing).

    Args:
        user_id: primary key of the user.
        day: the UTC day the request belongs to.
        counts: its tokens; when ``estimated`` they also go to ``estimated_tokens``.
        model: the model alias (``""``: unknown).
        cost: its cost in USD (:func:`jxai_app.policy.cost.request_cost`); when ``counts``
            are estimated it also goes to ``estimated_cost_usd``.
        requests: provider requests to add (1 per recorded request).
        failed: the request ended in an error (counted in ``failed_requests``).

    Raises:
        django.db.DatabaseError: the database is unreachable (callers decide; the turn
            runner and ``/ai/chat`` log it and go on).
    """
    estimated = counts.total if counts.estimated else 0
    estimated_cost = cost if counts.estimated else Decimal(0)
    fails = requests if failed else 0
    increments = {
        "input_tokens": F("input_tokens") + counts.input_tokens,
        "output_tokens": F("output_tokens") + counts.output_tokens,
        "estimated_tokens": F("estimated_tokens") + estimated,
        "cost_usd": F("cost_usd") + cost,
        "estimated_cost_usd": F("estimated_cost_usd") + estimated_cost,
        "requests": F("requests") + requests,
        "failed_requests": F("failed_requests") + fails,
    }
    rows = UsageLedger.objects.filter(user_id=user_id, day=day, model=model)
    with transaction.atomic(savepoint=False):
        if rows.update(**increments):
            return
        try:
            with transaction.atomic():  # a savepoint: a lost race must not spoil the outer block
                UsageLedger.objects.create(user_id=user_id, day=day, model=model, input_tokens=counts.input_tokens,
                                           output_tokens=counts.output_tokens, estimated_tokens=estimated,
                                           cost_usd=cost, estimated_cost_usd=estimated_cost, requests=requests,
                                           failed_requests=fails)
                return
        except IntegrityError:  # another process created the row first
            pass
        rows.update(**increments)


@dataclass(frozen=True, slots=True)
class Spent:
    """What a user spent on one day, over every model."""

    tokens: int
    """Input + output tokens."""
    cost: Decimal
    """USD."""


def spent_on(user_id: Any, day: date) -> Spent:
    """The user's tokens (input + output) and cost on ``day``, summed over the day's rows (1 query)."""
    sums = UsageLedger.objects.filter(user_id=user_id, day=day).aggregate(
        inp=Sum("input_tokens"), out=Sum("output_tokens"), cost=Sum("cost_usd"))
    return Spent(tokens=int(sums["inp"] or 0) + int(sums["out"] or 0), cost=Decimal(sums["cost"] or 0))
