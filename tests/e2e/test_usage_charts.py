"""Admin's usage charts in a real browser (docs/operations.md "Usage in admin"): a superuser
logs in through the admin's form, opens the usage page, and the five inline SVG charts are
drawn with non-empty series; the screenshot of the tokens chart holds each model's colour, a model
keeps its colour from the tokens chart to the cost chart although they rank it differently, and
the totals' headers stand apart."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from jxai_app.models import UsageLedger
from tests.e2e.conftest import PASSWORD, RESULTS
from tests.e2e.steps import admin_login
from tests.support.png import colours

pytestmark = pytest.mark.browser

CHARTS = ("tokens-by-model", "tokens-by-user", "cost-by-model", "cost-by-user", "error-rate")

DRAWN = """(name) => [...document.querySelectorAll(`svg[data-chart="${name}"] rect[data-series]`)]
  .map(r => ({series: r.dataset.series, height: r.getBoundingClientRect().height, fill: r.getAttribute('fill')}))"""

HEADER_GAPS = """() => [...document.querySelectorAll('#usage-totals thead th')].map(th => {
  const text = document.createRange(); text.selectNodeContents(th);
  return th.getBoundingClientRect().right - text.getBoundingClientRect().right; })"""


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def test_the_usage_charts_render_with_their_series(open_page: Any, live_db: None, django_user_model: Any) -> None:
    today = datetime.now(timezone.utc).date()
    alice = django_user_model.objects.create_user("alice")
    bob = django_user_model.objects.create_user("bob")
    for days_ago in range(0, 30, 3):
        day = today - timedelta(days=days_ago)
        UsageLedger.objects.create(user=alice, day=day, model="gpt-4o-mini", input_tokens=1000 + days_ago * 10,
                                   output_tokens=200, cost_usd=Decimal("0.0015"), requests=3, failed_requests=1)
        UsageLedger.objects.create(user=bob, day=day, model="gemma-3-270m", input_tokens=400, output_tokens=90,
                                   requests=2)
    carol = django_user_model.objects.create_user("carol")  # few tokens, the dearest model: first by cost
    UsageLedger.objects.create(user=carol, day=today, model="claude-opus", input_tokens=10, output_tokens=5,
                               cost_usd=Decimal("0.9"), requests=1)
    django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)

    tab = open_page(viewport={"width": 1280, "height": 900})
    admin_login(tab, "root", "/admin/jxai_app/usageledger/")
    page = tab.page
    page.locator("#usage-charts svg").first.wait_for()

    for name in CHARTS:
        drawn = page.evaluate(DRAWN, name)
        assert drawn and all(bar["height"] > 0 for bar in drawn), (name, drawn)
    by_model = {bar["series"] for bar in page.evaluate(DRAWN, "tokens-by-model")}
    assert by_model == {"gpt-4o-mini", "gemma-3-270m", "claude-opus"}
    assert {bar["series"] for bar in page.evaluate(DRAWN, "cost-by-user")} == {"alice", "carol"}  # bob's model is free
    assert page.locator('svg[data-chart="tokens-by-user"] g[data-legend]').count() == 3
    for group in ("model", "user"):
        fills = {(bar["series"], bar["fill"]) for name in (f"tokens-by-{group}", f"cost-by-{group}")
                 for bar in page.evaluate(DRAWN, name)}
        assert len(fills) == len({series for series, _ in fills}), f"a {group} changes colour: {sorted(fills)}"
    gaps = page.evaluate(HEADER_GAPS)
    assert len(gaps) == 8 and min(gaps) >= 8, f"the totals' headers run together: {gaps}"
    assert page.locator("#usage-top-users tr[data-top-user]").all_inner_texts()[0].startswith("alice")

    RESULTS.mkdir(parents=True, exist_ok=True)
    chart = page.locator('svg[data-chart="tokens-by-model"]')
    png = chart.screenshot(path=str(RESULTS / "admin-usage-tokens-by-model.png"))
    page.screenshot(path=str(RESULTS / "admin-usage-charts.png"), full_page=True)
    pixels = colours(png)
    large = {bar["fill"] for bar in page.evaluate(DRAWN, "tokens-by-model") if bar["series"] != "claude-opus"}
    assert len(large) == 2
    for colour in large:  # the two large series' bars were painted
        assert pixels.get(_rgb(colour), 0) > 100, (colour, sorted(pixels.items(), key=lambda p: -p[1])[:5])
    assert tab.errors == [] and tab.console_errors == []
