"""Per-user rate limit (turns per minute) and quotas (tokens and USD per day) (docs/security.md,
threat 3, and "Limits: why the database, and what it costs"; docs/operations.md "Cost").

Shared by ``POST /ai/chat`` and the websocket turn runner: call :func:`check_turn_allowed`
before a turn contacts the provider, and :func:`record_usage` once per provider request
with the usage it reported (or an estimate, marked as such). Both are sync: async callers
run them through :func:`jxai_app.db.db_call`.

Allowances come from settings (``JXAI_TURNS_PER_MINUTE``, ``JXAI_TOKENS_PER_DAY`` through
:func:`jxai_app.conf.get_limits`, ``JXAI_COST_PER_DAY`` through :func:`jxai_app.conf.cost_per_day`), overridden by the user's groups'
:class:`~jxai_app.models.GroupEntitlements` and their own :class:`~jxai_app.models.UserLimits` row
(``None`` = not set; the rule: :mod:`jxai_app.policy.entitlements`). **0 means no limit**, in
settings and overrides alike.

Storage is the database, which every worker process already shares (SQLite file or
PostgreSQL), so both figures are exact with any number of workers and survive restarts.
Django's cache is not used: its default (local memory) counts per process, and a shared
cache may be emptied.

- **Tokens and cost per day**: the :class:`~jxai_app.models.UsageLedger` rows of the user and
  UTC day (one per model), increased by :func:`record_usage` with ``F()`` increments
  (:mod:`jxai_app.policy.usage`), the cost from :func:`jxai_app.policy.cost.request_cost`.
- **Turns per minute**: an exact sliding window. Each admitted turn (a websocket send or an
  ``/ai/chat`` request) adds a :class:`~jxai_app.models.TurnAdmission` row; admitting counts
  the user's rows of the last 60 s inside one transaction that is serialised per user (on
  PostgreSQL ``SELECT … FOR NO KEY UPDATE`` of the user's row; on SQLite the ``IMMEDIATE``
  transaction already holds the database's write lock), so two workers can never both take
  the last slot. Rows older than the window are deleted on the way. A refused turn adds
  nothing.

A refusal is a ``ProblemError`` with problem ``rate-limited`` or ``quota-exceeded`` (429)
carrying ``retry_after`` (whole seconds, ≥ 1) for the ``Retry-After`` header.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Callable, Final, Mapping

from django.contrib.auth import get_user_model
from django.db import transaction

from jxai_app import conf
from jxai_app.models import TurnAdmission
from jxai_app.policy import reservations
from jxai_app.policy.entitlements import Entitlements, entitlements_for
from jxai_app.policy import usage as ledger
from jxai_app.policy.cost import request_cost
from jxai_app.core.errors import ProblemError
from jxai_app.core.problems import problem_error

__all__ = [
    "Allowance",
    "allowance_for",
    "check_turn_allowed",
    "lock_user",
    "now",
    "quota_refusal",
    "record_usage",
    "today",
    "tokens_used_today",
    "turns_in_last_minute",
]

WINDOW: Final[timedelta] = timedelta(seconds=60)
"""The rate limit's sliding window."""

clock: Callable[[], float] = time.time
"""Wall-clock seconds; tests replace it to move time."""


@dataclass(frozen=True, slots=True)
class Allowance:
    """A user's effective limits (0 = unlimited)."""

    turns_per_minute: int
    tokens_per_day: int
    cost_per_day: Decimal = Decimal(0)
    """USD per UTC day."""


def allowance_for(user: Any, granted: Entitlements | None = None) -> Allowance:
    """The user's effective rate limit and quotas: their ``UserLimits`` row, else the most
    generous of their groups', else the settings (:func:`jxai_app.policy.entitlements.entitlements_for`;
    docs/security.md "Group entitlements"). ``granted``: the user's entitlements read already
    (no query)."""
    granted = entitlements_for(user) if granted is None else granted
    return Allowance(turns_per_minute=granted.turns_per_minute, tokens_per_day=granted.tokens_per_day,
                     cost_per_day=granted.cost_per_day)


def now() -> datetime:
    """The limiter's time: :data:`clock` as an aware UTC datetime."""
    return datetime.fromtimestamp(clock(), tz=timezone.utc)


