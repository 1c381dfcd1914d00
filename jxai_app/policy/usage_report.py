"""What the usage ledger says over the last days, for admin's charts and CSV export
(docs/operations.md "Usage in admin").

Every function takes a queryset of :class:`~jxai_app.models.UsageLedger` rows (admin's,
with its filters applied) and reads it with one aggregate query.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any, Iterable

from django.db.models import F, QuerySet, Sum

__all__ = ["CSV_COLUMNS", "ERASED_USER", "DailySeries", "TopUser", "csv_text", "daily_by", "error_rate", "top_users"]

OTHERS = "(others)"
"""The series that gathers everything past the largest few."""


@dataclass
class DailySeries:
    """Per-day values by series: ``series[label][i]`` belongs to ``days[i]``."""

    days: list[date]
    series: dict[str, list[float]] = field(default_factory=dict)


def _days(today: date, count: int) -> list[date]:
    return [today - timedelta(days=count - 1 - i) for i in range(count)]


def daily_by(rows: QuerySet[Any], *, group: str, measure: str, today: date, days: int = 30,
             most: int = 6) -> DailySeries:
    """Tokens or cost per day of the last ``days`` days (ending ``today``), one series per
    model or per user.

    Args:
        rows: ledger rows.
        group: ``"model"`` (the alias; ``(unknown)`` for rows without one) or ``"user"``
            (the username; :data:`ERASED_USER` for anonymised rows).
        measure: ``"tokens"`` (input + output) or ``"cost"`` (USD).
        most: the largest this many series by total are kept; the rest sum into ``(others)``.

    Returns:
        The series, largest total first, every one as long as ``days``.
    """
    window = _days(today, days)
    key = "model" if group == "model" else "user__username"
    value = Sum(F("input_tokens") + F("output_tokens")) if measure == "tokens" else Sum("cost_usd")
    sums: dict[str, list[float]] = {}
    index = {day: i for i, day in enumerate(window)}
    for label, day, total in (rows.filter(day__gte=window[0], day__lte=window[-1]).order_by()
                              .values(key, "day").annotate(total=value).values_list(key, "day", "total")):
        unnamed = "(unknown)" if group == "model" else ERASED_USER
        sums.setdefault(str(label or unnamed), [0.0] * days)[index[day]] += float(total or 0)
    ranked = sorted(sums.items(), key=lambda item: -sum(item[1]))
    result = DailySeries(days=window, series=dict(ranked[:most]))
    if len(ranked) > most:
        result.series[OTHERS] = [sum(values[i] for _, values in ranked[most:]) for i in range(days)]
    return result


ERASED_USER = "(erased user)"
"""How reports name the user of an anonymised ledger row (docs/data.md "Erasure")."""


@dataclass(frozen=True)
class TopUser:
    """One user's totals over the window."""

    username: str
    tokens: int
    cost: Decimal
    requests: int


def top_users(rows: QuerySet[Any], *, today: date, days: int = 30, limit: int = 10) -> list[TopUser]:
    """The ``limit`` users with the most tokens over the last ``days`` days, most first."""
    start = today - timedelta(days=days - 1)
    totals = (rows.filter(day__gte=start, day__lte=today).order_by().values("user__username")
              .annotate(tokens=Sum(F("input_tokens") + F("output_tokens")), cost=Sum("cost_usd"),
                        requests=Sum("requests")).order_by("-tokens", "user__username")[:limit])
    return [TopUser(username=t["user__username"] or ERASED_USER, tokens=int(t["tokens"] or 0), cost=Decimal(t["cost"] or 0),
                    requests=int(t["requests"] or 0)) for t in totals]


def error_rate(rows: QuerySet[Any], *, today: date, days: int = 30) -> DailySeries:
    """Per day, the percentage of provider requests that ended in an error (0 on a day
    without requests), as one series ``errors %``."""
    window = _days(today, days)
    per_day = {day: (int(req or 0), int(failed or 0)) for day, req, failed in (
        rows.filter(day__gte=window[0], day__lte=window[-1]).order_by().values("day")
        .annotate(req=Sum("requests"), failed=Sum("failed_requests")).values_list("day", "req", "failed"))}
    rates = [100.0 * per_day[d][1] / per_day[d][0] if per_day.get(d, (0, 0))[0] else 0.0 for d in window]
    return DailySeries(days=window, series={"errors %": rates})


CSV_COLUMNS = ("day", "user", "model", "input_tokens", "output_tokens", "estimated_tokens", "cost_usd",
               "estimated_cost_usd", "requests", "failed_requests")
"""The export's header row."""


_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")
"""First characters that make a spreadsheet read a cell as a formula (OWASP "CSV Injection")."""


def _inert(text: str) -> str:
    """``text`` as a cell no spreadsheet runs: prefixed with ``'`` when it starts with one of
    :data:`_FORMULA_STARTS` (docs/operations.md "Usage in admin")."""
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def csv_text(rows: Iterable[Any]) -> str:
    """The rows as CSV (RFC 4180, header :data:`CSV_COLUMNS`), cost in plain decimal USD.

    Every text cell (day, username, model name: a caller may choose the model name) is data
    and goes through one rule (:func:`_inert`), so a spreadsheet never runs one as a formula;
    the counts and costs are numbers.
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        name = ERASED_USER if row.user is None else row.user.get_username()
        texts = [_inert(str(text)) for text in (row.day.isoformat(), name, row.model)]
        writer.writerow([*texts, row.input_tokens, row.output_tokens, row.estimated_tokens, f"{row.cost_usd:f}",
                         f"{row.estimated_cost_usd:f}", row.requests, row.failed_requests])
    return out.getvalue()
