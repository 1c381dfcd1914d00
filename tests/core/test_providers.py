"""The model registry (jxai_app.core.providers; docs/architecture.md "Settings"): validation,
lookup, listing, clients."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from jxai_app.core.errors import ConfigurationError, UnknownModelError
from jxai_app.core.providers import DEFAULT_CONTEXT_WINDOW, ModelConfig, ModelRegistry, ProviderConfig
from jxai_app.core.streaming import (
    PROVIDER_PRESETS,
    AnthropicChatClient,
    ClientTimeouts,
    OpenAIChatClient,
    ProxyChatClient,
    ResponsesChatClient,
)
from tests.support.fake_provider import (
    FakeProvider, Script, anthropic_text_stream, openai_text_stream, proxy_stream, responses_text_stream,
)

CONFIG: dict[str, Any] = {
    "providers": {
        "openai": {"kind": "openai", "base_url": "https://api.openai.com/v1", "api_key_env": "JXAI_TEST_OPENAI_KEY"},
        "claude": {
            "kind": "anthropic",
            "base_url": "https://api.anthropic.com",
            "api_key_env": "JXAI_TEST_ANTHROPIC_KEY",
            "extra_headers": {"anthropic-version": "2023-06-01"},
        },
        "local": {"kind": "openai", "base_url": "http://127.0.0.1:8080/v1", "api_key_env": None},
        "gateway": {"kind": "proxy", "base_url": "https://gw.example/ai/chat", "api_base_url": "https://up.example/v1"},
    },
    "models": {
        "gpt": {"provider": "openai", "model_id": "gpt-4o", "context_window": 128000, "label": "GPT-4o", "temperature": 0.2},
        "sonnet": {"provider": "claude", "model_id": "claude-sonnet-4", "context_window": 200000, "max_tokens": 2048},
        "tiny": {"provider": "local", "model_id": "gemma", "supports_tools": False, "tool_choice": "none"},
        "via-gw": {"provider": "gateway", "model_id": "gpt-4o-mini", "context_window": 128000},
    },
    "roles": {"default": "gpt", "summary": "tiny"},
}


def config(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(CONFIG)
    for path, value in changes.items():
        node = data
        *parents, last = path.split("__")
        for part in parents:
            node = node[part]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return data


def test_a_full_configuration_builds() -> None:
    registry = ModelRegistry.from_dict(CONFIG)
    assert registry.aliases() == ["gpt", "sonnet", "tiny", "via-gw"]
    assert registry.get("gpt") == ModelConfig(
        alias="gpt", provider="openai", model_id="gpt-4o", context_window=128000, supports_tools=True,
        tool_choice=None, temperature=0.2, label="GPT-4o", max_tokens=None,
    )
    tiny = registry.get("tiny")
    assert (tiny.context_window, tiny.supports_tools, tiny.tool_choice) == (DEFAULT_CONTEXT_WINDOW, False, "none")
    assert registry.for_role("default").alias == "gpt"
    assert registry.for_role("summary").alias == "tiny"
    assert registry.roles() == {"default": "gpt", "summary": "tiny"}
    assert registry.resolve(None).alias == registry.resolve("").alias == "gpt"
    assert registry.resolve("sonnet").alias == "sonnet"
    claude = registry.provider("claude")
    assert claude.kind == "anthropic" and dict(claude.extra_headers) == {"anthropic-version": "2023-06-01"}
    assert registry.provider("gateway").api_base_url == "https://up.example/v1"


def test_default_role_falls_back_to_the_first_model() -> None:
    registry = ModelRegistry.from_dict(config(roles=KeyError))
    assert registry.default_alias == "gpt" and registry.roles() == {"default": "gpt"}


def test_unknown_alias_and_role_give_clear_errors() -> None:
    registry = ModelRegistry.from_dict(CONFIG)
    with pytest.raises(UnknownModelError) as info:
        registry.get("gpt-5")
    assert str(info.value) == "Unknown model 'gpt-5'; known models: gpt, sonnet, tiny, via-gw."
    assert isinstance(info.value, ConfigurationError) and isinstance(info.value, KeyError)
    with pytest.raises(UnknownModelError, match=r"No model is configured for role 'coding'; configured roles: default, summary\."):
        registry.for_role("coding")
    with pytest.raises(UnknownModelError, match="Unknown model 'nope'"):
        registry.resolve("nope")
    with pytest.raises(ConfigurationError, match="Unknown provider 'x'"):
        registry.provider("x")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"models__gpt__provider": "azure"}, "models.gpt.provider: unknown provider 'azure'; known providers: openai, claude, local, gateway"),
        ({"roles__default": "gpt-5"}, "roles.default: unknown model alias 'gpt-5'"),
        ({"models__gpt__context_window": 0}, "models.gpt.context_window: 0 is less than the minimum of 1"),
        ({"models__gpt__context_window": "128k"}, "models.gpt.context_window: '128k' is not of type 'integer'"),
        ({"models__gpt__supports_tools": "yes"}, "models.gpt.supports_tools: 'yes' is not of type 'boolean'"),
        ({"models__gpt__temperature": 3}, "models.gpt.temperature: 3 is greater than the maximum of 2"),
        ({"models__gpt__tool_choice": "sometimes"}, "models.gpt.tool_choice"),
        ({"models__gpt__tool_choice_when": "(12"}, "models.gpt.tool_choice_when: '(12' is not a regular expression (missing ), unterminated subpattern"),
        ({"models__gpt__strip_leading_whitespace": "yes"}, "models.gpt.strip_leading_whitespace: 'yes' is not of type 'boolean'"),
        ({"providers__openai__unreachable_message": ""}, "providers.openai.unreachable_message: '' should be non-empty"),
        ({"models__gpt__model_id": KeyError}, "models.gpt: 'model_id' is a required property"),
        ({"models__gpt__context_windw": 5}, "models.gpt: unknown key(s) 'context_windw'"),
        ({"providers__openai__kind": "gemini"}, "providers.openai.kind: 'gemini' is not one of"),
        ({"providers__openai__base_url": "api.openai.com"}, "providers.openai.base_url: 'api.openai.com' is not an http(s) URL with a host"),
        ({"providers__openai__base_url": "file:///etc/passwd"}, "is not an http(s) URL with a host"),
        ({"providers__openai__api_key_env": "sk-live-123"}, "providers.openai.api_key_env: 'sk-live-123' is not an environment variable name"),
        ({"providers__openai__extra_headers": {"X": 1}}, "providers.openai.extra_headers.X: 1 is not of type 'string'"),
        ({"providers__openai__kind": KeyError}, "providers.openai: 'kind' is required (or name a preset)"),
        ({"providers__local__api_base_url": "https://x.example"}, "providers.local.api_base_url: only a proxy provider takes one"),
        ({"models": {}}, "models: no models are configured"),
        ({"providers": KeyError}, "the configuration: 'providers' is a required property"),
        ({"extra": 1}, "the configuration: unknown key(s) 'extra'"),
        ({"models__bad alias": {"provider": "openai", "model_id": "x"}}, "the name 'bad alias' must be letters"),
    ],
)
def test_malformed_configurations_are_refused_with_the_path(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        ModelRegistry.from_dict(config(**changes))
    assert message in str(info.value)
    assert str(info.value).startswith("model configuration")


def test_several_problems_are_reported_together() -> None:
    with pytest.raises(ConfigurationError) as info:
        ModelRegistry.from_dict(config(models__gpt__context_window=-5, models__tiny__supports_tools=1))
    assert "models.gpt.context_window" in str(info.value) and "models.tiny.supports_tools" in str(info.value)


def test_not_a_dict_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="must be an object, got list"):
        ModelRegistry.from_dict([])  # type: ignore[arg-type]


def test_presets_fill_in_provider_defaults_and_entries_override_them() -> None:
    presets = {
        "openrouter": {
            "kind": "openai",
            "base_url": "https://openrouter.ai/api/v1",
            "api_key_env": "OPENROUTER_API_KEY",
            "extra_headers": {"HTTP-Referer": "https://jxai.example", "X-Title": "jxai"},
        }
    }
    data = {
        "providers": {"or": {"preset": "openrouter", "extra_headers": {"X-Title": "mine"}}},
        "models": {"m": {"provider": "or", "model_id": "meta/llama"}},
    }
    provider = ModelRegistry.from_dict(data, presets=presets).provider("or")
    assert provider == ProviderConfig(
        name="or", kind="openai", base_url="https://openrouter.ai/api/v1", api_key_env="OPENROUTER_API_KEY",
        extra_headers={"HTTP-Referer": "https://jxai.example", "X-Title": "mine"},
    )
    data["providers"]["or"]["preset"] = "nope"
    with pytest.raises(ConfigurationError, match="providers.or.preset: unknown preset 'nope'; known presets: openrouter"):
        ModelRegistry.from_dict(data, presets=presets)


def test_the_key_is_read_from_the_environment_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = ModelRegistry.from_dict(CONFIG)
    provider = registry.provider("openai")
    monkeypatch.delenv("JXAI_TEST_OPENAI_KEY", raising=False)
    assert provider.api_key is None
    monkeypatch.setenv("JXAI_TEST_OPENAI_KEY", "sk-first")
    assert provider.api_key == "sk-first"
    monkeypatch.setenv("JXAI_TEST_OPENAI_KEY", "sk-rotated")
    assert provider.api_key == "sk-rotated"
    assert registry.provider("local").api_key is None


def test_public_listing_shows_no_keys_or_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JXAI_TEST_OPENAI_KEY", "sk-secret-value")
    listing = ModelRegistry.from_dict(CONFIG).public_listing()
    assert listing == [
        {"alias": "gpt", "label": "GPT-4o", "context_window": 128000, "supports_tools": True, "input": ["text", "image"], "default": True},
        {"alias": "sonnet", "label": "sonnet", "context_window": 200000, "supports_tools": True, "input": ["text", "image"], "default": False},
        {"alias": "tiny", "label": "tiny", "context_window": DEFAULT_CONTEXT_WINDOW, "supports_tools": False, "input": ["text", "image"], "default": False},
        {"alias": "via-gw", "label": "via-gw", "context_window": 128000, "supports_tools": True, "input": ["text", "image"], "default": False},
    ]
    text = json.dumps(listing)
    for secret in ("sk-secret-value", "JXAI_TEST_OPENAI_KEY", "https://", "http://", "anthropic-version", "gpt-4o-mini"):
        assert secret not in text


def loopback_config(fake: FakeProvider) -> dict[str, Any]:
    return {
        "providers": {
            "oa": {"kind": "openai", "base_url": fake.url, "api_key_env": "JXAI_TEST_OPENAI_KEY", "extra_headers": {"X-Org": "jx"}},
            "an": {"kind": "anthropic", "base_url": fake.url, "api_key_env": "JXAI_TEST_ANTHROPIC_KEY"},
            "px": {"kind": "proxy", "base_url": fake.base + "/ai/chat", "api_key_env": "JXAI_TEST_PROXY_TOKEN",
                   "api_base_url": "https://up.example/v1"},
        },
        "models": {
            "gpt": {"provider": "oa", "model_id": "gpt-4o", "temperature": 0, "tool_choice": "required", "max_tokens": 99},
            "sonnet": {"provider": "an", "model_id": "claude-sonnet-4", "max_tokens": 321, "temperature": 0.5},
            "haiku": {"provider": "an", "model_id": "claude-haiku"},
            "gw": {"provider": "px", "model_id": "upstream-model"},
        },
    }


async def collect(client: Any, tools: list[dict[str, Any]] | None = None) -> list[Any]:
    return [e async for e in client.stream_chat([{"role": "user", "content": "hi"}], tools, "be brief")]


TOOL = {"type": "function", "function": {"name": "calculate", "description": "", "parameters": {"type": "object"}}}


async def test_build_client_openai_sends_model_key_headers_and_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JXAI_TEST_OPENAI_KEY", "sk-loop")
    with FakeProvider([Script(writes=openai_text_stream(["he", "llo"]))]) as fake:
        client = ModelRegistry.from_dict(loopback_config(fake)).build_client("gpt")
        assert isinstance(client, OpenAIChatClient)
        events = await collect(client, [TOOL])
    assert "".join(e.content for e in events if e.type == "delta") == "hello"
    assert events[-1].type == "done"
    request = fake.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-loop"
    assert request.headers["x-org"] == "jx"
    body = request.json
    assert (body["model"], body["temperature"], body["tool_choice"], body["max_tokens"]) == ("gpt-4o", 0, "required", 99)


async def test_build_client_anthropic_uses_model_max_tokens_or_4096(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JXAI_TEST_ANTHROPIC_KEY", "ak-loop")
    with FakeProvider([Script(writes=anthropic_text_stream(["ok"])), Script(writes=anthropic_text_stream(["ok"]))]) as fake:
        registry = ModelRegistry.from_dict(loopback_config(fake))
        sonnet, haiku = registry.build_client("sonnet"), registry.build_client("haiku")
        assert isinstance(sonnet, AnthropicChatClient)
        assert (await collect(sonnet))[-1].type == "done"
        assert (await collect(haiku))[-1].type == "done"
    first, second = fake.requests
    assert first.path == "/v1/messages" and first.headers["x-api-key"] == "ak-loop"
    assert (first.json["model"], first.json["max_tokens"], first.json["temperature"]) == ("claude-sonnet-4", 321, 0.5)
    assert (second.json["model"], second.json["max_tokens"]) == ("claude-haiku", 4096)
    assert "temperature" not in second.json


async def test_the_reserved_answer_is_the_output_limit_unless_the_models_own_is_lower() -> None:
    scripts = [Script(writes=anthropic_text_stream(["ok"])) for _ in range(3)]
    with FakeProvider(scripts) as fake:
        registry = ModelRegistry.from_dict(loopback_config(fake))
        for alias, reserved in (("sonnet", 200), ("sonnet", 4096), ("haiku", 5000)):
            assert (await collect(registry.build_client(alias, max_output_tokens=reserved)))[-1].type == "done"
    assert [r.json["max_tokens"] for r in fake.requests] == [200, 321, 5000]


async def test_build_client_proxy_posts_to_the_chat_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JXAI_TEST_PROXY_TOKEN", "jx-token")
    answer = proxy_stream([{"type": "delta", "content": "hi"}, {"type": "done", "stopReason": "stop"}])
    with FakeProvider([Script(writes=answer)]) as fake:
        client = ModelRegistry.from_dict(loopback_config(fake)).build_client("gw")
        assert isinstance(client, ProxyChatClient)
        events = await collect(client)
    assert [e.type for e in events] == ["delta", "done"]
    request = fake.requests[0]
    assert request.path == "/ai/chat"
    assert request.headers["x-api-key"] == "jx-token"
    assert request.headers["x-api-base-url"] == "https://up.example/v1"
    assert request.json["model"] == "upstream-model"


async def test_build_client_passes_timeouts_and_transport_and_reads_the_key_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = b"".join(openai_text_stream(["x"]))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    registry = ModelRegistry.from_dict(CONFIG)
    timeouts = ClientTimeouts(connect=1.0, first_byte=2.0, idle=3.0)
    monkeypatch.delenv("JXAI_TEST_OPENAI_KEY", raising=False)
    keyless = registry.build_client("gpt", timeouts=timeouts, transport=httpx.MockTransport(handler))
    assert keyless.timeouts is timeouts
    monkeypatch.setenv("JXAI_TEST_OPENAI_KEY", "sk-later")
    keyed = registry.build_client("gpt", transport=httpx.MockTransport(handler))
    assert keyed.timeouts == ClientTimeouts()
    assert (await collect(keyless))[-1].type == "done"
    assert (await collect(keyed))[-1].type == "done"
    assert "authorization" not in seen[0].headers
    assert seen[1].headers["authorization"] == "Bearer sk-later"
    assert str(seen[1].url) == "https://api.openai.com/v1/chat/completions"
    with pytest.raises(UnknownModelError):
        registry.build_client("nope")


def test_the_streaming_presets_are_usable_by_name() -> None:
    data = {"providers": {"p": {"preset": "openrouter"}}, "models": {"m": {"provider": "p", "model_id": "x/y"}}}
    provider = ModelRegistry.from_dict(data).provider("p")
    assert provider.kind == PROVIDER_PRESETS["openrouter"].kind
    assert provider.base_url == PROVIDER_PRESETS["openrouter"].base_url
    assert dict(provider.extra_headers) == dict(PROVIDER_PRESETS["openrouter"].extra_headers)
    assert provider.api_key_env == PROVIDER_PRESETS["openrouter"].api_key_env


async def test_the_openai_responses_preset_builds_the_responses_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-resp")
    with FakeProvider([Script(writes=responses_text_stream(["hi"]))]) as fake:
        data = {"providers": {"r": {"preset": "openai-responses", "base_url": fake.url}},
                "models": {"m": {"provider": "r", "model_id": "gpt-5-mini", "reasoning_effort": "low",
                                 "max_tokens": 64, "tool_choice": "required"}}}
        client = ModelRegistry.from_dict(data).build_client("m")
        assert isinstance(client, ResponsesChatClient)
        events = await collect(client, [TOOL])
    assert [e.type for e in events] == ["delta", "done"]
    request = fake.requests[0]
    assert request.path == "/v1/responses" and request.headers["authorization"] == "Bearer sk-resp"
    body = request.json
    assert (body["model"], body["store"], body["max_output_tokens"], body["tool_choice"]) == (
        "gpt-5-mini", False, 64, "required")
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}


async def test_the_gemini_preset_sends_reasoning_effort_to_chat_completions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "g-key")
    assert PROVIDER_PRESETS["gemini"].base_url == "https://generativelanguage.googleapis.com/v1beta/openai"
    with FakeProvider([Script(writes=openai_text_stream(["ok"]))]) as fake:
        data = {"providers": {"g": {"preset": "gemini", "base_url": fake.url}},
                "models": {"flash": {"provider": "g", "model_id": "gemini-2.5-flash", "reasoning_effort": "none"}}}
        client = ModelRegistry.from_dict(data).build_client("flash")
        assert isinstance(client, OpenAIChatClient)
        assert (await collect(client))[-1].type == "done"
    request = fake.requests[0]
    assert request.path == "/v1/chat/completions" and request.headers["authorization"] == "Bearer g-key"
    assert request.json["reasoning_effort"] == "none"
