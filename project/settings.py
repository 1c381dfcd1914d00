"""Django settings for jxai: everything from the environment, with embedded defaults.

Embedded default (nothing set): SQLite file ``db.sqlite3`` in the project folder (WAL,
IMMEDIATE transactions), the in-memory channel layer, a development secret key generated
into ``.secret_key``, DEBUG on, hosts ``127.0.0.1``/``localhost``.

Scale-out: ``DATABASE_URL`` (any URL ``dj-database-url`` reads, e.g.
``postgres://user@127.0.0.1:5432/jxai``) and ``REDIS_URL`` (``redis://127.0.0.1:6379/0``)
switch to PostgreSQL and ``channels_redis``. See README.md for the full table.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    """Read a boolean environment variable (1/0, true/false, yes/no, on/off)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: list[str]) -> list[str]:
    """Read a comma-separated environment variable."""
    raw = os.environ.get(name)
    if not raw:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DEBUG = env_bool("DJANGO_DEBUG", True)


def _secret_key() -> str:
    key = os.environ.get("DJANGO_SECRET_KEY")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set when DJANGO_DEBUG=0")
    path = Path(os.environ.get("JXAI_SECRET_KEY_FILE", BASE_DIR / ".secret_key"))
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        key = secrets.token_urlsafe(50)
        path.write_text(key)
        path.chmod(0o600)
        return key


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
# The page's fetch calls get a problem document, forms Django's page (docs/security.md, threat 8).
CSRF_FAILURE_VIEW = "jxai_app.web.csrf.csrf_failure"

INSTALLED_APPS = [
    "daphne",
    "jxai_app.admin_site.JxaiAdminConfig",  # django.contrib.admin with the registered-tools entry
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    "jxai_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After the user's lazy loader exists: the connection that read the user goes back at once,
    # and a view's database failure is a 503 problem (docs/operations.md "Database connections").
    "jxai_app.web.dbconnections.DatabaseConnectionsMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "jxai_app.web.csp.ContentSecurityPolicyMiddleware",
    "jxai_app.web.login.AccountLoginDelayMiddleware",  # a username guessed at from many addresses waits
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into its 429 page
]

