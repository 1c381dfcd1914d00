"""Sign-in through the organisation's OpenID Connect provider (docs/sso.md).

Authlib's Django client does the protocol: discovery (the issuer's
``/.well-known/openid-configuration``, read once per worker), the authorization code flow
with PKCE (S256), the ``state`` kept in the session and checked on the way back, the
``nonce``, and the ID token's checks (signature against the provider's JWKS, issuer equal to
the discovery document's, audience, expiry). What the verified claims mean for jxai is
:mod:`jxai_app.policy.identity`'s.

Routes: ``/accounts/oidc/login/`` (to the provider), ``/accounts/oidc/callback/`` (the
redirect URI to register there, printed by ``manage.py check``), and ``/accounts/login/``,
``/accounts/logout/`` wrapped so the login page shows "Sign in with <name>" and logout goes
on to the provider's ``end_session_endpoint`` (RP-initiated logout) when it advertises one.
Any refusal is a 403 page saying why, and an ``sso-failure`` audit row.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.django_client import OAuth
from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.views import LoginView, LogoutView
from django.core import checks
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme
from joserfc.errors import ExpiredTokenError, JoseError

from jxai_app import conf
from jxai_app.conf import Oidc
from jxai_app.core.errors import ConfigurationError
from jxai_app.models import SignInEvent
from jxai_app.policy import audit, identity
from jxai_app.web.clientip import client_ip

__all__ = ["SsoSessionBackend", "SsoLoginView", "SsoLogoutView", "sso_login", "sso_callback", "redirect_uri_check"]

logger = logging.getLogger(__name__)

SSO_BACKEND = "jxai_app.web.sso.SsoSessionBackend"
CALLBACK_PATH = "/accounts/oidc/callback/"
ID_TOKEN_KEY = "jxai_sso_id_token"
NEXT_KEY = "jxai_sso_next"


class SsoSessionBackend(ModelBackend):
    """The backend a provider sign-in's session names: it loads the user like Django's (so an
    open websocket's re-check and logout work as for a password login) and authenticates no
    credentials itself, so no password is ever accepted through it."""

    def authenticate(self, request: Any, username: Any = None, password: Any = None, **kwargs: Any) -> None:
        return None


@functools.lru_cache(maxsize=4)
def _client(oidc: Oidc) -> Any:
    """Authlib's client for ``oidc`` (one per configuration; it caches the discovery document
    and the JWKS, fetching the JWKS again for an unknown key id)."""
    registry = OAuth()
    return registry.register(
        name="jxai", client_id=oidc.client_id, client_secret=oidc.client_secret,
        server_metadata_url=oidc.discovery_url,
        client_kwargs={"scope": oidc.scopes, "code_challenge_method": "S256", "timeout": 10})


def _configured() -> Oidc:
    oidc = conf.oidc()
    if oidc is None:
        raise Http404("sign-in through an identity provider is not configured")
    return oidc


def _refuse(request: HttpRequest, oidc: Oidc, reason: str, *, actor: str = "", detail: str = "") -> HttpResponse:
    audit.record(SignInEvent.SSO_FAILURE, actor=actor, ip=client_ip(request), detail=detail or reason)
    return render(request, "registration/sso_error.html", {"reason": reason, "sso_name": oidc.name}, status=403)


def _unreachable(request: HttpRequest, oidc: Oidc, exc: requests.RequestException) -> HttpResponse:
    logger.warning("sso: %s could not be reached: %s", oidc.issuer, exc)
    return _refuse(request, oidc, f"{oidc.name} could not be reached; try again in a moment.", detail=str(exc))


def sso_login(request: HttpRequest) -> HttpResponse:
    """``GET /accounts/oidc/login/?next=…``: redirect to the provider's authorization endpoint
    (state, nonce and PKCE challenge made and kept by the library). 404 without SSO."""
    oidc = _configured()
    target = request.GET.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=request.is_secure()):
        request.session[NEXT_KEY] = target
    try:
        return _client(oidc).authorize_redirect(request, request.build_absolute_uri(CALLBACK_PATH))
    except requests.RequestException as exc:
        return _unreachable(request, oidc, exc)


def _claims(oidc: Oidc, token: dict[str, Any]) -> dict[str, Any]:
    """The ID token's verified claims, completed from the userinfo endpoint with the claims
    it lacks (some providers send groups or email only there); ``sub`` must agree."""
    claims = dict(token["userinfo"])
    wanted = (oidc.username_claim, "email", oidc.groups_claim)
    if all(name in claims for name in wanted) or not _client(oidc).load_server_metadata().get("userinfo_endpoint"):
        return claims
    extra = dict(_client(oidc).userinfo(token=token))
    if str(extra.get("sub")) != str(claims["sub"]):
        raise identity.SignInRefused("The identity provider's userinfo answer is for another account.")
    for name in wanted:
        if name not in claims and name in extra:
            claims[name] = extra[name]
    return claims


def sso_callback(request: HttpRequest) -> HttpResponse:
    """``GET /accounts/oidc/callback/``: the provider's answer. The library checks state,
    exchanges the code (with the PKCE verifier) and verifies the ID token; then the identity
    rules admit the person, the session is opened and the browser goes on to ``next``.
    Every refusal is a 403 page saying why."""
    oidc = _configured()
    client = _client(oidc)
    try:
        token = client.authorize_access_token(request)
    except ExpiredTokenError:
        return _refuse(request, oidc, f"The sign-in answer from {oidc.name} had expired; sign in again.",
                       detail="expired ID token")
    except JoseError as exc:
        return _refuse(request, oidc, f"The sign-in answer from {oidc.name} failed verification ({exc}); "
                       "sign in again.", detail=f"ID token refused: {exc}")
    except AuthlibBaseError as exc:
        description = getattr(exc, "description", "") or str(exc)
        if getattr(exc, "error", "") == "mismatching_state":
            return _refuse(request, oidc, "This sign-in could not be matched to one started in this browser "
                           "(it was altered, finished already, or started in another browser); sign in again.",
                           detail="state mismatch")
        return _refuse(request, oidc, f"{oidc.name} refused the sign-in: {description}", detail=description)
    except requests.RequestException as exc:
        return _unreachable(request, oidc, exc)
    if "userinfo" not in token:
        return _refuse(request, oidc, f"{oidc.name} sent no ID token; its client needs the openid scope.")
    try:
        claims = _claims(oidc, token)
        user = identity.sign_in(claims, oidc, ip=client_ip(request))
    except identity.SignInRefused as exc:
        actor = str(token["userinfo"].get(oidc.username_claim) or token["userinfo"].get("email") or "")
        return _refuse(request, oidc, str(exc), actor=actor)
    except requests.RequestException as exc:  # its userinfo endpoint
        return _unreachable(request, oidc, exc)
    target = request.session.pop(NEXT_KEY, "") or settings.LOGIN_REDIRECT_URL
    login(request, user, backend=SSO_BACKEND)
    request.session[ID_TOKEN_KEY] = token["id_token"]
    return HttpResponseRedirect(target)


class SsoLoginView(LoginView):
    """``/accounts/login/``: Django's login page plus the "Sign in with <name>" button; with
    ``JXAI_PASSWORD_LOGIN=0`` (and SSO on) the password form is neither shown nor accepted."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        oidc = conf.oidc()
        context["sso_name"] = oidc.name if oidc else ""
        context["password_login"] = conf.password_login()
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        oidc = conf.oidc()
        if oidc is not None and not conf.password_login():
            reason = f"Password sign-in is switched off here; sign in with {oidc.name}."
            return render(request, "registration/sso_error.html", {"reason": reason, "sso_name": oidc.name}, status=403)
        return super().post(request, *args, **kwargs)


