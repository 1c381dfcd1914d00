"""Bar charts as inline SVG, drawn on the server (docs/operations.md "Usage in admin").

No script and no style attribute: the markup is presentation attributes only, so it renders
under any Content Security Policy, and every text (a username, a model alias) goes through
Django's escaping. :func:`stacked_bars` draws one bar per day, its series stacked, with a
legend and the largest day's total as the scale. A series keeps its colour from chart to
chart (:func:`series_colours`): the model that is blue in the tokens chart is blue in the cost
chart, whichever of them ranks first there.

Hooks for tests and scripts: ``<svg data-chart="<name>">``, each bar segment
``<rect data-series="<label>" data-day="YYYY-MM-DD" data-value="…">`` (only non-zero ones),
legend entries ``<g data-legend="<label>">``.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from jxai_app.policy.usage_report import DailySeries

__all__ = ["PALETTE", "series_colours", "stacked_bars"]

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
"""Series colours (Tableau 10), dealt by :func:`series_colours`; repeated past eight."""

WIDTH, HEIGHT = 720, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 84, 8, 12, 28
_LEGEND_ROW = 18


def series_colours(labels: Iterable[str]) -> dict[str, str]:
    """One colour per series label, for every chart that shows these labels: the labels in
    alphabetical order get :data:`PALETTE`'s colours in turn (docs/operations.md "Usage in admin").

    ``["gpt-4o", "gemma"]`` → ``{"gemma": "#4e79a7", "gpt-4o": "#f28e2b"}``.
    """
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(sorted(set(labels)))}


def stacked_bars(name: str, title: str, data: DailySeries, *, unit: Callable[[float], str],
                 colours: Mapping[str, str]) -> SafeString:
    """One chart's ``<figure>`` (module docstring).

    Args:
        name: the chart's ``data-chart`` name.
        title: the caption, also the SVG's accessible label.
        data: days and series (:mod:`jxai_app.policy.usage_report`).
        unit: formats a value for the axis and tooltips (``"1,234"``, ``"$0.0123"``).
        colours: each series label's fill (:func:`series_colours`; every label of ``data``).

    Returns:
        Safe HTML.
    """
    days = data.days
    totals = [sum(values[i] for values in data.series.values()) for i in range(len(days))]
    peak = max(totals, default=0.0) or 1.0
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    slot = plot_w / max(1, len(days))
    bars = []
    for i, day in enumerate(days):
        base = 0.0
        for s, (label, values) in enumerate(data.series.items()):
            value = values[i]
            if value <= 0:
                continue
            height = plot_h * value / peak
            y = _TOP + plot_h - plot_h * base / peak - height
            bars.append((f"{_LEFT + i * slot + slot * 0.1:.1f}", f"{y:.1f}", f"{slot * 0.8:.1f}", f"{height:.1f}",
                         colours[label], label, day.isoformat(), f"{value:g}",
                         f"{label} · {day.isoformat()}: {unit(value)}"))
            base += value
    rects = format_html_join(
        "", '<rect x="{}" y="{}" width="{}" height="{}" fill="{}" data-series="{}" data-day="{}" data-value="{}">'
            '<title>{}</title></rect>', bars)
    ticks = format_html_join("", '<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>', (
        (f"{_LEFT + i * slot + slot / 2:.1f}", HEIGHT - _BOTTOM + 14, day.strftime("%m-%d"))
        for i, day in enumerate(days) if i % 5 == 0 or i == len(days) - 1))
    legend_h = _LEGEND_ROW * ((len(data.series) + 3) // 4)
    legend = format_html_join("", '<g data-legend="{}"><rect x="{}" y="{}" width="10" height="10" fill="{}"></rect>'
                                  '<text x="{}" y="{}" font-size="11">{}</text></g>', (
        (label, _LEFT + (s % 4) * 170, HEIGHT + (s // 4) * _LEGEND_ROW, colours[label],
         _LEFT + (s % 4) * 170 + 14, HEIGHT + (s // 4) * _LEGEND_ROW + 9, label)
        for s, label in enumerate(data.series)))
    empty = "" if bars else format_html('<text x="{}" y="{}" text-anchor="middle" font-size="12">{}</text>',
                                        WIDTH / 2, HEIGHT / 2, "No usage in these days")
    return format_html(
        '<figure class="jxai-chart"><figcaption>{}</figcaption>'
        '<svg xmlns="http://www.w3.org/2000/svg" data-chart="{}" role="img" aria-label="{}" width="100%" '
        'viewBox="0 0 {} {}" preserveAspectRatio="xMinYMin meet">'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#888"></line>'
        '<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>'
        '<text x="{}" y="{}" font-size="10" text-anchor="end">0</text>'
        '{}{}{}{}</svg></figure>',
        title, name, title, WIDTH, HEIGHT + legend_h,
        _LEFT, _TOP + plot_h, WIDTH - _RIGHT, _TOP + plot_h,
        _LEFT - 4, _TOP + 8, unit(peak if totals and max(totals) > 0 else 0),
        _LEFT - 4, _TOP + plot_h,
        rects, ticks, legend, empty)
