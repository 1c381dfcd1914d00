"""Cost of model requests in USD, in the usage ledger beside the tokens, and the daily cost
limit (docs/operations.md "Cost")."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from genai_prices import Usage, calc_price

from jxai_app import conf
from jxai_app.core.errors import ProblemError
from jxai_app.models import UsageLedger, UserLimits
from jxai_app.policy import ratelimit
from jxai_app.policy.cost import request_cost
from jxai_app.policy.usage import UsageCounts
from tests.app.conftest import FakeClock
from tests.app.turns_support import Tab, text_script
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)

MILLION = UsageCounts(input_tokens=1_000_000, output_tokens=1_000_000)


def registry(settings: Any, base_url: str = "https://api.openai.com/v1", **extra_models: Any) -> None:
    settings.JXAI_MODELS = {
        "providers": {"openai": {"kind": "openai", "base_url": base_url, "api_key_env": None}},
        "models": {"mini": {"provider": "openai", "model_id": "gpt-4o-mini"}, **extra_models},
    }
    conf.reset_caches()


@pytest.fixture(autouse=True)
def _fresh_registry() -> Any:
    yield
    conf.reset_caches()


def test_a_known_model_costs_what_the_package_table_says(settings: Any) -> None:
    registry(settings)
    expected = calc_price(Usage(input_tokens=1_000_000, output_tokens=1_000_000), "gpt-4o-mini",
                          provider_id="openai").total_price
    assert expected > 0
    assert request_cost("mini", MILLION) == expected
    cached = UsageCounts(input_tokens=1_000_000, output_tokens=0, cached_input_tokens=1_000_000)
    assert request_cost("mini", cached) < request_cost("mini", UsageCounts(input_tokens=1_000_000))


def test_the_local_model_and_overrides_cost_what_the_registry_says(settings: Any) -> None:
    settings.JXAI_MODELS = conf.model_registry_dict_from_env({})  # the embedded local model
    conf.reset_caches()
    assert request_cost(conf.LOCAL_MODEL_ALIAS, MILLION) == 0
    assert request_cost(conf.LOCAL_CALCULATOR_ALIAS, MILLION) == 0

    registry(settings, own={"provider": "openai", "model_id": "gpt-4o-mini",
                            "price": {"input_per_mtok": 1.5, "output_per_mtok": 2, "cached_input_per_mtok": 0.5}})
    assert request_cost("own", UsageCounts(input_tokens=2_000_000, output_tokens=500_000,
                                           cached_input_tokens=1_000_000)) == Decimal("3.0")
    assert request_cost("no-such-model-anywhere", MILLION) == 0  # unpriced: logged, 0
    assert request_cost(None, MILLION) == 0


async def test_a_turn_writes_its_cost_beside_its_tokens_and_marks_estimates(
        user: Any, settings: Any, wall_clock: FakeClock) -> None:
    from asgiref.sync import sync_to_async

    with FakeProvider() as fake:
        registry(settings, base_url=fake.url)  # gpt-4o-mini behind a loopback URL: priced by its model id
        fake.add(text_script(["Hello."], usage={"prompt_tokens": 1000, "completion_tokens": 200}),
                 text_script(["No usage from this provider."]))
        for text in ("first", "second"):
            tab = await Tab(user).open()
            await tab.send(type="send", conversationId=None, text=text)
            await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
            await tab.close()

    row = await sync_to_async(UsageLedger.objects.get)(user=user, day=date(2025, 3, 4), model="mini")
    reported = request_cost("mini", UsageCounts(input_tokens=1000, output_tokens=200))
    assert reported > 0 and row.requests == 2 and row.estimated_tokens > 0
    assert row.estimated_cost_usd > 0
    assert row.cost_usd == reported + row.estimated_cost_usd
    estimated_tokens = row.input_tokens + row.output_tokens - 1200
    assert estimated_tokens == row.estimated_tokens


def test_the_daily_cost_limit_refuses_a_turn_once_reached(user: Any, settings: Any, wall_clock: FakeClock) -> None:
    registry(settings)
    settings.JXAI_COST_PER_DAY = "0.01"
    ratelimit.check_turn_allowed(user)
    ratelimit.record_usage(user, {"inputTokens": 10_000, "outputTokens": 10_000}, estimated=False, model="mini")
    assert ratelimit.record_usage(user, {"inputTokens": 1, "outputTokens": 1}, estimated=False, model=None) == 2
    ratelimit.check_turn_allowed(user)  # 10k in + 10k out of gpt-4o-mini: $0.0075 < $0.01
    ratelimit.record_usage(user, {"inputTokens": 10_000, "outputTokens": 10_000}, estimated=False, model="mini")
    with pytest.raises(ProblemError) as refused:
        ratelimit.check_turn_allowed(user)
    assert refused.value.slug == "quota-exceeded" and "$0.0150 of your $0.01" in str(refused.value.problem["detail"])

    UserLimits.objects.create(user=user, cost_per_day=Decimal("0"))  # 0 = unlimited for this user
    ratelimit.check_turn_allowed(user)
    rows = UsageLedger.objects.filter(user=user).order_by("model")
    assert [(r.model, r.requests) for r in rows] == [("", 1), ("mini", 2)]
