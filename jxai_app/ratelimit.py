"""Per-user rate limit (turns per minute) and quota (tokens per day) — issue 6 item 3.

Shared by ``POST /ai/chat`` and the websocket turn runner: call :func:`check_turn_allowed`
before a turn contacts the provider, and :func:`record_usage` once per provider request
with the usage it reported (or an estimate, marked as such). Both have ``a``-prefixed async
twins for async callers.

Allowances come from settings (``JXAI_TURNS_PER_MINUTE``, ``JXAI_TOKENS_PER_DAY`` through
:func:`jxai_app.conf.get_limits`), overridden per user by a :class:`~jxai_app.models.UserLimits`
row (``None`` = the default). **0 means no limit**, in settings and overrides alike.

Storage, Django's cache framework (configure a shared cache such as Redis when several
worker processes serve users; the default local-memory cache counts per process):

- turns: a sliding-window counter (the current and the previous minute, the previous one
  weighted by how much of it still lies inside the last 60 s), updated with atomic
  ``incr``; a refused turn is not counted;
- tokens: a counter per user and UTC day, increased by :func:`record_usage` (input +
  output tokens). Because a cache may be emptied (restart, eviction), the figure used is
  ``max(counter, tokens saved on the user's assistant messages of the day)`` — the saved
  usage is a lower bound the counter can only exceed, so nothing is counted twice.

A refusal is a ``ProblemError`` with problem ``rate-limited`` or ``quota-exceeded`` (429)
carrying ``retry_after`` (whole seconds, ≥ 1) for the ``Retry-After`` header.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Final, Mapping

from asgiref.sync import sync_to_async
from django.core.cache import cache

from jxai_app import conf
from jxai_app.problems import problem_error

__all__ = [
    "Allowance",
    "acheck_turn_allowed",
    "allowance_for",
    "arecord_usage",
    "check_turn_allowed",
    "record_usage",
    "tokens_used_today",
    "turns_in_last_minute",
]

WINDOW_SECONDS: Final[int] = 60
_PREFIX: Final[str] = "jxai:limits"

clock: Callable[[], float] = time.time
"""Wall-clock seconds; tests replace it to move time."""


@dataclass(frozen=True, slots=True)
class Allowance:
    """A user's effective limits (0 = unlimited)."""

    turns_per_minute: int
    tokens_per_day: int


def allowance_for(user: Any) -> Allowance:
    """Settings defaults with the user's :class:`~jxai_app.models.UserLimits` overrides applied."""
    from jxai_app.models import UserLimits

    limits = conf.get_limits()
    row = UserLimits.objects.filter(user_id=user.pk).values("turns_per_minute", "tokens_per_day").first() or {}
    turns = row.get("turns_per_minute")
    tokens = row.get("tokens_per_day")
    return Allowance(
        turns_per_minute=int(limits.turns_per_minute if turns is None else turns),
        tokens_per_day=int(limits.tokens_per_day if tokens is None else tokens),
    )


# -- tokens per day ------------------------------------------------------------------------
def _day_start(now: float) -> datetime:
    moment = datetime.fromtimestamp(now, tz=timezone.utc)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _tokens_key(user_id: Any, day: datetime) -> str:
    return f"{_PREFIX}:tokens:{user_id}:{day:%Y-%m-%d}"


def _usage_tokens(usage: Mapping[str, Any] | None) -> int:
    if not isinstance(usage, Mapping):
        return 0
    total = 0
    for key in ("inputTokens", "outputTokens"):
        value = usage.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            total += int(value)
    return total


def _saved_tokens(user: Any, since: datetime) -> int:
    from jxai_app.models import Message

    rows = Message.objects.filter(conversation__owner_id=user.pk, role="assistant", created_at__gte=since,
                                  usage__isnull=False).values_list("usage", flat=True)
    return sum(_usage_tokens(u) for u in rows)


def tokens_used_today(user: Any) -> int:
    """Input + output tokens the user spent since 00:00 UTC (module docstring)."""
    day = _day_start(clock())
    counted = cache.get(_tokens_key(user.pk, day)) or 0
    return max(int(counted), _saved_tokens(user, day))


