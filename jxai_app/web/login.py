"""Is a websocket's login still good? (A socket must not outlive a logout:
docs/security.md, threat 10.)

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
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.utils.crypto import constant_time_compare

__all__ = ["still_signed_in"]


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