ROOT_URLCONF = "project.urls"
ASGI_APPLICATION = "project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
_SQLITE_DEFAULT = f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", _SQLITE_DEFAULT), conn_max_age=60, conn_health_checks=False
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers run beside the writer; IMMEDIATE takes the write lock at BEGIN so two
    # writers queue on busy_timeout instead of failing with "database is locked" on upgrade.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file (not :memory:) so tests see WAL and real locking; one per test process so
    # parallel runs never share it. pytest-django deletes it at the end of the session.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / f".test-db-{os.getpid()}.sqlite3")}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # PostgreSQL: every connection of the process comes from one bounded psycopg pool
    # (docs/operations.md "Database connections"): at most JXAI_DB_POOL_MAX sessions per
    # worker whatever the load, and a thread that finds them all busy waits at most
    # JXAI_DB_POOL_TIMEOUT seconds before its call fails (a request then answers
    # `service-unavailable` with Retry-After, jxai_app.db). The default max is the
    # database threads (JXAI_DB_THREADS, each holds one connection per call, so they never
    # wait for the pool), plus one for the lease thread (db.lease_call: a renewal never waits
    # behind them), plus two for the request threads' short lookups (a session's user, given
    # back at once by jxai_app.web.dbconnections) and admin's sync views.
    # No health check before each checkout (a round trip per database call): a connection a
    # database restart broke fails its next query once, which the turn's writes retry and a
    # request answers `service-unavailable` for, and the pool drops it on its return.
    # JXAI_DB_POOL=0 turns the pool off (PgBouncer in transaction mode pools instead):
    # then each thread keeps its own connection for 60 s (CONN_MAX_AGE), as before the pool.
    _db_threads = max(1, int(os.environ.get("JXAI_DB_THREADS", "8")))
    JXAI_DB_POOL = env_bool("JXAI_DB_POOL", True)
    JXAI_DB_POOL_MAX = int(os.environ.get("JXAI_DB_POOL_MAX", str(_db_threads + 3)))
    # A fixed size by default: a pool that grows opens its connections in its own background
    # threads, which a worker busy with hundreds of streams starves of the GIL, so calls time
    # out waiting for connections that are never opened (docs/operations.md "Database connections").
    JXAI_DB_POOL_MIN = int(os.environ.get("JXAI_DB_POOL_MIN", str(JXAI_DB_POOL_MAX)))
    JXAI_DB_POOL_TIMEOUT = float(os.environ.get("JXAI_DB_POOL_TIMEOUT", "5"))
    if JXAI_DB_POOL_MAX < 1 or not 0 <= JXAI_DB_POOL_MIN <= JXAI_DB_POOL_MAX or JXAI_DB_POOL_TIMEOUT <= 0:
        raise ImproperlyConfigured("the database pool needs 0 <= JXAI_DB_POOL_MIN <= JXAI_DB_POOL_MAX, "
                                   "JXAI_DB_POOL_MAX >= 1 and JXAI_DB_POOL_TIMEOUT > 0 (seconds)")
    DATABASES["default"].setdefault("OPTIONS", {})
    # Names jxai's sessions in pg_stat_activity (a ?application_name= in DATABASE_URL wins).
    DATABASES["default"]["OPTIONS"].setdefault("application_name", "jxai")
    if JXAI_DB_POOL:
        DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps the connections; Django requires 0
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": JXAI_DB_POOL_MIN,
            "max_size": JXAI_DB_POOL_MAX,
            "timeout": JXAI_DB_POOL_TIMEOUT,
            "name": "jxai",
        }
    # PgBouncer in transaction mode cannot keep a server-side cursor (QuerySet.iterator(),
    # admin's CSV export) across transactions: JXAI_DB_SERVER_SIDE_CURSORS=0 there.
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = not env_bool("JXAI_DB_SERVER_SIDE_CURSORS", True)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channel layer --------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    # Redis pub/sub ignores database numbers: two deployments on one Redis server would hear
    # each other's workers, so the layer's names carry the URL's database (or JXAI_LAYER_PREFIX).
    _redis_db = urllib.parse.urlsplit(REDIS_URL).path.strip("/") or "0"
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": os.environ.get("JXAI_LAYER_PREFIX", f"jxai-db{_redis_db}")},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- Auth, i18n, static ---------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# django-axes refuses a login before the password is checked once a (username, IP) pair has
# failed JXAI_LOGIN_FAILURE_LIMIT times, for JXAI_LOGIN_COOLOFF_MINUTES after the last failure
# (each failure while locked starts the wait again); a success clears the count. Failures
# live in the database (AccessAttempt), shared by every worker. /accounts/login/ and
# /admin/login/ both authenticate through these backends.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Names the sessions an OpenID Connect sign-in opened (it authenticates nothing itself;
    # docs/sso.md "How a sign-in is checked").
    "jxai_app.web.sso.SsoSessionBackend",
]
JXAI_LOGIN_FAILURE_LIMIT = int(os.environ.get("JXAI_LOGIN_FAILURE_LIMIT", "5"))
AXES_ENABLED = JXAI_LOGIN_FAILURE_LIMIT > 0  # 0 turns throttling off
AXES_FAILURE_LIMIT = max(JXAI_LOGIN_FAILURE_LIMIT, 1)
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("JXAI_LOGIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # no banner on every manage.py command
AXES_CLIENT_IP_CALLABLE = "jxai_app.web.clientip.client_ip"
# Beside it, per account from any address (jxai_app/web/login.py; docs/security.md "Password
# guessing from many addresses"): after this many failures within the cool-off, each try waits
# a delay doubling from DELAY_SECONDS up to DELAY_MAX_SECONDS after the last failure (0 = off).
JXAI_LOGIN_ACCOUNT_FAILURE_LIMIT = int(os.environ.get("JXAI_LOGIN_ACCOUNT_FAILURE_LIMIT", "10"))
JXAI_LOGIN_ACCOUNT_DELAY_SECONDS = float(os.environ.get("JXAI_LOGIN_ACCOUNT_DELAY_SECONDS", "1"))
JXAI_LOGIN_ACCOUNT_DELAY_MAX_SECONDS = float(os.environ.get("JXAI_LOGIN_ACCOUNT_DELAY_MAX_SECONDS", "300"))
# Behind a reverse proxy every login comes from the proxy's address: name the META key of
# the header it sets (e.g. HTTP_X_FORWARDED_FOR, whose last address the proxy appended).
JXAI_LOGIN_IP_HEADER = os.environ.get("JXAI_LOGIN_IP_HEADER", "")

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT") or BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

# --- Production hardening (DJANGO_DEBUG=0) --------------------------------------------
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Every handler gets the redaction filter: no credential (Authorization / x-api-key header
# values, Bearer tokens, sk-… keys, values of *_KEY/*_TOKEN/*_SECRET variables) reaches the
# log, even with DJANGO_LOG_LEVEL=DEBUG and httpx/httpcore tracing (jxai_app.core.logsafety).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact_secrets": {"()": "jxai_app.core.logsafety.RedactSecretsFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["redact_secrets"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("DJANGO_LOG_LEVEL", "INFO")},
}

# --- jxai (read only through jxai_app.conf) -------------------------------------------
JXAI_CANCEL_ON_DISCONNECT = env_bool("JXAI_CANCEL_ON_DISCONNECT", False)
JXAI_ALLOW_CLIENT_PROVIDER = env_bool("JXAI_ALLOW_CLIENT_PROVIDER", False)
# A tool without a ToolPolicy row is offered to every user when on; off makes every tool
# opt-in through a policy row edited in admin (jxai_app.tools.policy).
JXAI_TOOLS_DEFAULT_ALLOWED = env_bool("JXAI_TOOLS_DEFAULT_ALLOWED", True)
# Staff who are not superusers issue API tokens for themselves only; on, also for users
# without staff rights (jxai_app.policy.tokens).
JXAI_STAFF_TOKENS_FOR_USERS = env_bool("JXAI_STAFF_TOKENS_FOR_USERS", False)
# Tools from MCP servers (docs/mcp.md): servers come from admin (McpServer rows)
# and from JXAI_MCP_SERVERS_JSON / JXAI_MCP_SERVERS_FILE, read by conf like the model
# registry; JXAI_MCP_SERVERS (a list of dicts) replaces those two variables (tests). HTTP
# servers on private or loopback addresses are refused unless JXAI_MCP_ALLOW_INTERNAL is on
# (docs/security.md "MCP servers").
JXAI_MCP_ALLOW_INTERNAL = env_bool("JXAI_MCP_ALLOW_INTERNAL", False)

# Everything below is read only through jxai_app.conf (which also reads the provider
# variables OPENAI_API_KEY, OPENAI_BASE_URL, JXAI_MODEL, ANTHROPIC_*, JXAI_MODELS_FILE,
# JXAI_MODELS_JSON, JXAI_LOCAL_MODEL_URL directly, so keys never sit in settings).
JXAI_SYSTEM_PROMPT = os.environ.get(
    "JXAI_SYSTEM_PROMPT",
    "You are jxai, a helpful assistant. Answer clearly and concisely. Use the tools you are "
    "given when they help, and say so when you cannot do something.",
)
JXAI_CONNECT_TIMEOUT = float(os.environ.get("JXAI_CONNECT_TIMEOUT", "10"))
JXAI_FIRST_BYTE_TIMEOUT = float(os.environ.get("JXAI_FIRST_BYTE_TIMEOUT", "120"))
JXAI_IDLE_TIMEOUT = float(os.environ.get("JXAI_IDLE_TIMEOUT", "60"))
JXAI_MAX_TOOL_ROUNDS = int(os.environ.get("JXAI_MAX_TOOL_ROUNDS", "5"))
JXAI_MAX_ROUNDS = int(os.environ.get("JXAI_MAX_ROUNDS", "25"))
JXAI_TOOL_CONCURRENCY = int(os.environ.get("JXAI_TOOL_CONCURRENCY", "4"))
JXAI_TOOL_MODULES = env_list("JXAI_TOOL_MODULES", [])
JXAI_MAX_MESSAGE_CHARS = int(os.environ.get("JXAI_MAX_MESSAGE_CHARS", "32000"))
JXAI_MAX_BODY_BYTES = int(os.environ.get("JXAI_MAX_BODY_BYTES", str(1024 * 1024)))
JXAI_MAX_MESSAGES = int(os.environ.get("JXAI_MAX_MESSAGES", "200"))
JXAI_WS_MAX_FRAME_BYTES = int(os.environ.get("JXAI_WS_MAX_FRAME_BYTES", str(256 * 1024)))
JXAI_TURNS_PER_MINUTE = int(os.environ.get("JXAI_TURNS_PER_MINUTE", "20"))
JXAI_TOKENS_PER_DAY = int(os.environ.get("JXAI_TOKENS_PER_DAY", "2000000"))
JXAI_CONVERSATIONS_PAGE_SIZE = int(os.environ.get("JXAI_CONVERSATIONS_PAGE_SIZE", "50"))
JXAI_UPSTREAM_RETRIES = int(os.environ.get("JXAI_UPSTREAM_RETRIES", "2"))
# Characters of answer text and reasoning one turn may stream; the answer is cut there and
# saved with stopReason "length" (docs/turns.md "Settings"). About a million tokens: several
# times the longest output of current models, and a bound on a turn's memory.
JXAI_MAX_ANSWER_CHARS = int(os.environ.get("JXAI_MAX_ANSWER_CHARS", "4000000"))
# Caps: tool calls of one model round that run (later ones get a failed
# result without running; docs/agent.md "Tool calls"), and websockets one user may hold open
# on one worker process (a further one is closed with 4429; docs/websocket.md "Limits").
JXAI_MAX_TOOL_CALLS_PER_ROUND = int(os.environ.get("JXAI_MAX_TOOL_CALLS_PER_ROUND", "20"))
JXAI_MAX_SOCKETS_PER_USER = int(os.environ.get("JXAI_MAX_SOCKETS_PER_USER", "50"))
# One socket's expensive requests (subscribe, switch_branch, search, instructions, feedback):
# a token bucket of BURST refilled at RATE per second; past it, a rate-limited error frame.
JXAI_WS_EXPENSIVE_RATE = float(os.environ.get("JXAI_WS_EXPENSIVE_RATE", "1"))
JXAI_WS_EXPENSIVE_BURST = int(os.environ.get("JXAI_WS_EXPENSIVE_BURST", "10"))
# Bytes one socket may have sent but not yet taken by its client (the server's buffer while the
# client does not read); past it the socket is closed with 4500 (0 = no bound).
JXAI_WS_MAX_UNSENT_BYTES = int(os.environ.get("JXAI_WS_MAX_UNSENT_BYTES", str(32 * 1024 * 1024)))
# Every model request reserves its prompt estimate plus this many tokens
# for its answer against the daily quota before it is sent (docs/security.md "Quota
# reservations"), and the output limit each request is sent with (max_tokens / max_output_tokens).
JXAI_RESERVE_OUTPUT_TOKENS = int(os.environ.get("JXAI_RESERVE_OUTPUT_TOKENS", "4096"))
# Turn lifecycle under faults (docs/turns.md): the lease a running turn renews in its row,
# how long a failed write of a finished round or turn is retried, how long SIGTERM lets
# running turns finish, and the threads database work runs on.
JXAI_TURN_LEASE_SECONDS = float(os.environ.get("JXAI_TURN_LEASE_SECONDS", "6"))
JXAI_STORE_RETRY_SECONDS = float(os.environ.get("JXAI_STORE_RETRY_SECONDS", "120"))
JXAI_DRAIN_SECONDS = float(os.environ.get("JXAI_DRAIN_SECONDS", "30"))
JXAI_DB_THREADS = int(os.environ.get("JXAI_DB_THREADS", "8"))
# Tool approval (docs/approval.md "Expiry"): a call waiting for the user's approval longer
# than this many seconds expires (the model reads that it was not run).
JXAI_APPROVAL_TIMEOUT_SECONDS = float(os.environ.get("JXAI_APPROVAL_TIMEOUT_SECONDS", "600"))
# An open websocket re-checks its session and is_active this often (seconds) and closes
# with 4401 once either is gone (jxai_app.consumers).
JXAI_WS_SESSION_CHECK_SECONDS = float(os.environ.get("JXAI_WS_SESSION_CHECK_SECONDS", "30"))

# --- Operating it (docs/operations.md): /metrics access, tracing, log format, cost ---
# /metrics answers requests from these addresses or networks (REMOTE_ADDR), or any request
# with "Authorization: Bearer $JXAI_METRICS_TOKEN" (the token is read from the environment by
# jxai_app.conf, never kept here). PROMETHEUS_MULTIPROC_DIR (read by prometheus-client)
# merges several workers' metrics. Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT is set.
JXAI_METRICS_ALLOWED_IPS = env_list("JXAI_METRICS_ALLOWED_IPS", ["127.0.0.1", "::1"])
JXAI_OTEL_CAPTURE_CONTENT = env_bool("JXAI_OTEL_CAPTURE_CONTENT", False)
# Per-user spend per UTC day in USD (decimal text; 0 = unlimited), beside JXAI_TOKENS_PER_DAY.
JXAI_COST_PER_DAY = os.environ.get("JXAI_COST_PER_DAY", "0")
DJANGO_LOG_FORMAT = os.environ.get("DJANGO_LOG_FORMAT", "text").strip().lower()
if DJANGO_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"DJANGO_LOG_FORMAT must be text or json, not {DJANGO_LOG_FORMAT!r}")
if DJANGO_LOG_FORMAT == "json":
    LOGGING["formatters"] = {"json": {"()": "jxai_app.ops.jsonlog.JsonFormatter"}}
    LOGGING["handlers"]["console"]["formatter"] = "json"
