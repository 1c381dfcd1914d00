"""The one place that reads jxai's settings and builds the core's objects (docs/architecture.md "Settings").

Settings (``project/settings.py``, from the environment) are injected into the framework-free
core as constructor arguments: seconds for timeouts, counts for budgets, URLs and key
*names* for providers. Provider keys are read from the environment at client build time and
never stored in settings, logs or pages.

Model registry sources, first match wins (docs/architecture.md "Settings"; the variables: README "Configuration"):

1. ``JXAI_MODELS_JSON``: the registry dict as JSON text (see :mod:`jxai_app.core.providers`);
2. ``JXAI_MODELS_FILE``: a path to a JSON file holding that dict;
3. ``OPENAI_API_KEY`` (+ ``OPENAI_BASE_URL``, ``JXAI_MODEL``, ``JXAI_CONTEXT_WINDOW``) and/or
   ``ANTHROPIC_API_KEY`` (+ ``ANTHROPIC_BASE_URL``, ``JXAI_ANTHROPIC_MODEL``);
4. otherwise the embedded local model at ``JXAI_LOCAL_MODEL_URL``
   (default ``http://127.0.0.1:8081/v1``, started by ``manage.py runlocalmodel``), under two
   aliases: ``gemma-3-270m`` (the default) and ``gemma-3-270m-calculator`` (forces ``calculate``).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from django.conf import settings
from django.core.files.storage import Storage, storages

from jxai_app.core.agent import AgentPolicy
from jxai_app.core.errors import ConfigurationError
from jxai_app.core.logsafety import environment_secrets
from jxai_app.core.mcp.config import McpServerConfig
from jxai_app.core.providers import ModelRegistry
from jxai_app.core.streaming import ClientTimeouts
from jxai_app.core.streaming.pool import shared_pool
from jxai_app.core.tools.builtin import ARITHMETIC_PATTERN
from jxai_app.ops.localmodel import MODEL_ALIAS, local_model

LOCAL_PROVIDER = "local"
CALCULATOR_SUFFIX, NOTES_SUFFIX = "-calculator", "-notes"
"""The local aliases are the local model's name (``JXAI_LOCAL_MODEL_NAME``,
:data:`jxai_app.ops.localmodel.LOCAL_MODELS`), that name + ``-calculator``: ``tool_choice``
forcing ``calculate`` on the request answering a user message with arithmetic in it
(``ARITHMETIC_PATTERN``; the 270M base model never calls a tool unprompted, README "The
embedded local model"), and that name + ``-notes``: forcing ``save_note``, a tool whose calls
wait for the user's approval (its policy row, made by migration 0004), so a newcomer sees an
approval card (docs/approval.md)."""
LOCAL_MODEL_ALIAS = MODEL_ALIAS
"""The default local model's aliases (Gemma 3 270M)."""
LOCAL_CALCULATOR_ALIAS = LOCAL_MODEL_ALIAS + CALCULATOR_SUFFIX
LOCAL_NOTES_ALIAS = LOCAL_MODEL_ALIAS + NOTES_SUFFIX
DEFAULT_LOCAL_MODEL_URL = "http://127.0.0.1:8081/v1"

# Variables that configure a provider; with none of them set the local model is used.
PROVIDER_VARIABLES = ("JXAI_MODELS_JSON", "JXAI_MODELS_FILE", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def uses_local_model(environ: Mapping[str, str] | None = None) -> bool:
    """True when no provider is configured, so the embedded local model is the default."""
    env = os.environ if environ is None else environ
    return not any(env.get(name) for name in PROVIDER_VARIABLES)


def model_registry_dict_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Build the model registry dict (``jxai_app.core.providers`` format) from the environment.

    Raises:
        ConfigurationError: ``JXAI_MODELS_JSON`` is not JSON, or ``JXAI_MODELS_FILE`` is
            unreadable or not JSON.
    """
    if environ.get("JXAI_MODELS_JSON"):
        try:
            return dict(json.loads(environ["JXAI_MODELS_JSON"]))
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"JXAI_MODELS_JSON is not a JSON object: {exc}") from None
    if environ.get("JXAI_MODELS_FILE"):
        path = Path(environ["JXAI_MODELS_FILE"])
        try:
            return dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigurationError(f"JXAI_MODELS_FILE {str(path)!r} is unreadable: {exc}") from None
    providers: dict[str, Any] = {}
    models: dict[str, Any] = {}
    for kind, key_var, base_var, default_base, model_var, default_model, window_var, default_window in (
        ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1",
         "JXAI_MODEL", "gpt-4o-mini", "JXAI_CONTEXT_WINDOW", 128000),
        ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "https://api.anthropic.com/v1",
         "JXAI_ANTHROPIC_MODEL", "claude-sonnet-4-5", "JXAI_ANTHROPIC_CONTEXT_WINDOW", 200000),
    ):
        if not environ.get(key_var):
            continue
        providers[kind] = {"kind": kind, "base_url": environ.get(base_var) or default_base, "api_key_env": key_var}
        model_id = environ.get(model_var) or default_model
        models[model_id] = {
            "provider": kind,
            "model_id": model_id,
            "context_window": int(environ.get(window_var) or default_window),
            "supports_tools": True,
        }
    if not models:
        chosen = local_model(environ)
        url = environ.get("JXAI_LOCAL_MODEL_URL") or DEFAULT_LOCAL_MODEL_URL
        providers[LOCAL_PROVIDER] = {
            "kind": "openai", "base_url": url, "api_key_env": None,
            "unreachable_message": f"The local model server at {url} is not answering. Start it with "
                                   "make run (or .venv/bin/python manage.py runlocalmodel), then send again.",
        }
        local = {
            "provider": LOCAL_PROVIDER,
            "model_id": chosen.name,
            "context_window": int(environ.get("JXAI_LOCAL_CONTEXT_WINDOW") or 8192),
            "supports_tools": True,
            "input": ["text"],  # a text-only model: images are refused before any request (docs/attachments.md)
            "price": {"input_per_mtok": 0, "output_per_mtok": 0},  # runs here: costs nothing per token
            "temperature": 0.2,  # llama.cpp's server would use 0.8: a 270M base model then wanders
            # its answers start with the space after "Assistant:" (README "The embedded local model")
            "strip_leading_whitespace": True,
        }
        models[chosen.name] = {**local, "label": f"{chosen.label} (local)"}
        models[chosen.name + CALCULATOR_SUFFIX] = {
            **local, "label": f"{chosen.label} + calculator (local)",
            "tool_choice": {"type": "function", "function": {"name": "calculate"}},
            "tool_choice_when": ARITHMETIC_PATTERN,
        }
        models[chosen.name + NOTES_SUFFIX] = {
            **local, "label": f"{chosen.label} + notes, with approval (local)",
            "tool_choice": {"type": "function", "function": {"name": "save_note"}},
        }
    return {"providers": providers, "models": models, "roles": {"default": next(iter(models))}}


@functools.cache
def get_model_registry() -> ModelRegistry:
    """The process-wide model registry (settings ``JXAI_MODELS`` dict if set, else the
    environment; see the module docstring)."""
    configured = getattr(settings, "JXAI_MODELS", None)
    data = dict(configured) if configured else model_registry_dict_from_env(os.environ)
    return ModelRegistry.from_dict(data)


def get_client_timeouts() -> ClientTimeouts:
    """Connect, first-byte and idle timeouts in seconds (``JXAI_*_TIMEOUT``)."""
    return ClientTimeouts(
        connect=settings.JXAI_CONNECT_TIMEOUT,
        first_byte=settings.JXAI_FIRST_BYTE_TIMEOUT,
        idle=settings.JXAI_IDLE_TIMEOUT,
    )


def build_client(alias: str | None, *, transport: Any = None) -> Any:
    """A streaming client for model ``alias`` (``None``: the default role). Without a
    ``transport`` it sends through the process's shared, kept-alive connections
    (:func:`jxai_app.core.streaming.pool.shared_pool`: no new TCP/TLS handshake per request).

    Raises:
        UnknownModelError: the alias is not configured.
    """
    registry = get_model_registry()
    model = registry.resolve(alias)
    pool = shared_pool() if transport is None else None
    return registry.build_client(model.alias, timeouts=get_client_timeouts(), transport=transport, pool=pool,
                                 max_output_tokens=answer_token_limit())


def answer_token_limit() -> int | None:
    """The output token limit every model request is sent with: the answer allowance its quota
    reservation holds (``JXAI_RESERVE_OUTPUT_TOKENS``; docs/security.md "Quota reservations"),
    ``None`` when that is 0 (no answer reserved, the model's own ``max_tokens`` only)."""
    return get_limits().reserve_output_tokens or None


def get_agent_policy() -> AgentPolicy:
    """Budgets of one turn (docs/agent.md "Budgets", "Tool calls"): ``JXAI_MAX_TOOL_ROUNDS``,
    ``JXAI_MAX_ROUNDS``, ``JXAI_TOOL_CONCURRENCY``, ``JXAI_MAX_TOOL_CALLS_PER_ROUND``."""
    return AgentPolicy(
        max_tool_rounds=settings.JXAI_MAX_TOOL_ROUNDS,
        max_rounds=settings.JXAI_MAX_ROUNDS,
        tool_concurrency=settings.JXAI_TOOL_CONCURRENCY,
        max_tool_calls_per_round=settings.JXAI_MAX_TOOL_CALLS_PER_ROUND,
    )


def stream_secrets() -> tuple[str, ...]:
    """The configured credentials no streamed answer may show (docs/security.md "Secret
    leakage in streamed text"): every provider key of the model registry, and every
    environment variable the log filter treats as a secret (``…_KEY``, ``…_TOKEN``,
    ``…_SECRET``, ``…_PASSWORD``)."""
    return tuple(dict.fromkeys((*get_model_registry().provider_keys(), *environment_secrets())))


def get_system_prompt() -> str:
    """The system prompt sent first in every request (``JXAI_SYSTEM_PROMPT``)."""
    return str(settings.JXAI_SYSTEM_PROMPT)


def mcp_servers_from_env(environ: Mapping[str, str]) -> list[McpServerConfig]:
    """MCP servers from ``JXAI_MCP_SERVERS_JSON`` (a JSON list, or ``{"servers": [...]}``)
    or else ``JXAI_MCP_SERVERS_FILE`` (a file holding that JSON); ``[]`` when neither is set
    (docs/mcp.md "Without admin: a JSON file").

    Raises:
        ConfigurationError: unreadable or invalid JSON, or a server the configuration refuses.
    """
    if environ.get("JXAI_MCP_SERVERS_JSON"):
        source, text = "JXAI_MCP_SERVERS_JSON", environ["JXAI_MCP_SERVERS_JSON"]
    elif environ.get("JXAI_MCP_SERVERS_FILE"):
        source = f"JXAI_MCP_SERVERS_FILE {environ['JXAI_MCP_SERVERS_FILE']!r}"
        try:
            text = Path(environ["JXAI_MCP_SERVERS_FILE"]).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"{source} is unreadable: {exc}") from None
    else:
        return []
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"{source} is not JSON: {exc}") from None
    return mcp_servers_from_list(data.get("servers") if isinstance(data, dict) else data)


def mcp_servers_from_list(entries: Any) -> list[McpServerConfig]:
    """Configurations from a JSON list of server objects (:meth:`McpServerConfig.from_dict`).

    Raises:
        ConfigurationError: not a list, a bad entry, or two servers of one name.
    """
    if not isinstance(entries, list):
        raise ConfigurationError("the MCP servers must be a JSON list of objects")
    configs = [McpServerConfig.from_dict(entry) for entry in entries]
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ConfigurationError("two MCP servers have the same name")
    return configs


def get_mcp_servers() -> list[McpServerConfig]:
    """The MCP servers configured without admin: settings ``JXAI_MCP_SERVERS`` when set,
    else the environment (:func:`mcp_servers_from_env`)."""
    configured = getattr(settings, "JXAI_MCP_SERVERS", None)
    if configured is not None:
        return mcp_servers_from_list(list(configured))
    return mcp_servers_from_env(os.environ)


def mcp_allow_internal() -> bool:
    """``JXAI_MCP_ALLOW_INTERNAL``: HTTP MCP servers may be on private or loopback addresses
    (docs/security.md "MCP servers"; default off)."""
    return bool(settings.JXAI_MCP_ALLOW_INTERNAL)


@dataclass(frozen=True, slots=True)
class Limits:
    """Input limits and per-user allowances (docs/security.md, threats 3 and 4). Sizes in bytes or characters."""

    max_message_chars: int
    max_body_bytes: int
    max_messages: int
    ws_max_frame_bytes: int
    turns_per_minute: int
    tokens_per_day: int
    conversations_page_size: int
    upstream_retries: int
    max_answer_chars: int
    """Characters of text and reasoning one turn may stream (``JXAI_MAX_ANSWER_CHARS``)."""
    max_sockets_per_user: int
    """Websockets one user may hold open on one worker (``JXAI_MAX_SOCKETS_PER_USER``, 0 = no cap)."""
    reserve_output_tokens: int
    """Tokens each model request reserves for its answer (``JXAI_RESERVE_OUTPUT_TOKENS``)."""
    ws_expensive_rate: float
    """Expensive requests one socket may make per second, on average (``JXAI_WS_EXPENSIVE_RATE``, 0 = no limit)."""
    ws_expensive_burst: int
    """Expensive requests one socket may make at once (``JXAI_WS_EXPENSIVE_BURST``)."""
    ws_max_unsent_bytes: int
    """Bytes a socket may have sent that its client has not taken (``JXAI_WS_MAX_UNSENT_BYTES``, 0 = no bound)."""


def get_limits() -> Limits:
    """The deployment's limits from settings (``JXAI_MAX_*``, ``JXAI_*_PER_*``)."""
    return Limits(
        max_message_chars=settings.JXAI_MAX_MESSAGE_CHARS,
        max_body_bytes=settings.JXAI_MAX_BODY_BYTES,
        max_messages=settings.JXAI_MAX_MESSAGES,
        ws_max_frame_bytes=settings.JXAI_WS_MAX_FRAME_BYTES,
        turns_per_minute=settings.JXAI_TURNS_PER_MINUTE,
        tokens_per_day=settings.JXAI_TOKENS_PER_DAY,
        conversations_page_size=settings.JXAI_CONVERSATIONS_PAGE_SIZE,
        upstream_retries=settings.JXAI_UPSTREAM_RETRIES,
        max_answer_chars=settings.JXAI_MAX_ANSWER_CHARS,
        max_sockets_per_user=settings.JXAI_MAX_SOCKETS_PER_USER,
        reserve_output_tokens=max(0, int(settings.JXAI_RESERVE_OUTPUT_TOKENS)),
        ws_expensive_rate=max(0.0, float(settings.JXAI_WS_EXPENSIVE_RATE)),
        ws_expensive_burst=max(1, int(settings.JXAI_WS_EXPENSIVE_BURST)),
        ws_max_unsent_bytes=max(0, int(settings.JXAI_WS_MAX_UNSENT_BYTES)),
    )


@dataclass(frozen=True, slots=True)
class PageLimits:
    """Limits of the page's everyday tools (docs/store.md "Custom instructions",
    "Feedback", "Search"). Sizes in characters."""

    custom_instructions_max_chars: int
    """``JXAI_CUSTOM_INSTRUCTIONS_MAX_CHARS`` (default 4,000)."""
    feedback_comment_max_chars: int
    """``JXAI_FEEDBACK_COMMENT_MAX_CHARS`` (default 2,000)."""
    search_results: int
    """``JXAI_SEARCH_RESULTS``: most results of one search (default 20)."""


def get_page_limits() -> PageLimits:
    """The limits of custom instructions, feedback comments and search from settings."""
    return PageLimits(
        custom_instructions_max_chars=settings.JXAI_CUSTOM_INSTRUCTIONS_MAX_CHARS,
        feedback_comment_max_chars=settings.JXAI_FEEDBACK_COMMENT_MAX_CHARS,
        search_results=settings.JXAI_SEARCH_RESULTS,
    )


def import_max_bytes() -> int:
    """``JXAI_IMPORT_MAX_BYTES``: the largest file an import reads, and the most its ZIP members
    may unpack to (default 32 MiB; docs/data.md "Import")."""
    return int(settings.JXAI_IMPORT_MAX_BYTES)


def retention_days() -> int:
    """``JXAI_RETENTION_DAYS``: conversations idle longer are purged; 0 (the default): kept
    forever (docs/data.md "Retention")."""
    return max(0, int(settings.JXAI_RETENTION_DAYS))


@dataclass(frozen=True, slots=True)
class TurnTiming:
    """How a running turn survives faults (docs/turns.md), in seconds."""

    lease: float
    """``JXAI_TURN_LEASE_SECONDS``: a turn not renewed for this long is dead (renewed every third)."""
    store_retry: float
    """``JXAI_STORE_RETRY_SECONDS``: how long a failed write of a finished round or turn is retried."""
    drain: float
    """``JXAI_DRAIN_SECONDS``: how long SIGTERM lets running turns finish."""


def get_turn_timing() -> TurnTiming:
    """The deployment's :class:`TurnTiming` from settings."""
    return TurnTiming(lease=float(settings.JXAI_TURN_LEASE_SECONDS),
                      store_retry=float(settings.JXAI_STORE_RETRY_SECONDS),
                      drain=float(settings.JXAI_DRAIN_SECONDS))


def approval_timeout() -> float:
    """``JXAI_APPROVAL_TIMEOUT_SECONDS``: how long a tool call waits for the user's approval
    before it expires (default 600; docs/approval.md "Expiry")."""
    return float(settings.JXAI_APPROVAL_TIMEOUT_SECONDS)


def cancel_on_disconnect() -> bool:
    """``JXAI_CANCEL_ON_DISCONNECT``: closing the last tab stops the turn (default off)."""
    return bool(settings.JXAI_CANCEL_ON_DISCONNECT)


def staff_tokens_for_users() -> bool:
    """``JXAI_STAFF_TOKENS_FOR_USERS``: staff who are not superusers may issue API tokens for
    users without staff rights too, not only for themselves (:mod:`jxai_app.policy.tokens`)."""
    return bool(settings.JXAI_STAFF_TOKENS_FOR_USERS)


def login_ip_header() -> str:
    """``JXAI_LOGIN_IP_HEADER``: the ``request.META`` key holding the client address a reverse
    proxy set (``HTTP_X_FORWARDED_FOR``, ``HTTP_X_REAL_IP``), or ``""`` for ``REMOTE_ADDR``."""
    return str(settings.JXAI_LOGIN_IP_HEADER)


@dataclass(frozen=True, slots=True)
class AccountLoginDelay:
    """The per-account login delay (docs/security.md "Password guessing from many addresses")."""

    failure_limit: int
    """Failures of one username, from any address, before tries wait (``JXAI_LOGIN_ACCOUNT_FAILURE_LIMIT``, 0 = off)."""
    delay_seconds: float
    """The first wait (``JXAI_LOGIN_ACCOUNT_DELAY_SECONDS``); it doubles with every further failure."""
    max_delay_seconds: float
    """The longest wait (``JXAI_LOGIN_ACCOUNT_DELAY_MAX_SECONDS``)."""
    window: timedelta
    """How far back failures count: axes' cool-off (``JXAI_LOGIN_COOLOFF_MINUTES``)."""


def account_login_delay() -> AccountLoginDelay:
    """The per-account login delay's settings (:class:`AccountLoginDelay`)."""
    return AccountLoginDelay(failure_limit=int(settings.JXAI_LOGIN_ACCOUNT_FAILURE_LIMIT),
                             delay_seconds=float(settings.JXAI_LOGIN_ACCOUNT_DELAY_SECONDS),
                             max_delay_seconds=float(settings.JXAI_LOGIN_ACCOUNT_DELAY_MAX_SECONDS),
                             window=settings.AXES_COOLOFF_TIME)


def allow_client_provider() -> bool:
    """``JXAI_ALLOW_CLIENT_PROVIDER``: ``POST /ai/chat`` accepts a caller-supplied provider
    URL (``X-Api-Base-URL``, SSRF-checked) with the caller's own key (default off)."""
    return bool(settings.JXAI_ALLOW_CLIENT_PROVIDER)


@dataclass(frozen=True, slots=True)
class MetricsAccess:
    """Who may read ``/metrics`` (docs/operations.md "Metrics")."""

    allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    """``JXAI_METRICS_ALLOWED_IPS``: client addresses (``REMOTE_ADDR``) let in."""
    token: str | None
    """``JXAI_METRICS_TOKEN`` from the environment: a request bearing it is let in from anywhere."""


def metrics_access() -> MetricsAccess:
    """The ``/metrics`` access rule from settings and the environment.

    Raises:
        ConfigurationError: an entry of ``JXAI_METRICS_ALLOWED_IPS`` is not an address or network.
    """
    try:
        networks = tuple(ipaddress.ip_network(entry, strict=False) for entry in settings.JXAI_METRICS_ALLOWED_IPS)
    except ValueError as exc:
        raise ConfigurationError(f"JXAI_METRICS_ALLOWED_IPS: {exc}") from None
    return MetricsAccess(allowed_networks=networks, token=os.environ.get("JXAI_METRICS_TOKEN") or None)


@dataclass(frozen=True, slots=True)
class Tracing:
    """OpenTelemetry tracing (docs/operations.md "Tracing")."""

    endpoint: str | None
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``…_TRACES_ENDPOINT``): tracing is on when set."""
    capture_content: bool
    """``JXAI_OTEL_CAPTURE_CONTENT``: record message content on spans (default off)."""
    service_name: str
    """``OTEL_SERVICE_NAME`` (default ``jxai``)."""


def tracing() -> Tracing:
    """The tracing settings (the ``OTEL_*`` variables are OpenTelemetry's own, read from the environment)."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return Tracing(endpoint=endpoint or None, capture_content=bool(settings.JXAI_OTEL_CAPTURE_CONTENT),
                   service_name=os.environ.get("OTEL_SERVICE_NAME") or "jxai")


