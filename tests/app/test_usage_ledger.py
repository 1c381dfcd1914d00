"""The usage ledger and the database-backed limits (docs/security.md "Limits: why the
database, and what it costs"): exact F() increments, UTC days, the exact 60 s window, several
worker processes at once, and admin's usage view."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from jxai_app.policy import ratelimit

from jxai_app.policy import usage
from jxai_app.policy.budget import TurnBudget
from jxai_app.core.errors import ProblemError
from jxai_app.models import TokenReservation, TurnAdmission, UsageLedger, UserLimits
from tests.app.conftest import NOON, FakeClock
from tests.support.database import database_url

ROOT = Path(__file__).resolve().parents[2]


def _row(user: Any, day: date = date(2025, 3, 4)) -> UsageLedger:
    return UsageLedger.objects.get(user=user, day=day)


@pytest.mark.django_db
def test_record_usage_creates_then_increments_the_day_row(user: Any, wall_clock: FakeClock) -> None:
    assert ratelimit.record_usage(user, {"inputTokens": 100, "outputTokens": 20}, estimated=False) == 120
    assert ratelimit.record_usage(user, {"inputTokens": 40, "outputTokens": 8, "cachedInputTokens": 30},
                                  estimated=True) == 48
    row = _row(user)
    assert (row.input_tokens, row.output_tokens, row.estimated_tokens, row.requests) == (140, 28, 48, 2)
    assert row.total_tokens == 168 and ratelimit.tokens_used_today(user) == 168


@pytest.mark.django_db
def test_usage_marked_estimated_in_the_saved_shape_counts_as_estimated(user: Any, wall_clock: FakeClock) -> None:
    ratelimit.record_usage(user, {"inputTokens": 5, "outputTokens": 5, "estimated": True}, estimated=False)
    assert _row(user).estimated_tokens == 10


@pytest.mark.parametrize("bad", [None, {}, {"inputTokens": -3, "outputTokens": "7"},
                                 {"inputTokens": True, "outputTokens": float("nan")}, "not a mapping"])
@pytest.mark.django_db
def test_missing_or_bad_counts_record_a_request_with_no_tokens(user: Any, wall_clock: FakeClock, bad: Any) -> None:
    assert ratelimit.record_usage(user, bad, estimated=False) == 0
    row = _row(user)
    assert (row.input_tokens, row.output_tokens, row.requests) == (0, 0, 1)


@pytest.mark.django_db
def test_no_user_records_nothing(wall_clock: FakeClock) -> None:
    assert ratelimit.record_usage(None, {"inputTokens": 5, "outputTokens": 5}, estimated=False) == 0
    assert not UsageLedger.objects.exists()


@pytest.mark.django_db
def test_days_are_utc_and_the_quota_renews_at_midnight(user: Any, wall_clock: FakeClock, no_answer_reserve: None) -> None:
    UserLimits.objects.create(user=user, tokens_per_day=50, turns_per_minute=0)
    wall_clock.now = datetime(2025, 3, 4, 23, 59, 58, tzinfo=timezone.utc).timestamp()
    ratelimit.record_usage(user, {"inputTokens": 50, "outputTokens": 0}, estimated=False)
    with pytest.raises(ProblemError) as caught:
        ratelimit.check_turn_allowed(user)
    assert caught.value.slug == "quota-exceeded" and caught.value.problem["retry_after"] == 2
    wall_clock.now += 2
    ratelimit.check_turn_allowed(user)
    ratelimit.record_usage(user, {"inputTokens": 7, "outputTokens": 0}, estimated=False)
    assert list(UsageLedger.objects.order_by("day").values_list("day", "input_tokens")) == [
        (date(2025, 3, 4), 50), (date(2025, 3, 5), 7)]


@pytest.mark.django_db
def test_the_minute_is_an_exact_sliding_window(user: Any, wall_clock: FakeClock) -> None:
    UserLimits.objects.create(user=user, turns_per_minute=3)
    for _ in range(3):
        ratelimit.check_turn_allowed(user)
        wall_clock.now += 10
    with pytest.raises(ProblemError) as caught:  # at +30 s: the first turn leaves at +60 s
        ratelimit.check_turn_allowed(user)
    assert caught.value.slug == "rate-limited" and caught.value.problem["retry_after"] == 30
    wall_clock.now = NOON + 59.5
    with pytest.raises(ProblemError) as caught:
        ratelimit.check_turn_allowed(user)
    assert caught.value.problem["retry_after"] == 1
    wall_clock.now = NOON + 60
    ratelimit.check_turn_allowed(user)  # exactly 60 s later the first turn is out
    assert ratelimit.turns_in_last_minute(user) == 3
    # Admitting pruned what left the window; refusals added nothing.
    assert TurnAdmission.objects.filter(user=user).count() == 3


@pytest.mark.django_db
def test_a_lowered_limit_waits_for_enough_turns_to_leave(user: Any, wall_clock: FakeClock) -> None:
    for _ in range(5):
        ratelimit.check_turn_allowed(user)
        wall_clock.now += 1
    UserLimits.objects.create(user=user, turns_per_minute=2)
    with pytest.raises(ProblemError) as caught:  # at +5 s; 4 of the 5 must leave: the 4th (+3 s) at +63 s
        ratelimit.check_turn_allowed(user)
    assert caught.value.problem["retry_after"] == 58


@pytest.mark.django_db
def test_turns_are_counted_per_user(user: Any, other_user: Any, wall_clock: FakeClock) -> None:
    UserLimits.objects.create(user=user, turns_per_minute=1)
    ratelimit.check_turn_allowed(user)
    ratelimit.check_turn_allowed(other_user)
    with pytest.raises(ProblemError):
        ratelimit.check_turn_allowed(user)
    assert ratelimit.turns_in_last_minute(other_user) == 1


@pytest.mark.django_db(transaction=True)
def test_an_api_request_budget_admits_settles_and_leaves_no_reservation(user: Any, wall_clock: FakeClock) -> None:
    UserLimits.objects.create(user=user, tokens_per_day=100_000)
    budget = TurnBudget.admit(user, prompt_tokens=10, model="m")
    assert ratelimit.turns_in_last_minute(user) == 1 and TokenReservation.objects.filter(user=user).count() == 1
    budget.settle({"inputTokens": 1, "outputTokens": 2}, estimated=False)
    assert _row(user).total_tokens == 3
    assert not TokenReservation.objects.filter(user=user).exists()


@pytest.mark.django_db
def test_ledger_add_survives_losing_the_insert_race(user: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL interleaving: our UPDATE ran before another process's INSERT committed (it
    matched nothing), then our INSERT hits the unique constraint. The IntegrityError is
    absorbed inside a savepoint and the second UPDATE adds to the other process's row."""
    from django.db.models import QuerySet

    day = date(2025, 1, 1)
    UsageLedger.objects.create(user=user, day=day, input_tokens=10, requests=1)  # the other process
    real_update = QuerySet.update
    calls: list[int] = []

    def first_update_misses(self: QuerySet[Any], **kwargs: Any) -> int:
        if self.model is UsageLedger and not calls:
            calls.append(1)
            return 0
        calls.append(1)
        return real_update(self, **kwargs)

    monkeypatch.setattr(QuerySet, "update", first_update_misses)
    usage.ledger_add(user.pk, day, usage.UsageCounts(input_tokens=5, output_tokens=1, estimated=True))
    assert len(calls) == 2
    row = _row(user, day)
    assert (row.input_tokens, row.output_tokens, row.estimated_tokens, row.requests) == (15, 1, 6, 2)