# Probes and scrapers speak plain HTTP inside the cluster: no HTTPS redirect for them.
SECURE_REDIRECT_EXEMPT = [r"^(healthz|readyz|metrics)$"]
# The page's everyday tools: the longest custom instructions a user may
# save (added to the system prompt of each new turn), the longest feedback comment, and the
# most results the page's search returns (docs/store.md "Custom instructions", "Feedback",
# "Search").
JXAI_CUSTOM_INSTRUCTIONS_MAX_CHARS = int(os.environ.get("JXAI_CUSTOM_INSTRUCTIONS_MAX_CHARS", "4000"))
JXAI_FEEDBACK_COMMENT_MAX_CHARS = int(os.environ.get("JXAI_FEEDBACK_COMMENT_MAX_CHARS", "2000"))
JXAI_SEARCH_RESULTS = int(os.environ.get("JXAI_SEARCH_RESULTS", "20"))
# Owning conversations (docs/data.md): share links for anyone with the link only when this is
# on (off: signed-in users or chosen groups only); temporary chats are removed once idle this long.
JXAI_PUBLIC_SHARES = env_bool("JXAI_PUBLIC_SHARES", False)
JXAI_TEMPORARY_CHAT_HOURS = float(os.environ.get("JXAI_TEMPORARY_CHAT_HOURS", "24"))

