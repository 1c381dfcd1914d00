"""Shared fixtures and helpers for the HTTP API tests (``test_api*.py``, ``test_ssrf.py``).

The provider is a real :class:`~tests.support.fake_provider.FakeProvider` on 127.0.0.1,
configured through ``settings.JXAI_MODELS`` + ``conf.reset_caches()``; its key is a sentinel
that must never appear in anything jxai sends back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, Mapping

import pytest
from django.core.cache import cache
from django.test import AsyncClient

from jxai_app import conf
from jxai_app.models import ApiToken
from tests.support.fake_provider import FakeProvider

SENTINEL_KEY = "sk-SENTINEL-4f9c2a7e1b3d5f60-provider-key"
"""The configured provider key; no response body, frame or log line may contain it."""
KEY_ENV = "JXAI_TEST_API_PROVIDER_KEY"
CHAT = "/ai/chat"


def models_config(fake: FakeProvider) -> dict[str, Any]:
    """Two models on the fake provider: ``fast`` (default, tools) and ``plain`` (no tools)."""
    return {
        "providers": {"fake": {"kind": "openai", "base_url": fake.url, "api_key_env": KEY_ENV}},
        "models": {
            "fast": {"provider": "fake", "model_id": "fake-model-1", "context_window": 4096, "label": "Fast"},
            "plain": {"provider": "fake", "model_id": "fake-model-2", "supports_tools": False},
        },
        "roles": {"default": "fast"},
    }


@pytest.fixture
def fake(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    """A started fake provider wired in as the configured models; caches reset around it."""
    with FakeProvider() as provider:
        monkeypatch.setenv(KEY_ENV, SENTINEL_KEY)
        settings.JXAI_MODELS = models_config(provider)
        settings.JXAI_UPSTREAM_RETRIES = 2
        settings.JXAI_FIRST_BYTE_TIMEOUT = 10
        settings.JXAI_IDLE_TIMEOUT = 10
        conf.reset_caches()
        cache.clear()
        yield provider
    conf.reset_caches()
    cache.clear()


@pytest.fixture
def token(user: Any) -> str:
    """A plaintext API token of ``user`` (alice)."""
    return ApiToken.issue(user=user, name="tests")[1]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def body_of(payload: Any) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()


async def post_chat(client: AsyncClient, payload: Any, headers: Mapping[str, str] | None = None) -> Any:
    """POST ``payload`` (bytes as is, anything else as JSON) to ``/ai/chat``."""
    return await client.post(CHAT, data=body_of(payload), content_type="application/json", headers=dict(headers or {}))


async def read_all(response: Any) -> bytes:
    """The whole body of a (streaming or not) response; asserts the provider key is not in it
    (so every test that reads a body also checks that the key stays on the server)."""
    if getattr(response, "streaming", False):
        raw = b"".join([chunk async for chunk in response.streaming_content])
    else:
        raw = bytes(response.content)
    assert SENTINEL_KEY.encode() not in raw
    return raw


def frames(raw: bytes) -> list[dict[str, Any]]:
    """The events of an SSE body made of ``data: <json>\\n\\n`` frames (asserts that shape)."""
    text = raw.decode("utf-8")
    assert text.endswith("\n\n")
    out = []
    for block in text[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, block
        out.append(json.loads(block[len("data: "):]))
    return out


def problem_of(response: Any) -> dict[str, Any]:
    """The problem document of a refusal (asserts the content type)."""
    assert response["Content-Type"] == "application/problem+json"
    assert SENTINEL_KEY.encode() not in response.content
    return json.loads(response.content)


async def aiter_chunks(response: Any) -> AsyncIterator[bytes]:
    async for chunk in response.streaming_content:
        yield chunk