class SsoLogoutView(LogoutView):
    """``POST /accounts/logout/``: Django's logout (the session is flushed, so the user's open
    websockets close at their next login re-check), then, for a provider sign-in whose provider
    advertises ``end_session_endpoint``, on to it (RP-initiated logout) with the ID token as
    hint and the login page to come back to."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        id_token = request.session.get(ID_TOKEN_KEY)
        response: HttpResponse = super().post(request, *args, **kwargs)
        oidc = conf.oidc()
        if not id_token or oidc is None:
            return response
        client = _client(oidc)
        try:
            if not client.load_server_metadata().get("end_session_endpoint"):
                return response
        except requests.RequestException:
            return response
        return client.logout_redirect(
            request, post_logout_redirect_uri=request.build_absolute_uri(settings.LOGIN_URL), id_token_hint=id_token)


@checks.register()
def redirect_uri_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``manage.py check``: with SSO configured, an Info message naming the redirect URI to
    register at the provider (for each of ``CSRF_TRUSTED_ORIGINS``, else the first allowed
    host); an Error for an incomplete configuration. Nothing without SSO."""
    try:
        oidc = conf.oidc()
    except ConfigurationError as exc:
        return [checks.Error(str(exc), id="jxai.E101")]
    if oidc is None:
        return []
    origins = list(settings.CSRF_TRUSTED_ORIGINS) or [f"http://{(settings.ALLOWED_HOSTS or ['127.0.0.1'])[0]}:8000"]
    uris = ", ".join(origin.rstrip("/") + CALLBACK_PATH for origin in origins)
    return [checks.Info(f"OpenID Connect: register the redirect URI {uris} at {oidc.name} ({oidc.issuer}), "
                        f"client {oidc.client_id}", hint="docs/sso.md \"The redirect URI\"", id="jxai.I101")]