# -- several worker processes ------------------------------------------------------------
def _run_workers(mode: str, user: Any, processes: int, count: int, **extra_env: str) -> list[str]:
    env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict),
           "DJANGO_SETTINGS_MODULE": "project.settings", **extra_env}
    workers = [subprocess.Popen([sys.executable, "-m", "tests.app.usage_worker", mode, str(user.pk), str(count)],
                                cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for _ in range(processes)]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "READY"
        for worker in workers:  # release them together
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        outputs = [worker.communicate(timeout=120)[0].strip() for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=10)
    assert all(worker.returncode == 0 for worker in workers), outputs
    return outputs


@pytest.mark.django_db(transaction=True)
def test_several_processes_add_up_exactly(user: Any) -> None:
    _run_workers("usage", user, processes=4, count=25)
    row = UsageLedger.objects.get(user=user)
    assert (row.input_tokens, row.output_tokens, row.requests) == (300, 200, 100)
    assert row.estimated_tokens == 4 * 12 * 5  # the odd-numbered requests of each worker


@pytest.mark.django_db(transaction=True)
def test_several_processes_never_admit_more_than_the_limit(user: Any) -> None:
    UserLimits.objects.create(user=user, turns_per_minute=7)
    outputs = _run_workers("turns", user, processes=4, count=5)
    admitted = sum(int(line.split()[1]) for line in outputs)
    refused = sum(int(line.split()[3]) for line in outputs)
    assert (admitted, refused) == (7, 13)
    assert TurnAdmission.objects.filter(user=user).count() == 7


@pytest.mark.django_db(transaction=True)
def test_several_processes_never_reserve_more_than_the_quota(user: Any) -> None:
    """Quota reservations across processes: with room for exactly 7 reservations of 100 + 300
    tokens, 4 processes asking 5 times each at once admit 7 (docs/security.md "Quota reservations")."""
    UserLimits.objects.create(user=user, turns_per_minute=0, tokens_per_day=7 * 400 + 399)
    outputs = _run_workers("quota", user, processes=4, count=5, JXAI_RESERVE_OUTPUT_TOKENS="300")
    admitted = sum(int(line.split()[1]) for line in outputs)
    refused = sum(int(line.split()[3]) for line in outputs)
    assert (admitted, refused) == (7, 13)
    assert list(TokenReservation.objects.filter(user=user).values_list("tokens", flat=True)) == [400] * 7


# -- admin ---------------------------------------------------------------------------------
@pytest.mark.django_db
def test_admin_usage_view_filters_by_user_and_day_with_totals(user: Any, other_user: Any, wall_clock: FakeClock,
                                                              django_user_model: Any) -> None:
    ratelimit.record_usage(user, {"inputTokens": 100, "outputTokens": 10}, estimated=False)
    ratelimit.record_usage(user, {"inputTokens": 30, "outputTokens": 3}, estimated=True)
    wall_clock.now += 24 * 3600
    ratelimit.record_usage(user, {"inputTokens": 1, "outputTokens": 1}, estimated=False)
    ratelimit.record_usage(other_user, {"inputTokens": 500, "outputTokens": 50}, estimated=False)
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", None))
    url = reverse("admin:jxai_app_usageledger_changelist")

    everything = client.get(url)
    assert everything.status_code == 200
    assert everything.context["totals"] == {"input_tokens": 631, "output_tokens": 64, "estimated_tokens": 33,
                                            "requests": 4, "total_tokens": 695, "failed_requests": 0,
                                            "cost_usd": 0, "estimated_cost_usd": 0}
    alice = client.get(url, {"user__id__exact": user.pk})
    assert alice.context["totals"]["total_tokens"] == 145
    body = alice.content.decode()
    table = body.split('id="result_list"')[1].split("</table>")[0]
    assert "33 (estimated)" in table and "alice" in table and "mallory" not in table
    one_day = client.get(url, {"user__id__exact": user.pk, "day__year": 2025, "day__month": 3, "day__day": 4})
    assert [(r.day, r.total_tokens) for r in one_day.context["cl"].result_list] == [(date(2025, 3, 4), 143)]
    assert client.get(reverse("admin:jxai_app_usageledger_add")).status_code == 403

    user_page = client.get(reverse("admin:auth_user_change", args=[user.pk])).content.decode()
    assert f'{url}?user__id__exact={user.pk}' in user_page
    assert f'{url}?user__id__exact={user.pk}' in client.get(reverse("admin:auth_user_changelist")).content.decode()
