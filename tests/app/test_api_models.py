"""``GET /ai/models`` (always 200) and the ``/problems/<slug>`` pages (docs/api.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import AsyncClient, Client

from jxai_app import conf
from jxai_app.core.problems import PROBLEM_TYPES
from tests.app.apisupport import SENTINEL_KEY, fake  # noqa: F401
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db


async def test_models_lists_aliases_without_keys_or_urls(fake: FakeProvider) -> None:
    response = await AsyncClient().get("/ai/models")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {
        "configured": True,
        "default": "fast",
        "models": [
            {"alias": "fast", "label": "Fast", "context_window": 4096, "supports_tools": True, "input": ["text", "image"], "default": True},
            {"alias": "plain", "label": "plain", "context_window": 8192, "supports_tools": False, "input": ["text", "image"], "default": False},
        ],
    }
    text = response.content.decode()
    for secret in (SENTINEL_KEY, "127.0.0.1", str(fake.port), "fake-model-1", "JXAI_TEST"):
        assert secret not in text


async def test_models_is_200_even_when_the_configuration_is_broken(settings: Any) -> None:
    settings.JXAI_MODELS = {"providers": {}, "models": {"x": {"provider": "missing", "model_id": "m"}}}
    conf.reset_caches()
    try:
        response = await AsyncClient().get("/ai/models")
    finally:
        conf.reset_caches()
    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["configured"] is False and body["models"] == [] and body["default"] is None
    assert "missing" not in body["message"]  # configuration details stay in the server log


async def test_models_refuses_other_methods(fake: FakeProvider) -> None:
    response = await AsyncClient().post("/ai/models")
    assert response.status_code == 405 and response["Allow"] == "GET"


@pytest.mark.parametrize("slug", sorted(PROBLEM_TYPES))
def test_every_problem_type_has_its_page(slug: str) -> None:
    response = Client().get(f"/problems/{slug}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    kind = PROBLEM_TYPES[slug]
    page = response.content.decode()
    assert f'data-testid="problem-title">{kind.title}<' in page
    assert f'data-testid="problem-status">{kind.status}<' in page
    assert kind.description.replace("'", "&#x27;") in page
    assert f"https://jxai.dev/problems/{slug}" in page
    assert "Content-Security-Policy" not in response or "'unsafe-inline'" not in response["Content-Security-Policy"]


def test_an_unknown_problem_type_is_404() -> None:
    assert Client().get("/problems/no-such-thing").status_code == 404


def test_the_index_lists_every_problem_type() -> None:
    response = Client().get("/problems/")
    page = response.content.decode()
    assert response.status_code == 200
    for slug in PROBLEM_TYPES:
        assert f'href="/problems/{slug}"' in page
