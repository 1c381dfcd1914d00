"""Password sign-ins in the audit (docs/sso.md "Audit"): Django's ``user_logged_in`` and
``user_login_failed`` signals, sent by every password login (``/accounts/login/`` and
``/admin/login/``, a django-axes lockout included), become ``password-sign-in`` and
``password-failure`` rows. A provider sign-in's session names
:class:`~jxai_app.web.sso.SsoSessionBackend` and is recorded by the sign-in itself
(:func:`jxai_app.policy.identity.sign_in`). Connected by ``JxaiAppConfig.ready``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from jxai_app.models import SignInEvent
from jxai_app.policy import audit
from jxai_app.web.clientip import client_ip
from jxai_app.web.sso import SSO_BACKEND

__all__ = ["password_sign_in", "password_failure"]


@receiver(user_logged_in, dispatch_uid="jxai-audit-password-sign-in")
def password_sign_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """Record a successful password sign-in (not a provider's, nor one without a request)."""
    if request is None or request.session.get(BACKEND_SESSION_KEY) == SSO_BACKEND:
        return
    audit.record(SignInEvent.PASSWORD_SIGN_IN, user=user, actor=user.get_username(), ip=client_ip(request))


@receiver(user_login_failed, dispatch_uid="jxai-audit-password-failure")
def password_failure(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    """Record a refused password sign-in with the name typed (Django has already masked the
    password in ``credentials``) and whether django-axes had locked the name out."""
    if request is None:
        return
    locked = bool(getattr(request, "axes_locked_out", False))
    audit.record(SignInEvent.PASSWORD_FAILURE, actor=str(credentials.get("username") or ""), ip=client_ip(request),
                 detail="locked out after repeated failures" if locked else "wrong username or password")
