"""Per-user turns per minute and tokens per day on ``POST /ai/chat`` (docs/security.md, threat 3), and
the ratelimit module the websocket turn runner shares."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import AsyncClient

from jxai_app.policy import ratelimit
from jxai_app.core.errors import ProblemError
from jxai_app.models import UserLimits
from tests.app.apisupport import bearer, fake, frames, post_chat, problem_of, read_all, token  # noqa: F401
from tests.app.conftest import FakeClock
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream

pytestmark = pytest.mark.django_db(transaction=True)


async def _turn(token: str, fake: FakeProvider, usage: dict[str, int] | None = None) -> Any:
    fake.add(Script(writes=openai_text_stream(["fine"], usage=usage)))
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "hello there"}]},
                               bearer(token))
    if response.status_code == 200:
        await read_all(response)
    return response


async def test_turns_per_minute_refuses_with_retry_after(fake: FakeProvider, token: str, user: Any,
                                                         wall_clock: FakeClock) -> None:
    await UserLimits.objects.acreate(user=user, turns_per_minute=2)
    assert (await _turn(token, fake)).status_code == 200
    assert (await _turn(token, fake)).status_code == 200
    refused = await _turn(token, fake)
    assert refused.status_code == 429
    doc = problem_of(refused)
    assert doc["type"].endswith("/rate-limited") and doc["title"] == "Too many requests"
    # Two turns at NOON (wall_clock's start); the third fits once the first leaves the 60 s window (exact log).
    assert refused["Retry-After"] == "60" and doc["retry_after"] == 60
    assert len(fake.requests) == 2
    wall_clock.now += 59
    assert (await _turn(token, fake)).status_code == 429
    wall_clock.now += 1
    assert (await _turn(token, fake)).status_code == 200
    assert len(fake.requests) == 3


async def test_the_settings_default_applies_without_an_override(settings: Any, fake: FakeProvider, token: str,
                                                                wall_clock: FakeClock) -> None:
    settings.JXAI_TURNS_PER_MINUTE = 1
    assert (await _turn(token, fake)).status_code == 200
    assert (await _turn(token, fake)).status_code == 429


async def test_zero_means_unlimited(settings: Any, fake: FakeProvider, token: str, user: Any,
                                    wall_clock: FakeClock) -> None:
    settings.JXAI_TURNS_PER_MINUTE = 1
    await UserLimits.objects.acreate(user=user, turns_per_minute=0)
    for _ in range(3):
        assert (await _turn(token, fake)).status_code == 200


async def test_limits_are_per_user(fake: FakeProvider, token: str, user: Any, other_user: Any,
                                   wall_clock: FakeClock) -> None:
    from asgiref.sync import sync_to_async

    from jxai_app.models import ApiToken

    await UserLimits.objects.acreate(user=user, turns_per_minute=1)
    other_token = (await sync_to_async(ApiToken.issue)(user=other_user, name="m"))[1]
    assert (await _turn(token, fake)).status_code == 200
    assert (await _turn(token, fake)).status_code == 429
    assert (await _turn(other_token, fake)).status_code == 200


async def test_the_daily_quota_counts_reported_usage_and_renews_at_midnight(
    fake: FakeProvider, token: str, user: Any, wall_clock: FakeClock, no_answer_reserve: None,
) -> None:
    await UserLimits.objects.acreate(user=user, tokens_per_day=100)
    assert (await _turn(token, fake, usage={"prompt_tokens": 80, "completion_tokens": 30})).status_code == 200
    assert await database_sync_to_async(ratelimit.tokens_used_today)(user) == 110
    refused = await _turn(token, fake)
    assert refused.status_code == 429
    doc = problem_of(refused)
    assert doc["type"].endswith("/quota-exceeded")
    assert refused["Retry-After"] == str(12 * 3600) and "110 of your 100 tokens" in doc["detail"]
    wall_clock.now += 12 * 3600  # midnight UTC: a new day
    assert (await _turn(token, fake)).status_code == 200


async def test_estimated_usage_counts_when_the_provider_sends_none(fake: FakeProvider, token: str, user: Any,
                                                                   wall_clock: FakeClock) -> None:
    fake.add(Script(writes=openai_text_stream(["x" * 400])))
    payload = {"messages": [{"role": "user", "content": "y" * 800}]}
    response = await post_chat(AsyncClient(), payload, bearer(token))
    assert frames(await read_all(response))[-1]["type"] == "done"
    used = await database_sync_to_async(ratelimit.tokens_used_today)(user)
    # input ≈ the request's characters / 4 (800 chars of content plus the JSON around it),
    # output = 400 chars / 4
    assert 200 + 100 < used < 200 + 100 + 20


async def test_a_refusal_from_the_provider_costs_nothing(fake: FakeProvider, token: str, user: Any,
                                                         wall_clock: FakeClock) -> None:
    from tests.support.fake_provider import json_response

    fake.add(json_response(400, {"error": {"message": "bad"}}))
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "y" * 800}]}, bearer(token))
    assert frames(await read_all(response))[0]["code"] == "400"
    assert await database_sync_to_async(ratelimit.tokens_used_today)(user) == 0


def test_the_ledger_survives_a_cache_clear(user: Any, wall_clock: FakeClock) -> None:
    from django.core.cache import cache

    UserLimits.objects.create(user=user, tokens_per_day=1000)
    ratelimit.record_usage(user, {"inputTokens": 700, "outputTokens": 300}, estimated=True)
    cache.clear()  # a restart or an eviction: the database ledger still holds the figure
    with pytest.raises(ProblemError) as caught:
        ratelimit.check_turn_allowed(user)
    assert caught.value.slug == "quota-exceeded"
    assert ratelimit.tokens_used_today(user) == 1000


def test_a_refused_turn_takes_no_slot_and_quota_is_checked_first(user: Any, wall_clock: FakeClock,
                                                                 no_answer_reserve: None) -> None:
    from django.core.cache import cache

    cache.clear()
    UserLimits.objects.create(user=user, turns_per_minute=1, tokens_per_day=10)
    ratelimit.check_turn_allowed(user)
    for _ in range(3):
        with pytest.raises(ProblemError) as caught:
            ratelimit.check_turn_allowed(user)
        assert caught.value.slug == "rate-limited" and caught.value.status == 429
    assert ratelimit.turns_in_last_minute(user) == 1
    ratelimit.record_usage(user, {"inputTokens": 10, "outputTokens": 0}, estimated=False)
    wall_clock.now += 120
    with pytest.raises(ProblemError) as caught:
        ratelimit.check_turn_allowed(user)
    assert caught.value.slug == "quota-exceeded"
    assert ratelimit.turns_in_last_minute(user) == 0  # the quota refusal took no turn