def today(now: datetime) -> date:
    """The UTC day of ``now`` (the quota's day)."""
    return now.date()


def lock_user(user: Any) -> None:
    """Lock the user's row until the transaction ends: one user's admissions and
    reservations are serialised across processes (``SELECT … FOR NO KEY UPDATE`` on
    PostgreSQL, so rows that merely reference the user are not blocked; on SQLite the
    ``IMMEDIATE`` transaction already holds the write lock)."""
    get_user_model()._default_manager.select_for_update(no_key=True).filter(pk=user.pk).exists()


def quota_refusal(user: Any, allowance: Allowance, need: int, at: datetime, *,
                  besides: uuid.UUID | None = None) -> ProblemError | None:
    """The ``quota-exceeded`` refusal of a request reserving ``need`` tokens on the day of
    ``at``, else ``None``: when tokens are limited, today's ledger tokens (the sum over the
    user's rows of the day, every model) + the reservations held + ``need`` must fit in
    ``allowance.tokens_per_day`` (docs/security.md "Quota reservations"); when cost is
    limited, today's cost must still be under ``allowance.cost_per_day`` (docs/operations.md
    "Cost"; cost is not reserved). ``besides``: a turn whose own reservation is left out.
    Call it with the user's row locked (:func:`lock_user`)."""
    day = today(at)
    spent = ledger.spent_on(user.pk, day)
    midnight = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc)
    retry = max(1, math.ceil((midnight - at).total_seconds()))
    tokens = allowance.tokens_per_day
    if tokens > 0:
        used = spent.tokens
        held = reservations.held_on(user.pk, day, besides=besides)
        if used >= tokens:
            return problem_error("quota-exceeded", f"You have used {used} of your {tokens} tokens for today (UTC); "
                                                   f"the allowance renews in {retry} s.", retry_after=retry)
        if used + held + need > tokens:
            return problem_error(
                "quota-exceeded",
                f"This request may take {need} tokens (its prompt and an answer of up to "
                f"{conf.get_limits().reserve_output_tokens}), and only {max(0, tokens - used - held)} of "
                f"your {tokens} tokens for today (UTC) are free ({used} used, {held} held by requests "
                f"still running); the allowance renews in {retry} s.", retry_after=retry)
    if allowance.cost_per_day > 0 and spent.cost >= allowance.cost_per_day:
        return problem_error("quota-exceeded", f"You have spent ${spent.cost:.4f} of your "
                                               f"${allowance.cost_per_day:.2f} for today (UTC); the "
                                               f"allowance renews in {retry} s.", retry_after=retry)
    return None


# -- tokens per day ------------------------------------------------------------------------
def tokens_used_today(user: Any) -> int:
    """Input + output tokens the user spent since 00:00 UTC, from the usage ledger."""
    return ledger.spent_on(user.pk, today(now())).tokens


def record_usage(user: Any, usage: Mapping[str, Any] | None, *, estimated: bool, model: str | None = None,
                 failed: bool = False, reservation: int | None = None) -> int:
    """Add one provider request's tokens and cost to the user's ledger row for today (UTC)
    and the model.

    Args:
        user: the user who asked; ``None`` or unsaved users record nothing.
        usage: ``{"inputTokens", "outputTokens", …}`` (the ``usage`` event's wire form or
            the saved shape); missing or bad counts count as 0, and ``None`` records a
            request with no tokens.
        estimated: True when the counts are an estimate (the provider sent none). Estimates
            count toward the quota like real figures and are also added to the ledger's
            ``estimated_tokens`` (and their cost to ``estimated_cost_usd``) so admin shows
            them as such.
        model: the model alias (prices the tokens: :func:`jxai_app.policy.cost.request_cost`);
            ``None``: unknown, unpriced.
        failed: the request ended in an error (the ledger's ``failed_requests``).
        reservation: the request's quota reservation (``/ai/chat``), deleted in the same
            transaction (:func:`jxai_app.policy.reservations.settle`).

    Returns:
        The tokens added (input + output).

    Raises:
        django.db.DatabaseError: the ledger could not be written.
    """
    if user is None or getattr(user, "pk", None) is None:
        return 0
    counts = ledger.counts_from(usage, estimated=estimated)
    cost = request_cost(model, counts)
    if reservation is None:
        ledger.ledger_add(user.pk, today(now()), counts, model=model or "", cost=cost, failed=failed)
        return counts.total
    with transaction.atomic(savepoint=False):
        day = today(now())
        ledger.ledger_add(user.pk, day, counts, model=model or "", cost=cost, failed=failed)
        reservations.settle(reservation, user.pk, day)
    return counts.total