def cost_per_day() -> Decimal:
    """``JXAI_COST_PER_DAY``: each user's spend per UTC day in USD (0 = unlimited).

    Raises:
        ConfigurationError: not a non-negative decimal number.
    """
    try:
        value = Decimal(str(settings.JXAI_COST_PER_DAY).strip() or "0")
    except InvalidOperation:
        value = Decimal(-1)
    if not value.is_finite() or value < 0:
        raise ConfigurationError(f"JXAI_COST_PER_DAY must be a non-negative number of USD, "
                                 f"not {settings.JXAI_COST_PER_DAY!r}")
    return value


def db_threads() -> int:
    """``JXAI_DB_THREADS``: the worker's database threads (default 8), so at most that many
    connections per worker are in use at once (docs/operations.md "Database connections")."""
    return max(1, int(settings.JXAI_DB_THREADS))


def tools_default_allowed() -> bool:
    """``JXAI_TOOLS_DEFAULT_ALLOWED``: whether a tool without a policy row is offered to
    every user (default ``True``; docs/security.md, threat 2)."""
    return bool(getattr(settings, "JXAI_TOOLS_DEFAULT_ALLOWED", True))


def tool_modules() -> tuple[str, ...]:
    """``JXAI_TOOL_MODULES``: dotted names of modules that each define ``register(registry)``."""
    return tuple(settings.JXAI_TOOL_MODULES)

