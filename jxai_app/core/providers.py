"""The model registry: providers, models and roles, built from a plain dict
(docs/architecture.md "Settings"; the README's "Configuration").

Framework-free core: no Django import. The Django layer (``conf.py``) fills the dict from
settings and the environment; :mod:`jxai_app.core.model_config` describes and validates it (and
defines :class:`ProviderConfig`, :class:`ModelConfig`, re-exported here); this module holds
the registry built from it: lookups by alias and role, the public listing, and streaming
clients.

Keys and base URLs never leave through ``public_listing`` (what ``GET /ai/models`` shows).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from jxai_app.core.errors import ConfigurationError, UnknownModelError
from jxai_app.core.streaming import AnthropicChatClient, OpenAIChatClient, ProxyChatClient, ResponsesChatClient
from jxai_app.core.model_config import (
    DEFAULT_CONTEXT_WINDOW,
    ModelConfig,
    ProviderConfig,
    ProviderKind,
    parse_config,
)

__all__ = ["DEFAULT_CONTEXT_WINDOW", "ModelConfig", "ModelRegistry", "ProviderConfig", "ProviderKind"]

logger = logging.getLogger("jxai_app.core.providers")


class ModelRegistry:
    """The configured providers, models and roles (docs/architecture.md "Settings").

    Build it with ``ModelRegistry.from_dict``. Models keep their configuration order.

    Args:
        providers: name → ``ProviderConfig``.
        models: alias → ``ModelConfig`` (each naming a provider above).
        roles: role → alias; ``default`` is required here (``from_dict`` fills it in).

    Raises:
        ConfigurationError: a model names an unknown provider, a role an unknown alias,
            or there is no ``default`` role.
    """

    def __init__(
        self,
        providers: Mapping[str, ProviderConfig],
        models: Mapping[str, ModelConfig],
        roles: Mapping[str, str],
    ) -> None:
        self._providers = dict(providers)
        self._models = dict(models)
        self._roles = dict(roles)
        if not self._models:
            raise ConfigurationError("model configuration: models: no models are configured")
        for alias, model in self._models.items():
            if model.provider not in self._providers:
                raise ConfigurationError(
                    f"model configuration: models.{alias}.provider: unknown provider {model.provider!r}; "
                    f"known providers: {', '.join(self._providers) or '(none)'}"
                )
        if "default" not in self._roles:
            raise ConfigurationError("model configuration: roles: a 'default' role is required")
        for role, alias in self._roles.items():
            if alias not in self._models:
                raise ConfigurationError(
                    f"model configuration: roles.{role}: unknown model alias {alias!r}; known models: {', '.join(self._models)}"
                )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, presets: Mapping[str, Any] | None = None) -> ModelRegistry:
        """Validate and build a registry from the plain dict described in :mod:`jxai_app.core.model_config`.

        ``data`` and ``presets`` are as :func:`~jxai_app.core.model_config.parse_config` takes them
        (``roles`` is optional; ``roles.default`` defaults to the first model).

        Returns:
            The registry.

        Raises:
            ConfigurationError: the dict is malformed (the message names the path of every
                problem, e.g. ``models.gpt.context_window: 0 is less than the minimum of 1``),
                or its references are broken (see the class).
        """
        return cls(*parse_config(data, presets=presets))

    def aliases(self) -> list[str]:
        """The model aliases, in configuration order."""
        return list(self._models)

    def roles(self) -> dict[str, str]:
        """A copy of role → alias."""
        return dict(self._roles)

    @property
    def default_alias(self) -> str:
        """The alias of the ``default`` role."""
        return self._roles["default"]

    def get(self, alias: str) -> ModelConfig:
        """The model configured under ``alias``.

        Raises:
            UnknownModelError: no such alias; the message lists the known ones.
        """
        model = self._models.get(alias) if isinstance(alias, str) else None
        if model is None:
            raise UnknownModelError(f"Unknown model {alias!r}; known models: {', '.join(self._models)}.")
        return model

    def for_role(self, role: str) -> ModelConfig:
        """The model a role maps to (``"default"`` always exists).

        Raises:
            UnknownModelError: no such role; the message lists the configured ones.
        """
        alias = self._roles.get(role) if isinstance(role, str) else None
        if alias is None:
            raise UnknownModelError(f"No model is configured for role {role!r}; configured roles: {', '.join(self._roles)}.")
        return self._models[alias]

    def resolve(self, alias: str | None) -> ModelConfig:
        """``get(alias)``, or the default model when ``alias`` is ``None`` or ``""``.

        Raises:
            UnknownModelError: a non-empty alias that is not configured.
        """
        return self.for_role("default") if alias is None or alias == "" else self.get(alias)

    def provider(self, name: str) -> ProviderConfig:
        """The provider called ``name``.

        Raises:
            ConfigurationError: no such provider.
        """
        if name not in self._providers:
            raise ConfigurationError(f"Unknown provider {name!r}; known providers: {', '.join(self._providers)}.")
        return self._providers[name]

    def public_listing(self) -> list[dict[str, Any]]:
        """What ``GET /ai/models`` shows: no keys, URLs, headers or provider ids.

        Returns:
            ``[{"alias", "label", "context_window", "supports_tools", "input", "default"}, …]`` in
            configuration order; ``label`` falls back to the alias; ``default`` is true
            for the default role's model only.
        """
        return [
            {
                "alias": m.alias,
                "label": m.label or m.alias,
                "context_window": m.context_window,
                "supports_tools": m.supports_tools,
                "input": list(m.input),
                "default": m.alias == self.default_alias,
            }
            for m in self._models.values()
        ]

    def provider_keys(self) -> tuple[str, ...]:
        """Every provider's key as set now (:attr:`ProviderConfig.api_key`), unset ones left
        out: the credentials streamed text is masked of (docs/security.md "Secret leakage in streamed text")."""
        return tuple(dict.fromkeys(key for p in self._providers.values() if (key := p.api_key)))

    def build_client(self, alias: str, *, timeouts: Any = None, transport: Any = None, pool: Any = None,
                     max_output_tokens: int | None = None) -> Any:
        """Construct the streaming client for a model (docs/streaming.md "The client
        interface"), reading its key now.

        Args:
            alias: the model alias.
            timeouts: a ``jxai_app.core.streaming.ClientTimeouts`` (``None`` = the client's defaults).
            transport: an ``httpx.AsyncBaseTransport`` (tests), or ``None`` for the network.
            pool: a ``jxai_app.core.streaming.pool.ConnectionPool`` whose kept-alive connections
                the client uses (``None``: a fresh connection per request).
            max_output_tokens: the answer's token limit the request's quota reservation allows
                (docs/security.md "Quota reservations"), sent as the provider's output limit
                (``max_tokens`` for chat completions and Anthropic Messages,
                ``max_output_tokens`` for the Responses API) unless the model's own
                ``max_tokens`` is lower; ``None``: the model's own only. The proxy kind
                sends none (the jxai it talks to applies its own).

        Returns:
            An ``OpenAIChatClient`` (kind ``openai``), ``ResponsesChatClient``
            (``openai-responses``), ``AnthropicChatClient`` or ``ProxyChatClient``.

        A key variable that is unset or empty is logged and no key is sent (some servers
        take one only optionally); a provider that needs it answers 401, which the client
        turns into an ``error`` event.

        Raises:
            UnknownModelError: no such alias.
        """
        model = self.get(alias)
        provider = self._providers[model.provider]
        api_key = provider.api_key
        if provider.api_key_env and api_key is None:
            # Not an error here: some servers take a key only optionally (vLLM, local
            # gateways); a provider that needs one answers 401, which the client reports.
            logger.warning("model %s: environment variable %s is not set; sending no key", alias, provider.api_key_env)
        common: dict[str, Any] = {
            "api_key": api_key,
            "extra_headers": dict(provider.extra_headers) or None,
            "timeouts": timeouts,
            "transport": transport,
            "pool": pool,
            "unreachable_message": provider.unreachable_message,
        }
        if provider.kind in ("openai", "openai-responses"):
            kind = OpenAIChatClient if provider.kind == "openai" else ResponsesChatClient
            return kind(
                base_url=provider.base_url,
                model=model.model_id,
                temperature=model.temperature,
                tool_choice=model.tool_choice if model.tool_choice is not None else "auto",
                max_tokens=_output_limit(model.max_tokens, max_output_tokens),
                reasoning_effort=model.reasoning_effort,
                tool_choice_when=model.tool_choice_when,
                strip_leading_whitespace=model.strip_leading_whitespace,
                **common,
            )
        if provider.kind == "anthropic":
            return AnthropicChatClient(
                base_url=provider.base_url,
                model=model.model_id,
                max_tokens=_output_limit(model.max_tokens, max_output_tokens) or 4096,
                temperature=model.temperature,
                **common,
            )
        return ProxyChatClient(chat_url=provider.base_url, model=model.model_id, api_base_url=provider.api_base_url, **common)


def _output_limit(model_max: int | None, reserved: int | None) -> int | None:
    """The output token limit to send: the lower of the model's own ``max_tokens`` and the
    ``reserved`` answer allowance (docs/security.md "Quota reservations"); ``None`` when
    neither is set."""
    limits = [n for n in (model_max, reserved) if n]
    return min(limits) if limits else None
