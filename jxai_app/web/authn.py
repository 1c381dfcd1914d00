"""Who is calling the HTTP API: a jxai API token or a logged-in session (docs/api.md "Authentication").

- ``X-Api-Key: <token>`` (what the original package's proxy client sends) or
  ``Authorization: Bearer <token>``; when both are present ``X-Api-Key`` wins (docs/api.md
  "Authentication").
  A token header that does not name an active token of an active user is a 401 — there is
  no fall-back to the session then. A jxai token is only ever compared with stored hashes;
  it is never forwarded to a provider.
- Otherwise the Django session (cookie). A session-authenticated unsafe request (``POST``)
  must pass Django's CSRF check (``X-CSRFToken`` header + ``csrftoken`` cookie, or a
  trusted ``Origin``); a token-authenticated one needs none (no ambient credential to abuse).

Views using this must be ``csrf_exempt`` so the middleware leaves the decision here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal, Mapping

from django.http import HttpRequest
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone

from jxai_app.db import db_call
from jxai_app.models import ApiToken
from jxai_app.core.problems import problem_error

__all__ = ["CSRF_DETAIL", "Principal", "authenticate", "token_from_headers", "user_for_token"]

LAST_USED_RESOLUTION: Final[timedelta] = timedelta(minutes=1)
"""``ApiToken.last_used_at`` is written at most this often per token (no write per request)."""
_MAX_TOKEN_LENGTH: Final[int] = 200


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller.

    Attributes:
        user: the Django user.
        via: ``"token"`` or ``"session"``.
        token_id: the ``ApiToken`` primary key when ``via == "token"``.
    """

    user: Any
    via: Literal["token", "session"]
    token_id: int | None = None


def token_from_headers(headers: Mapping[str, str]) -> str | None:
    """The jxai token a request presents, or ``None`` when it presents none.

    Args:
        headers: request headers, names case-insensitive (``request.headers``).

    Returns:
        ``X-Api-Key``'s value, else the credentials of an ``Authorization: Bearer`` header
        (scheme case-insensitive); ``""`` when such a header is present but empty.
        Other ``Authorization`` schemes are not tokens and give ``None``.
    """
    key = headers.get("X-Api-Key")
    if key is not None:
        return key.strip()
    authorization = headers.get("Authorization")
    if authorization is not None:
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() == "bearer":
            return credentials.strip()
    return None


def user_for_token(plaintext: str) -> tuple[Any, int] | None:
    """Look a plaintext token up by its hash.

    Returns:
        ``(user, token_id)`` for an unrevoked token of an active user, else ``None``.
        Updates ``last_used_at`` at most once per :data:`LAST_USED_RESOLUTION`.
    """
    if not plaintext or len(plaintext) > _MAX_TOKEN_LENGTH:
        return None
    token = (ApiToken.objects.select_related("user")
             .filter(secret_hash=ApiToken.hash_secret(plaintext), revoked_at__isnull=True).first())
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user, token.pk


CSRF_DETAIL: Final[str] = "CSRF check failed: reload the page"
"""The ``detail`` of every CSRF refusal as a problem (here and :mod:`jxai_app.web.csrf`)."""


class _CsrfCheck(CsrfViewMiddleware):
    """Django's CSRF rules, answering the failure reason instead of a 403 page."""

    def _reject(self, request: HttpRequest, reason: str) -> str:
        return reason


def _csrf_failure(request: HttpRequest) -> str | None:
    check = _CsrfCheck(lambda r: None)
    check.process_request(request)
    result = check.process_view(request, None, (), {})
    return result if isinstance(result, str) else None


async def authenticate(request: HttpRequest) -> Principal:
    """Authenticate an API request (module docstring); reads headers, never the body.

    Raises:
        ProblemError: 401 ``unauthorized`` (no credentials, or a bad token); 403
            ``forbidden`` when a session-authenticated unsafe request fails the CSRF check.
    """
    presented = token_from_headers(request.headers)
    if presented is not None:
        found = await db_call(user_for_token, presented)
        if found is None:
            raise problem_error("unauthorized", "The API token is not valid: unknown, revoked, or its user "
                                                "is inactive.")
        return Principal(user=found[0], via="token", token_id=found[1])
    user = await request.auser()
    if not user.is_authenticated or not user.is_active:
        raise problem_error("unauthorized", "Log in, or send a jxai API token (Authorization: Bearer <token> "
                                            "or X-Api-Key: <token>).")
    if request.method not in ("GET", "HEAD", "OPTIONS", "TRACE"):
        reason = _csrf_failure(request)
        if reason is not None:
            raise problem_error("forbidden", f"{CSRF_DETAIL} ({reason})")
    return Principal(user=user, via="session")
