"""Which pages may open jxai's websocket: the site's own origin and the trusted ones.

A browser sends its cookies with a websocket handshake whatever page opens it, and the
same-origin policy does not apply to websockets, so the handshake's ``Origin`` header is
the only sign of who is asking. The rule is the one Django's CSRF check applies to the
``Origin`` of an unsafe request (docs/security.md, "Websocket hijacking"): the origin must
be, scheme, host and port alike,

- the origin the socket was opened on: ``https`` when the handshake came over TLS (scope
  scheme ``wss``, or the proxy's ``SECURE_PROXY_SSL_HEADER``), else ``http``, with the
  ``Host`` header, itself one of ``ALLOWED_HOSTS``; or
- one of ``CSRF_TRUSTED_ORIGINS`` (``DJANGO_CSRF_TRUSTED_ORIGINS``), including Django's
  ``https://*.example.com`` form for every subdomain.

A missing, ``null`` or malformed ``Origin`` is refused. Settings are read at each handshake.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, NamedTuple
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import is_same_domain, split_domain_port, validate_host

__all__ = ["Origin", "SameOriginValidator", "handshake_origin_allowed", "parse_origin", "site_origin"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_DEBUG_HOSTS = [".localhost", "127.0.0.1", "[::1]"]
"""Django's hosts when ``DEBUG`` is on and ``ALLOWED_HOSTS`` is empty."""

AsgiApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class Origin(NamedTuple):
    """A web origin: ``scheme`` (``http``/``https``), lower-case ``host``, ``port`` (the
    scheme's default when the text names none)."""

    scheme: str
    host: str
    port: int

    @property
    def netloc(self) -> str:
        """``host[:port]`` as a URL writes it (the port only when not the default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"


def parse_origin(text: str) -> Origin | None:
    """``scheme://host[:port]`` as an :class:`Origin`, or ``None`` for anything else
    (``null``, another scheme, a path, credentials, a bad port)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username is not None or parts.password is not None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return Origin(scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme])


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _secure(scope: dict[str, Any]) -> bool:
    if scope.get("scheme") == "wss":
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not proxy:
        return False
    name, expected = proxy
    meta_name = name.removeprefix("HTTP_").lower().replace("_", "-").encode("latin-1")
    value = _header(scope, meta_name)
    return value is not None and value.split(",", 1)[0].strip() == expected


def site_origin(scope: dict[str, Any]) -> Origin | None:
    """The origin a websocket handshake was addressed to, or ``None`` when its ``Host``
    header is missing or not one of ``ALLOWED_HOSTS`` (Django's own host validation).

    Args:
        scope: the ASGI websocket scope (``headers``, ``scheme``).
    """
    host = _header(scope, b"host")
    if not host:
        return None
    domain, _ = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS or (_DEBUG_HOSTS if settings.DEBUG else [])
    if not domain or not validate_host(domain, allowed):
        return None
    return parse_origin(f"{'https' if _secure(scope) else 'http'}://{host}")


def _trusted(origin: Origin) -> bool:
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        if "*" in entry:  # Django's rule: same scheme, the netloc a subdomain of the pattern's
            parts = urlsplit(entry.lower())
            if parts.scheme == origin.scheme and is_same_domain(origin.netloc, parts.netloc.removeprefix("*")):
                return True
        elif parse_origin(entry) == origin:
            return True
    return False


def handshake_origin_allowed(scope: dict[str, Any]) -> bool:
    """True when the handshake's ``Origin`` is the site's own or a trusted one (module rule).

    Args:
        scope: the ASGI websocket scope.
    """
    text = _header(scope, b"origin")
    origin = parse_origin(text) if text is not None else None
    if origin is None:
        return False
    return origin == site_origin(scope) or _trusted(origin)


class SameOriginValidator:
    """ASGI middleware for websockets: a handshake whose origin is not allowed
    (:func:`handshake_origin_allowed`) is closed before the inner application runs (the
    client sees the close, code 1000, like Channels' own validators)."""

    def __init__(self, application: AsgiApp) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator serves websocket connections only")
        if handshake_origin_allowed(scope):
            await self.application(scope, receive, send)
        else:
            await WebsocketDenier()(scope, receive, send)