def record_usage(user: Any, usage: Mapping[str, Any] | None, *, estimated: bool) -> int:
    """Count one provider request's tokens toward the user's daily quota.

    Args:
        user: the user who asked.
        usage: ``{"inputTokens", "outputTokens", …}`` (the ``usage`` event's wire form or the
            saved shape); missing or bad counts count as 0.
        estimated: True when the counts are an estimate (the provider sent none). Estimates
            count like real figures; the flag is for records and logs.

    Returns:
        The tokens added.
    """
    tokens = _usage_tokens(usage)
    if tokens <= 0 or user is None or getattr(user, "pk", None) is None:
        return 0
    key = _tokens_key(user.pk, _day_start(clock()))
    cache.add(key, 0, timeout=2 * 24 * 3600)
    try:
        cache.incr(key, tokens)
    except ValueError:  # evicted between add and incr
        cache.set(key, tokens, timeout=2 * 24 * 3600)
    return tokens


# -- turns per minute ----------------------------------------------------------------------
def _turn_key(user_id: Any, window: int) -> str:
    return f"{_PREFIX}:turns:{user_id}:{window}"


def _window(now: float) -> tuple[int, float]:
    window = int(now // WINDOW_SECONDS)
    return window, (now - window * WINDOW_SECONDS) / WINDOW_SECONDS


def turns_in_last_minute(user: Any) -> float:
    """The sliding-window estimate of turns started in the last 60 s."""
    window, elapsed = _window(clock())
    counts = cache.get_many([_turn_key(user.pk, window - 1), _turn_key(user.pk, window)])
    previous = float(counts.get(_turn_key(user.pk, window - 1), 0))
    return previous * (1 - elapsed) + float(counts.get(_turn_key(user.pk, window), 0))


def _rate_retry_after(previous: int, taken: int, limit: int, elapsed: float) -> int:
    """Seconds until one more turn fits: ``previous·(1−f) + taken + 1 ≤ limit`` with no other
    turn meanwhile (``f`` = the elapsed fraction of the current window)."""
    room = limit - 1 - taken
    if room >= 0 and previous > 0:  # later in this window, once the previous one weighs less
        seconds = (1 - room / previous - elapsed) * WINDOW_SECONDS
    else:  # in the next window, where ``taken`` becomes the weighted previous count
        fraction = max(0.0, 1 - (limit - 1) / taken) if taken else 0.0
        seconds = (1 - elapsed + fraction) * WINDOW_SECONDS
    return max(1, math.ceil(seconds))


def _take_turn(user: Any, limit: int) -> None:
    window, elapsed = _window(clock())
    key = _turn_key(user.pk, window)
    cache.add(key, 0, timeout=3 * WINDOW_SECONDS)
    try:
        current = cache.incr(key)
    except ValueError:
        cache.set(key, 1, timeout=3 * WINDOW_SECONDS)
        current = 1
    previous = int(cache.get(_turn_key(user.pk, window - 1)) or 0)
    if previous * (1 - elapsed) + current <= limit:
        return
    try:
        cache.decr(key)  # a refused turn does not count
    except ValueError:
        pass
    retry = _rate_retry_after(previous, current - 1, limit, elapsed)
    raise problem_error("rate-limited", f"You may start at most {limit} turns per minute; retry in {retry} s.",
                        retry_after=retry)


def check_turn_allowed(user: Any) -> None:
    """Admit one turn for ``user`` or refuse it; an admitted turn counts toward the minute.

    Checked before the provider is contacted: first the daily token quota, then the turns
    per minute (a turn refused for quota takes no slot).

    Raises:
        ProblemError: ``quota-exceeded`` (429) when today's tokens reached the allowance,
            ``retry_after`` = seconds until 00:00 UTC; ``rate-limited`` (429) when the turn
            would exceed the per-minute allowance, ``retry_after`` = seconds until it would not.
    """
    allowance = allowance_for(user)
    if allowance.tokens_per_day > 0:
        used = tokens_used_today(user)
        if used >= allowance.tokens_per_day:
            now = clock()
            retry = max(1, math.ceil((_day_start(now) + timedelta(days=1)).timestamp() - now))
            raise problem_error("quota-exceeded",
                                f"You have used {used} of your {allowance.tokens_per_day} tokens for today "
                                f"(UTC); the allowance renews in {retry} s.", retry_after=retry)
    if allowance.turns_per_minute > 0:
        _take_turn(user, allowance.turns_per_minute)


acheck_turn_allowed = sync_to_async(check_turn_allowed)
"""Async twin of :func:`check_turn_allowed`."""
arecord_usage = sync_to_async(record_usage)
"""Async twin of :func:`record_usage`."""
