"""Erasing an account, with its sessions (docs/data.md "Erasure"; the rows: :mod:`jxai_app.store.erasure`).

Once the user's row is gone every session naming them is dead (Django's ``get_user`` finds no
user), and every websocket of theirs closes with 4401 at its next login re-check, within
``JXAI_WS_SESSION_CHECK_SECONDS`` (the same path as a logout: :mod:`jxai_app.web.login`).
With a database-backed session engine the sessions' rows are deleted too.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django.utils import timezone

from jxai_app.models import ErasureRecord
from jxai_app.store.erasure import account_erase

__all__ = ["erase_account"]

_DATABASE_ENGINES = ("django.contrib.sessions.backends.db", "django.contrib.sessions.backends.cached_db")


def _sessions_end(user_pk: Any) -> int:
    """Delete the unexpired session rows naming ``user_pk`` (database engines only; each
    session is decoded, as the engine stores no user column). Returns how many."""
    if settings.SESSION_ENGINE not in _DATABASE_ENGINES:
        return 0
    doomed = [s.pk for s in Session.objects.filter(expire_date__gt=timezone.now()).iterator()
              if str(s.get_decoded().get(SESSION_KEY)) == str(user_pk)]
    Session.objects.filter(pk__in=doomed).delete()
    return len(doomed)


def erase_account(user: Any, *, by: Any = None) -> ErasureRecord:
    """Erase ``user`` (:func:`jxai_app.store.erasure.account_erase`: ``by`` is the staff member,
    ``None`` for the user themself) and end their sessions.

    Raises:
        ProblemError: ``conflict`` (a running or waiting turn, a legal hold).
    """
    pk = user.pk
    record = account_erase(user=user, by=by)
    _sessions_end(pk)
    return record