@dataclass(frozen=True, slots=True)
class Oidc:
    """The identity provider jxai signs people in through (docs/sso.md "Settings").

    ``issuer`` is the provider's issuer URL (its discovery document is
    ``issuer + "/.well-known/openid-configuration"``); ``scopes`` a space-separated list;
    ``groups`` exact group names and ``group_prefix`` a prefix (both empty: every group of the
    claim is synced); ``allowed_domains`` lower-case email domains (empty: any).
    """

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    name: str = ""
    scopes: str = "openid email profile"
    username_claim: str = "preferred_username"
    groups_claim: str = "groups"
    group_prefix: str = ""
    groups: frozenset[str] = frozenset()
    allowed_domains: frozenset[str] = frozenset()

    @property
    def discovery_url(self) -> str:
        """The provider's discovery document (OpenID Connect Discovery 1.0, section 4)."""
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


def oidc() -> Oidc | None:
    """``JXAI_OIDC_*``: the identity provider, or ``None`` when ``JXAI_OIDC_ISSUER`` is unset
    (password sign-in only, as without SSO). ``JXAI_OIDC_CLIENT_SECRET`` is read from the
    environment here, never from settings.

    Raises:
        ConfigurationError: an issuer without ``JXAI_OIDC_CLIENT_ID``.
    """
    issuer = str(getattr(settings, "JXAI_OIDC_ISSUER", ""))
    if not issuer:
        return None
    if not settings.JXAI_OIDC_CLIENT_ID:
        raise ConfigurationError("JXAI_OIDC_ISSUER is set but JXAI_OIDC_CLIENT_ID is not (docs/sso.md)")
    return Oidc(
        issuer=issuer, client_id=str(settings.JXAI_OIDC_CLIENT_ID),
        client_secret=os.environ.get("JXAI_OIDC_CLIENT_SECRET", ""), name=str(settings.JXAI_OIDC_NAME),
        scopes=str(settings.JXAI_OIDC_SCOPES), username_claim=str(settings.JXAI_OIDC_USERNAME_CLAIM),
        groups_claim=str(settings.JXAI_OIDC_GROUPS_CLAIM), group_prefix=str(settings.JXAI_OIDC_GROUP_PREFIX),
        groups=frozenset(str(g) for g in settings.JXAI_OIDC_GROUPS),
        allowed_domains=frozenset(str(d).lower().lstrip("@") for d in settings.JXAI_OIDC_ALLOWED_DOMAINS))