# --- Sign-in through the organisation's identity provider (docs/sso.md) ----------------
# Off unless JXAI_OIDC_ISSUER is set; the client secret is read from the environment by
# jxai_app.conf, never kept here.
JXAI_OIDC_ISSUER = os.environ.get("JXAI_OIDC_ISSUER", "").strip()
JXAI_OIDC_CLIENT_ID = os.environ.get("JXAI_OIDC_CLIENT_ID", "").strip()
JXAI_OIDC_NAME = os.environ.get("JXAI_OIDC_NAME", "").strip() or "your organisation"
JXAI_OIDC_SCOPES = os.environ.get("JXAI_OIDC_SCOPES", "openid email profile").strip()
JXAI_OIDC_USERNAME_CLAIM = os.environ.get("JXAI_OIDC_USERNAME_CLAIM", "").strip() or "preferred_username"
JXAI_OIDC_GROUPS_CLAIM = os.environ.get("JXAI_OIDC_GROUPS_CLAIM", "").strip() or "groups"
JXAI_OIDC_GROUP_PREFIX = os.environ.get("JXAI_OIDC_GROUP_PREFIX", "")
JXAI_OIDC_GROUPS = env_list("JXAI_OIDC_GROUPS", [])
JXAI_OIDC_ALLOWED_DOMAINS = env_list("JXAI_OIDC_ALLOWED_DOMAINS", [])
# 0 hides and refuses the password form of /accounts/login/ while SSO is on.
JXAI_PASSWORD_LOGIN = env_bool("JXAI_PASSWORD_LOGIN", True)
# Your data (docs/data.md): the largest import file, and how long idle conversations are kept
# (empty or 0: forever; manage.py purge_conversations removes the older ones).
JXAI_IMPORT_MAX_BYTES = int(os.environ.get("JXAI_IMPORT_MAX_BYTES", str(32 * 1024 * 1024)))
JXAI_RETENTION_DAYS = int(os.environ.get("JXAI_RETENTION_DAYS") or "0")

