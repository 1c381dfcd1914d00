"""Logins: is a websocket's login still good (a socket must not outlive a logout:
docs/security.md, threat 10), and the per-account delay against password guessing spread
over many addresses (docs/security.md "Password guessing from many addresses").

An open websocket was authenticated once, at its handshake. :func:`still_signed_in` reads
the state again from the database, the way :func:`django.contrib.auth.get_user` checks an
HTTP request, but without changing anything (no session flush or key cycling: the socket
only looks):

- the user still exists and ``is_active``;
- when the socket came with a session (the browser's cookie): that session still exists
  and has not expired (a logout flushes it), still names this user and this
  authentication backend, and its session hash still matches the user's (a password
  change logs the other sessions out, Django's ``SESSION_AUTH_HASH``; the
  ``SECRET_KEY_FALLBACKS`` hashes are accepted as Django accepts them).

A socket without a session (a test scope, or a future token-authenticated socket) is
checked on the user alone.

django-axes locks a (username, address) pair; one host with many addresses (an IPv6 /64 has
2⁶⁴) guesses on. :class:`AccountLoginDelayMiddleware` adds a per-account signal that never
locks the owner out: once a username has ``JXAI_LOGIN_ACCOUNT_FAILURE_LIMIT`` failures from
any addresses within ``JXAI_LOGIN_COOLOFF_MINUTES`` (axes' ``AccessAttempt`` rows, summed),
each further try on it must wait a delay after the account's last failure that doubles with
every failure, from ``JXAI_LOGIN_ACCOUNT_DELAY_SECONDS`` up to
``JXAI_LOGIN_ACCOUNT_DELAY_MAX_SECONDS`` (:func:`account_wait`). A try that comes sooner is
answered 429 with ``Retry-After``, its password never checked and not counted. A browser
that has logged in to the account before carries a signed cookie naming it and is not
delayed (axes' per-address lockout still applies to it).
"""

from __future__ import annotations

import math
from datetime import timedelta
from importlib import import_module
from typing import Any, Callable

from asgiref.sync import iscoroutinefunction, sync_to_async
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from django.utils.decorators import sync_and_async_middleware

from jxai_app import conf

__all__ = ["AccountLoginDelayMiddleware", "account_wait", "still_signed_in"]

KNOWN_DEVICE_COOKIE = "jxai_known_login"
"""The signed cookie a browser gets when it logs in: the username it logged in as."""
_SALT = "jxai_app.web.login.known-device"
_KNOWN_DEVICE_DAYS = 365


def _session_data(session_key: str) -> dict[str, Any]:
    """The stored session's data; ``{}`` when it is gone or expired (engine's ``load``)."""
    engine = import_module(settings.SESSION_ENGINE)
    return dict(engine.SessionStore(session_key).load())


def still_signed_in(user_pk: Any, session_key: str | None) -> bool:
    """True while user ``user_pk`` may keep the socket (module docstring). Sync: reads the
    database; call it through :func:`jxai_app.db.db_call`.

    Args:
        user_pk: the primary key of the socket's user.
        session_key: the key of the session the socket was opened with, or ``None``.

    Raises:
        django.db.DatabaseError: the database is unreachable (the caller tries again later).
    """
    user = get_user_model()._default_manager.filter(pk=user_pk).first()
    if user is None or not getattr(user, "is_active", True):
        return False
    if session_key is None:
        return True
    data = _session_data(session_key)
    if str(data.get(SESSION_KEY)) != str(user.pk) or data.get(BACKEND_SESSION_KEY) not in settings.AUTHENTICATION_BACKENDS:
        return False
    if not hasattr(user, "get_session_auth_hash"):
        return True
    stored = data.get(HASH_SESSION_KEY)
    if not isinstance(stored, str) or not stored:
        return False
    if constant_time_compare(stored, user.get_session_auth_hash()):
        return True
    return any(constant_time_compare(stored, fallback) for fallback in user.get_session_auth_fallback_hash())


def account_wait(username: str, *, now: Any = None) -> float:
    """Seconds a login try for ``username`` must still wait (0: it may be checked now), by
    the rule of the module docstring: with ``f`` failures from any address in the cool-off
    window and a limit ``n`` (``JXAI_LOGIN_ACCOUNT_FAILURE_LIMIT``, 0 = off), a try before
    ``last failure + min(max, base × 2^(f − n))`` waits; fewer than ``n`` failures never.
    Sync: reads axes' ``AccessAttempt`` rows (one aggregate query)."""
    rule = conf.account_login_delay()
    if rule.failure_limit <= 0 or not username:
        return 0.0
    now = now or timezone.now()
    rows = AccessAttempt.objects.filter(username=username, attempt_time__gte=now - rule.window)
    seen = rows.aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
    failures, last = int(seen["failures"] or 0), seen["last"]
    if failures < rule.failure_limit or last is None:
        return 0.0
    delay = min(rule.max_delay_seconds, rule.delay_seconds * 2.0 ** min(failures - rule.failure_limit, 64))
    return max(0.0, (last + timedelta(seconds=delay) - now).total_seconds())


def _login_paths() -> frozenset[str]:
    return frozenset((settings.LOGIN_URL, reverse("admin:login")))


def _delayed(request: HttpRequest) -> HttpResponse | None:
    """The 429 answer for a login try that must still wait, else ``None`` (sync)."""
    username = str(request.POST.get("username", ""))
    known = request.get_signed_cookie(KNOWN_DEVICE_COOKIE, default=None, salt=_SALT)
    if known is not None and constant_time_compare(known, username):
        return None
    wait = account_wait(username)
    if wait <= 0:
        return None
    return HttpResponse("Too many failed logins for this account from many addresses; try again in "
                        f"{math.ceil(wait)} s.", status=429, content_type="text/plain; charset=utf-8",
                        headers={"Retry-After": str(math.ceil(wait))})


def _remember(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """After a successful login, give the browser the signed cookie naming its account."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and response.status_code in (301, 302, 303):
        response.set_signed_cookie(KNOWN_DEVICE_COOKIE, user.get_username(), salt=_SALT,
                                   max_age=_KNOWN_DEVICE_DAYS * 86400, secure=settings.SESSION_COOKIE_SECURE,
                                   httponly=True, samesite="Lax")
    return response


@sync_and_async_middleware
def AccountLoginDelayMiddleware(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    """The per-account login delay (module docstring) on the site's and admin's login pages;
    every other request passes untouched (sync and async chains alike).

    Args:
        get_response: the next handler (Django middleware protocol).
    """
    if iscoroutinefunction(get_response):

        async def middleware_async(request: HttpRequest) -> Any:
            if request.method != "POST" or request.path not in _login_paths():
                return await get_response(request)
            refusal = await sync_to_async(_delayed)(request)
            return refusal or _remember(request, await get_response(request))

        return middleware_async

    def middleware(request: HttpRequest) -> Any:
        if request.method != "POST" or request.path not in _login_paths():
            return get_response(request)
        return _delayed(request) or _remember(request, get_response(request))

    return middleware