def password_login() -> bool:
    """Whether ``/accounts/login/`` offers and accepts passwords: always without SSO; with
    SSO unless ``JXAI_PASSWORD_LOGIN=0`` (docs/sso.md "Settings")."""
    return oidc() is None or bool(settings.JXAI_PASSWORD_LOGIN)


def ws_session_check_seconds() -> float:
    """``JXAI_WS_SESSION_CHECK_SECONDS``: how often an open socket re-checks its login
    (default 30; docs/security.md, threat 10, asks for "within a minute")."""
    return float(getattr(settings, "JXAI_WS_SESSION_CHECK_SECONDS", 30.0))


def reset_caches() -> None:
    """Forget the cached model registry (tests that change settings or the environment)."""
    get_model_registry.cache_clear()


def public_shares_allowed() -> bool:
    """``JXAI_PUBLIC_SHARES``: share links may be opened by anyone with the link, signed in
    or not (default off; docs/data.md "Share links")."""
    return bool(settings.JXAI_PUBLIC_SHARES)


def temporary_chat_hours() -> float:
    """``JXAI_TEMPORARY_CHAT_HOURS``: a temporary chat idle longer than this many hours is
    removed (default 24; docs/data.md "Temporary chats")."""
    return float(settings.JXAI_TEMPORARY_CHAT_HOURS)