# --- Attachments (docs/attachments.md) ---
# Files go through Django's storage API: the "jxai_attachments" storage, a FileSystemStorage
# under MEDIA_ROOT unless JXAI_STORAGE_BACKEND names another backend (a django-storages one,
# e.g. storages.backends.s3.S3Storage) with JXAI_STORAGE_OPTIONS (a JSON object) as its
# OPTIONS. No MEDIA_URL is routed: files are served only by the owner-checked view.
MEDIA_ROOT = Path(os.environ.get("DJANGO_MEDIA_ROOT") or BASE_DIR / "media")
STORAGES["jxai_attachments"] = {
    "BACKEND": os.environ.get("JXAI_STORAGE_BACKEND") or "django.core.files.storage.FileSystemStorage",
    "OPTIONS": json.loads(os.environ.get("JXAI_STORAGE_OPTIONS") or "{}"),
}
JXAI_MAX_ATTACHMENT_BYTES = int(os.environ.get("JXAI_MAX_ATTACHMENT_BYTES", str(10 * 1024 * 1024)))
JXAI_MAX_ATTACHMENTS_PER_MESSAGE = int(os.environ.get("JXAI_MAX_ATTACHMENTS_PER_MESSAGE", "8"))
# Bytes of attachments one user may keep (0 = unlimited); per-group limits may override it
# (jxai_app.policy.storage).
JXAI_STORAGE_PER_USER_BYTES = int(os.environ.get("JXAI_STORAGE_PER_USER_BYTES", str(500 * 1024 * 1024)))
# Pixels (width x height) an image may have: larger ones are refused before decoding (bombs).
JXAI_MAX_IMAGE_PIXELS = int(os.environ.get("JXAI_MAX_IMAGE_PIXELS", str(40_000_000)))
# Characters of a document's extracted text the model reads (the rest is cut, and it is told).
JXAI_ATTACHMENT_TEXT_CHARS = int(os.environ.get("JXAI_ATTACHMENT_TEXT_CHARS", "100000"))
