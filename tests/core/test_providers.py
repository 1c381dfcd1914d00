"""The model registry (jxai_app.providers, SPEC §7): validation, lookup, listing, clients."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from jxai_app.errors import ConfigurationError, UnknownModelError
from jxai_app.providers import DEFAULT_CONTEXT_WINDOW, ModelConfig, ModelRegistry, ProviderConfig

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
        {"alias": "gpt", "label": "GPT-4o", "context_window": 128000, "supports_tools": True, "default": True},
        {"alias": "sonnet", "label": "sonnet", "context_window": 200000, "supports_tools": True, "default": False},
        {"alias": "tiny", "label": "tiny", "context_window": DEFAULT_CONTEXT_WINDOW, "supports_tools": False, "default": False},
        {"alias": "via-gw", "label": "via-gw", "context_window": 128000, "supports_tools": True, "default": False},
    ]
    text = json.dumps(listing)
    for secret in ("sk-secret-value", "JXAI_TEST_OPENAI_KEY", "https://", "http://", "anthropic-version", "gpt-4o-mini"):
        assert secret not in text


def test_building_a_client_needs_the_named_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JXAI_TEST_OPENAI_KEY", raising=False)
    registry = ModelRegistry.from_dict(CONFIG)
    with pytest.raises(ConfigurationError, match="Model 'gpt' needs an API key in the environment variable JXAI_TEST_OPENAI_KEY"):
        registry.build_client("gpt")
    with pytest.raises(UnknownModelError):
        registry.build_client("nope")