# -- turns per minute ----------------------------------------------------------------------
def turns_in_last_minute(user: Any) -> int:
    """Turns admitted for ``user`` in the last 60 s."""
    return TurnAdmission.objects.filter(user_id=user.pk, at__gt=now() - WINDOW).count()


def _rate_limited(user: Any, limit: int, now: datetime) -> ProblemError:
    """The refusal once the minute's ``limit`` is used: one more fits once all but
    ``limit - 1`` of the window's turns have left it."""
    newest = list(TurnAdmission.objects.filter(user_id=user.pk).order_by("-at").values_list("at", flat=True)[:limit])
    retry = max(1, math.ceil((newest[-1] + WINDOW - now).total_seconds()))
    return problem_error("rate-limited", f"You may start at most {limit} turns per minute; retry in {retry} s.",
                         retry_after=retry)


def check_turn_allowed(user: Any, *, prompt_tokens: int = 0, turn_id: uuid.UUID | None = None,
                       granted: Entitlements | None = None) -> int | None:
    """Admit one model request for ``user`` or refuse it; an admitted one counts toward the
    minute and holds its reservation against the day's tokens.

    Checked before the provider is contacted, with the user's row locked
    (:func:`lock_user`) whenever a limit applies, which serialises one user's admissions
    across processes: first the daily quotas (:func:`quota_refusal`) — the request's
    reservation (``prompt_tokens`` + ``JXAI_RESERVE_OUTPUT_TOKENS``,
    :func:`jxai_app.policy.reservations.size`) must fit beside today's ledger tokens (all the
    user's rows of the day, every model) and the reservations still held (docs/security.md
    "Quota reservations"), and today's cost must be under the cost allowance
    (docs/operations.md "Cost") — then the turns per minute (rows that left the window are
    deleted, the window's admissions counted). Only when all pass are the admission and the
    reservation written, so a refusal writes nothing. Runs in the caller's transaction when
    there is one (the send's: a later refusal or conflict rolls both back too), else in one of
    its own.

    Args:
        user: the requesting user.
        prompt_tokens: the request's prompt estimate (:func:`jxai_app.core.tokens.estimate_tokens`).
        turn_id: the websocket turn the reservation belongs to (``None`` for ``/ai/chat``).
        granted: the user's entitlements when the caller read them already (:func:`allowance_for`).

    Returns:
        The reservation's id (settle it with :func:`jxai_app.policy.reservations.settle`, or
        through the turn's recorder), or ``None`` when the user's tokens are unlimited.

    Raises:
        ProblemError: ``quota-exceeded`` (429) when the reservation does not fit or today's
            cost reached its allowance,
            ``retry_after`` = seconds until 00:00 UTC; ``rate-limited`` (429) when the
            allowance of turns in the last 60 s is used up, ``retry_after`` = seconds until
            the oldest counted turn leaves the window.
        django.db.DatabaseError: the database is unreachable.
    """
    at = now()
    refusal: ProblemError | None = None
    reservation: int | None = None
    # No savepoint, and a refusal raised outside the block: the caller's transaction stays usable.
    with transaction.atomic(savepoint=False):
        allowance = allowance_for(user, granted)
        tokens, turns = allowance.tokens_per_day > 0, allowance.turns_per_minute > 0
        if tokens or turns or allowance.cost_per_day > 0:
            lock_user(user)
            refusal = quota_refusal(user, allowance, reservations.size(prompt_tokens), at)
        if refusal is None and turns:
            window = TurnAdmission.objects.filter(user_id=user.pk)
            window.filter(at__lte=at - WINDOW).delete()
            if window.count() >= allowance.turns_per_minute:
                refusal = _rate_limited(user, allowance.turns_per_minute, at)
            else:
                TurnAdmission.objects.create(user_id=user.pk, at=at)
        if refusal is None and tokens:
            reservation = reservations.hold(user.pk, today(at), prompt_tokens=prompt_tokens, turn_id=turn_id)
    if refusal is not None:
        raise refusal
    return reservation