@dataclass(frozen=True, slots=True)
class AttachmentLimits:
    """The limits of uploaded files (docs/attachments.md "Limits and checks")."""

    max_bytes: int
    """``JXAI_MAX_ATTACHMENT_BYTES``: the largest file (default 10 MiB)."""
    per_message: int
    """``JXAI_MAX_ATTACHMENTS_PER_MESSAGE``: the most files one message carries (default 8)."""
    per_user_bytes: int
    """``JXAI_STORAGE_PER_USER_BYTES``: bytes one user may keep (0: unlimited; default 500 MiB).
    Read it through :func:`jxai_app.policy.storage.storage_quota`, never here."""
    max_pixels: int
    """``JXAI_MAX_IMAGE_PIXELS``: the most pixels (width x height) of an image (default 40 million)."""
    text_chars: int
    """``JXAI_ATTACHMENT_TEXT_CHARS``: characters of a document's text the model reads (default 100,000)."""


def get_attachment_limits() -> AttachmentLimits:
    """The attachment limits from settings."""
    return AttachmentLimits(
        max_bytes=settings.JXAI_MAX_ATTACHMENT_BYTES,
        per_message=settings.JXAI_MAX_ATTACHMENTS_PER_MESSAGE,
        per_user_bytes=settings.JXAI_STORAGE_PER_USER_BYTES,
        max_pixels=settings.JXAI_MAX_IMAGE_PIXELS,
        text_chars=settings.JXAI_ATTACHMENT_TEXT_CHARS,
    )


def attachment_storage() -> Storage:
    """The storage attachments' bytes live in: ``STORAGES["jxai_attachments"]`` (a
    ``FileSystemStorage`` under ``MEDIA_ROOT`` unless ``JXAI_STORAGE_BACKEND`` names another;
    docs/attachments.md "Storage")."""
    return storages["jxai_attachments"]
