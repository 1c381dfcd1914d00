"""The model registry's configuration: the plain dict, its validation, and the records it
becomes (docs/architecture.md "Settings"; the README's "Configuration"). Framework-free: no
Django import.

The dict::

    {
      "providers": {
        "<name>": {
          "preset": "openai",            # optional: fills the fields below from
                                         # jxai_app.core.streaming.PROVIDER_PRESETS
          "kind": "openai" | "openai-responses" | "anthropic" | "proxy",
          "base_url": "https://…",       # API root; for "proxy", the chat URL
          "api_key_env": "OPENAI_API_KEY" | null,   # the key is read at client build time
          "extra_headers": {"Header": "value"},
          "api_base_url": "https://…",   # "proxy" only: the upstream base URL to ask for
          "unreachable_message": "…"     # optional: what users read when it cannot be reached
        }
      },
      "models": {
        "<alias>": {
          "provider": "<name>", "model_id": "gpt-4o",
          "context_window": 128000,      # tokens (default DEFAULT_CONTEXT_WINDOW)
          "supports_tools": true,        # default true
          "input": ["text", "image"],    # what a message may carry (default text and image;
                                         # "file": documents go as file parts; docs/attachments.md)
          "tool_choice": "auto" | "none" | "required" | {…},  # optional
          "tool_choice_when": "<regex>", # optional: force tool_choice only on user messages it is found in
          "temperature": 0.2,            # optional; omitted = not sent (reasoning models)
          "max_tokens": 4096,            # optional
          "reasoning_effort": "low",     # optional; openai and openai-responses kinds only
          "strip_leading_whitespace": false,  # optional; openai and openai-responses kinds only
          "label": "GPT-4o",             # optional, for people
          "price": {"input_per_mtok": 0, "output_per_mtok": 0}   # optional: USD per million
                                         # tokens (cached_input_per_mtok too), instead of the
                                         # genai-prices table (self-hosted models: 0)
        }
      },
      "roles": {"default": "<alias>", "<role>": "<alias>"}   # default: the first model
    }

:func:`parse_config` validates it (JSON Schema first, so every shape problem is named with its
path, then URLs and presets) and builds the :class:`ProviderConfig` and :class:`ModelConfig`
records; :class:`~jxai_app.core.providers.ModelRegistry` checks how they refer to each other.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from jxai_app.core.errors import ConfigurationError
from jxai_app.core.streaming.presets import PROVIDER_PRESETS

__all__ = ["DEFAULT_CONTEXT_WINDOW", "DEFAULT_INPUT", "ModelConfig", "ProviderConfig", "ProviderKind", "parse_config"]

ProviderKind = Literal["openai", "openai-responses", "anthropic", "proxy"]
_KINDS: tuple[str, ...] = get_args(ProviderKind)
DEFAULT_CONTEXT_WINDOW = 8192
"""Tokens assumed for a model whose ``context_window`` is not configured (conservative)."""
DEFAULT_INPUT: tuple[str, ...] = ("text", "image")
"""What a model takes in a message when its ``input`` is not configured (docs/attachments.md
"Model input")."""

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_PROVIDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "preset": {"type": "string", "minLength": 1},
        "kind": {"enum": list(_KINDS)},
        "base_url": {"type": "string", "minLength": 1},
        "api_key_env": {"type": ["string", "null"], "pattern": _ENV_NAME},
        "extra_headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "api_base_url": {"type": ["string", "null"]},
        "unreachable_message": {"type": ["string", "null"], "minLength": 1},
    },
    "additionalProperties": False,
}
_MODEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "provider": {"type": "string", "minLength": 1},
        "model_id": {"type": "string", "minLength": 1},
        "context_window": {"type": "integer", "minimum": 1},
        "supports_tools": {"type": "boolean"},
        "input": {"type": "array", "items": {"enum": ["text", "image", "file"]}, "contains": {"const": "text"},
                  "uniqueItems": True},
        "tool_choice": {
            "anyOf": [{"enum": ["auto", "none", "required"]}, {"type": "object"}, {"type": "null"}]
        },
        "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
        "max_tokens": {"type": ["integer", "null"], "minimum": 1},
        "reasoning_effort": {"type": ["string", "null"], "minLength": 1},
        "tool_choice_when": {"type": ["string", "null"], "minLength": 1},
        "strip_leading_whitespace": {"type": "boolean"},
        "label": {"type": ["string", "null"]},
        "price": {
            "type": "object",
            "properties": {key: {"type": "number", "minimum": 0} for key in (
                "input_per_mtok", "output_per_mtok", "cached_input_per_mtok")},
            "required": ["input_per_mtok", "output_per_mtok"],
            "additionalProperties": False,
        },
    },
    "required": ["provider", "model_id"],
    "additionalProperties": False,
}
_CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "providers": {"type": "object", "propertyNames": {"pattern": _NAME}, "additionalProperties": _PROVIDER_SCHEMA},
        "models": {
            "type": "object",
            "propertyNames": {"pattern": _NAME},
            "additionalProperties": _MODEL_SCHEMA,
            "minProperties": 1,
        },
        "roles": {
            "type": "object",
            "propertyNames": {"pattern": _NAME},
            "additionalProperties": {"type": "string"},
        },
    },
    "required": ["providers", "models"],
    "additionalProperties": False,
}
_VALIDATOR = Draft202012Validator(_CONFIG_SCHEMA)


@dataclass(frozen=True)
class ProviderConfig:
    """One provider endpoint.

    Attributes:
        name: the provider's name in the configuration.
        kind: which streaming client speaks to it (``openai``-compatible chat completions,
            ``openai-responses`` for OpenAI's Responses API, ``anthropic``, ``proxy``).
        base_url: the API root (``…/v1`` for OpenAI-compatible); for ``proxy`` the chat URL.
        api_key_env: the environment variable holding the key, or ``None`` for no key.
        extra_headers: headers added to every request.
        api_base_url: ``proxy`` only: the upstream base URL the proxy should use.
        unreachable_message: what a user is told when no connection to it can be made
            (``None``: ``Network error: …``); e.g. which local server to start.
    """

    name: str
    kind: ProviderKind
    base_url: str
    api_key_env: str | None = None
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    api_base_url: str | None = None
    unreachable_message: str | None = None

    @property
    def api_key(self) -> str | None:
        """The key, read from ``api_key_env`` now (``None`` when unnamed or unset/empty)."""
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env) or None


@dataclass(frozen=True)
class ModelConfig:
    """One model the deployment offers under an alias.

    Attributes:
        alias: the name users and the API pick it by.
        provider: the name of its ``ProviderConfig``.
        model_id: the provider's own model id (sent upstream).
        context_window: its context window, in tokens.
        supports_tools: whether tools may be sent to it.
        tool_choice: the ``tool_choice`` to send with tools (``None`` = ``auto``); used by
            the ``openai`` and ``openai-responses`` kinds only.
        temperature: sent when set; ``None`` = not sent (reasoning models reject it).
        label: a name for people (``None`` = the alias).
        max_tokens: the output token cap sent upstream, or ``None``.
        reasoning_effort: how hard a reasoning model thinks (``"low"``, ``"medium"``, …), sent
            by the ``openai`` kind as ``reasoning_effort`` and by ``openai-responses`` as
            ``reasoning.effort``; ``None`` = not sent (models without reasoning reject it).
        price: USD per million tokens (``input_per_mtok``, ``output_per_mtok``, optionally
            ``cached_input_per_mtok``) overriding the published price table; ``None`` = the
            table (docs/operations.md "Cost").
        tool_choice_when: a regular expression (Python syntax): a forcing ``tool_choice``
            applies only to a user message it is found in, other messages get ``auto``
            (``None`` = every user message); ``openai`` and ``openai-responses`` kinds only.
        strip_leading_whitespace: drop the whitespace each answer's text starts with (a model
            whose answers start with a space); ``openai`` and ``openai-responses`` kinds only.
        input: what a user message may carry: ``"text"`` always, ``"image"`` (image parts),
            ``"file"`` (documents as file parts instead of extracted text); docs/attachments.md
            "Model input".
    """

    alias: str
    provider: str
    model_id: str
    context_window: int = DEFAULT_CONTEXT_WINDOW
    supports_tools: bool = True
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = None
    label: str | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    price: Mapping[str, float] | None = None
    tool_choice_when: str | None = None
    strip_leading_whitespace: bool = False
    input: tuple[str, ...] = DEFAULT_INPUT

    def takes(self, kind: str) -> bool:
        """Whether a user message to this model may carry ``kind`` (``"image"``, ``"file"``)."""
        return kind in self.input

    def refused_input(self, messages: list[dict[str, Any]]) -> str | None:
        """Why ``messages`` (OpenAI wire) cannot go to this model, or ``None`` when they can:
        an ``image_url`` part for a model whose ``input`` lacks ``"image"``, a ``file`` part for
        one whose ``input`` lacks ``"file"`` (docs/attachments.md "Model input")."""
        sent = {part.get("type") for message in messages if isinstance(message.get("content"), list)
                for part in message["content"] if isinstance(part, dict)}
        name = f"{self.label or self.alias} ({self.alias})"
        if "image_url" in sent and not self.takes("image"):
            return (f"The model {name} takes text only, not images; "
                    "pick a model that takes images, or remove the image.")
        if "file" in sent and not self.takes("file"):
            return f"The model {name} takes no file parts; send the file's text, or pick a model that takes files."
        return None


def _where(error: ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "the configuration"


def _schema_sentence(error: ValidationError) -> str:
    where = _where(error)
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = sorted((error.schema.get("properties") or {}) if isinstance(error.schema, Mapping) else ())
        extra = sorted(set(error.instance) - set(known)) if isinstance(error.instance, Mapping) else []
        return f"{where}: unknown key(s) {', '.join(map(repr, extra))}; allowed: {', '.join(known)}"
    if "propertyNames" in error.absolute_schema_path:
        return f"{where}: the name {error.instance!r} must be letters, digits and . _ : @ / + - (at most 128)"
    if error.validator == "minProperties" and where == "models":
        return "models: no models are configured"
    if error.validator == "pattern" and where.endswith("api_key_env"):
        return f"{where}: {error.instance!r} is not an environment variable name"
    return f"{where}: {error.message}"


def _check_url(where: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"model configuration: {where}: {url!r} is not an http(s) URL with a host")


def _preset_fields(name: str, preset_name: str, presets: Mapping[str, Any] | None) -> dict[str, Any]:
    if presets is None:
        presets = PROVIDER_PRESETS
    if preset_name not in presets:
        raise ConfigurationError(
            f"model configuration: providers.{name}.preset: unknown preset {preset_name!r}; "
            f"known presets: {', '.join(sorted(presets)) or '(none)'}"
        )
    preset = presets[preset_name]
    out: dict[str, Any] = {}
    for key in ("kind", "base_url", "api_key_env", "extra_headers"):
        value = preset.get(key) if isinstance(preset, Mapping) else getattr(preset, key, None)
        if value is not None:
            out[key] = dict(value) if key == "extra_headers" else value
    return out


def _pattern(alias: str, pattern: str | None) -> str | None:
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigurationError(f"model configuration: models.{alias}.tool_choice_when: {pattern!r} is not a "
                                     f"regular expression ({exc})") from None
    return pattern


def _provider(name: str, raw: Mapping[str, Any], presets: Mapping[str, Any] | None) -> ProviderConfig:
    merged = _preset_fields(name, raw["preset"], presets) if "preset" in raw else {}
    headers = {**merged.get("extra_headers", {}), **raw.get("extra_headers", {})}
    merged.update({k: v for k, v in raw.items() if k != "preset"})
    merged["extra_headers"] = headers
    for key in ("kind", "base_url"):
        if not merged.get(key):
            raise ConfigurationError(f"model configuration: providers.{name}: {key!r} is required (or name a preset)")
    if merged["kind"] not in _KINDS:
        raise ConfigurationError(f"model configuration: providers.{name}.kind: {merged['kind']!r} is not one of "
                                 f"{', '.join(_KINDS)}")
    _check_url(f"providers.{name}.base_url", merged["base_url"])
    if merged.get("api_base_url") is not None:
        if merged["kind"] != "proxy":
            raise ConfigurationError(f"model configuration: providers.{name}.api_base_url: only a proxy provider takes one")
        _check_url(f"providers.{name}.api_base_url", merged["api_base_url"])
    return ProviderConfig(
        name=name,
        kind=merged["kind"],
        base_url=merged["base_url"],
        api_key_env=merged.get("api_key_env"),
        extra_headers=MappingProxyType(headers),
        api_base_url=merged.get("api_base_url"),
        unreachable_message=merged.get("unreachable_message"),
    )


def parse_config(
    data: Mapping[str, Any], *, presets: Mapping[str, Any] | None = None
) -> tuple[dict[str, ProviderConfig], dict[str, ModelConfig], dict[str, str]]:
    """Validate the registry dict (module docstring) and build its records.

    Args:
        data: ``{"providers": {…}, "models": {…}, "roles": {…}}``; ``roles`` is optional
            and ``roles.default`` defaults to the first model.
        presets: preset name → preset (mapping or object with ``kind``, ``base_url``,
            ``extra_headers``, ``api_key_env``); default ``jxai_app.core.streaming.PROVIDER_PRESETS``,
            imported only when a provider names a preset.

    Returns:
        ``(providers, models, roles)``: name → ``ProviderConfig``, alias → ``ModelConfig``
        (configuration order), role → alias (with ``default``). References between them
        (a model's provider, a role's alias) are not checked here.

    Raises:
        ConfigurationError: the dict is malformed; the message names the path of every
            problem (e.g. ``models.gpt.context_window: 0 is less than the minimum of 1``).
    """
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"model configuration must be an object, got {type(data).__name__}")
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise ConfigurationError("model configuration: " + "; ".join(dict.fromkeys(map(_schema_sentence, errors))))
    providers = {name: _provider(name, raw, presets) for name, raw in data["providers"].items()}
    models = {
        alias: ModelConfig(
            alias=alias,
            provider=raw["provider"],
            model_id=raw["model_id"],
            context_window=raw.get("context_window", DEFAULT_CONTEXT_WINDOW),
            supports_tools=raw.get("supports_tools", True),
            tool_choice=raw.get("tool_choice"),
            temperature=raw.get("temperature"),
            label=raw.get("label"),
            max_tokens=raw.get("max_tokens"),
            reasoning_effort=raw.get("reasoning_effort"),
            price=MappingProxyType(dict(raw["price"])) if raw.get("price") is not None else None,
            tool_choice_when=_pattern(alias, raw.get("tool_choice_when")),
            strip_leading_whitespace=raw.get("strip_leading_whitespace", False),
            input=tuple(raw.get("input", DEFAULT_INPUT)),
        )
        for alias, raw in data["models"].items()
    }
    roles = dict(data.get("roles") or {})
    roles.setdefault("default", next(iter(models)))
    return providers, models, roles
