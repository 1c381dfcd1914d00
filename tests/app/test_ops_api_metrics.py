"""``POST /ai/chat`` in the metrics: its tokens and provider requests (docs/operations.md "Metrics")."""

from __future__ import annotations


import pytest
from django.test import AsyncClient
from prometheus_client import REGISTRY

from tests.app.apisupport import bearer, fake, post_chat, read_all, token  # noqa: F401
from tests.support.fake_provider import FakeProvider, Script, json_response, openai_text_stream

pytestmark = pytest.mark.django_db(transaction=True)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_ai_chat_counts_its_tokens_and_provider_requests(fake: FakeProvider, token: str) -> None:
    before = [sample("jxai_tokens_total", model="fast", direction="input"),
              sample("jxai_provider_requests_total", provider="fake", status="ok"),
              sample("jxai_provider_requests_total", provider="fake", status="error")]
    fake.add(Script(writes=openai_text_stream(["Hi."], usage={"prompt_tokens": 21, "completion_tokens": 2})),
             json_response(400, {"error": {"message": "bad"}}))
    for _ in range(2):
        await read_all(await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "hi"}]},
                                       bearer(token)))
    after = [sample("jxai_tokens_total", model="fast", direction="input"),
             sample("jxai_provider_requests_total", provider="fake", status="ok"),
             sample("jxai_provider_requests_total", provider="fake", status="error")]
    assert [a - b for a, b in zip(after, before)] == [21, 1, 1]
