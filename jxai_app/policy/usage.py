"""The usage ledger: tokens and provider requests per user and UTC day (docs/security.md,
threat 3, and "Limits: why the database, and what it costs").

One :class:`~jxai_app.models.UsageLedger` row per ``(user, day)``, only ever increased with
``F()`` expressions, so concurrent writers in any number of processes add up exactly:

1. ``UPDATE … SET input_tokens = input_tokens + n … WHERE user = u AND day = d``;
2. when no row was updated, ``INSERT`` the row inside a savepoint;
3. when that insert loses a race (``IntegrityError`` on the ``(user, day)`` unique
   constraint: another process inserted first), run the ``UPDATE`` again.

On PostgreSQL the losing ``INSERT`` waits for the winner's transaction and then fails on the
unique index, so step 3 always finds the row; on SQLite writers are serialised by the
``IMMEDIATE`` transactions the settings configure. Nothing is read and written back, so no
increment is ever lost.

The daily quota (:mod:`jxai_app.policy.ratelimit`) reads :func:`tokens_on`; admin lists the rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date
from typing import Any, Mapping

from django.db import IntegrityError, transaction
from django.db.models import F

__all__ = ["UsageCounts", "counts_from", "ledger_add", "tokens_on"]


@dataclass(frozen=True, slots=True)
class UsageCounts:
    """Tokens of one provider request; ``estimated`` when made up (the provider sent none)."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False

    @property
    def total(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens


def _count(value: Any) -> int:
    """A finite non-negative whole count, else 0 (``True``/``False`` are not counts; docs/store.md "Usage and context tokens")."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if not math.isfinite(value) or value < 0:
        return 0
    return int(value)


def counts_from(usage: Mapping[str, Any] | None, *, estimated: bool = False) -> UsageCounts:
    """Read ``{"inputTokens", "outputTokens"[, "estimated"]}`` (the ``usage`` event's wire
    form or the saved shape, :mod:`jxai_app.store.usage`); a missing or bad count is 0.

    ``estimated`` is true when the caller says so or the mapping carries ``"estimated": true``.
    """
    if not isinstance(usage, Mapping):
        return UsageCounts(estimated=estimated)
    return UsageCounts(input_tokens=_count(usage.get("inputTokens")),
                       output_tokens=_count(usage.get("outputTokens")),
                       estimated=bool(estimated or usage.get("estimated") is True))


def ledger_add(user_id: Any, day: date, counts: UsageCounts, *, requests: int = 1) -> None:
    """Add one request's counts to the user's row for ``day`` (created when missing).

    Args:
        user_id: primary key of the user.
        day: the UTC day the request belongs to.
        counts: its tokens; when ``estimated`` they also go to ``estimated_tokens``.
        requests: provider requests to add (1 per recorded request).

    Raises:
        django.db.DatabaseError: the database is unreachable (callers decide; the turn
            runner and ``/ai/chat`` log it and go on).
    """
    estimated = counts.total if counts.estimated else 0
    increments = {
        "input_tokens": F("input_tokens") + counts.input_tokens,
        "output_tokens": F("output_tokens") + counts.output_tokens,
        "estimated_tokens": F("estimated_tokens") + estimated,
        "requests": F("requests") + requests,
    }
    from jxai_app.models import UsageLedger

    rows = UsageLedger.objects.filter(user_id=user_id, day=day)
    with transaction.atomic():
        if rows.update(**increments):
            return
        try:
            with transaction.atomic():  # a savepoint: a lost race must not spoil the outer block
                UsageLedger.objects.create(user_id=user_id, day=day, input_tokens=counts.input_tokens,
                                           output_tokens=counts.output_tokens, estimated_tokens=estimated,
                                           requests=requests)
                return
        except IntegrityError:  # another process created the row first
            pass
        rows.update(**increments)


def tokens_on(user_id: Any, day: date) -> int:
    """Input + output tokens the ledger holds for the user on ``day`` (0 when no row)."""
    from jxai_app.models import UsageLedger

    row = UsageLedger.objects.filter(user_id=user_id, day=day).values_list("input_tokens", "output_tokens").first()
    return 0 if row is None else int(row[0]) + int(row[1])
