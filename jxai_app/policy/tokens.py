"""Who may issue a jxai API token for whom (docs/security.md, "API tokens issued by staff").

A token acts as its user on ``POST /ai/chat`` with all of that user's rights, so issuing one
for someone else is acting as them. The rule, for admin's add form:

- a superuser may issue a token for any user;
- any other staff member (who holds ``jxai_app.add_apitoken``) only for themselves, or, when
  the setting ``JXAI_STAFF_TOKENS_FOR_USERS`` is on (default off), also for users with
  neither staff nor superuser rights.

``manage.py create_api_token`` runs with the shell's rights (the database and the settings
are already the operator's), like a superuser.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

__all__ = ["token_owners_for"]


def token_owners_for(issuer: Any, *, staff_for_users: bool) -> QuerySet[Any]:
    """The users ``issuer`` may issue an API token for (module rule).

    Args:
        issuer: the signed-in staff user filling in the form.
        staff_for_users: ``JXAI_STAFF_TOKENS_FOR_USERS`` (``jxai_app.conf.staff_tokens_for_users``).

    Returns:
        A queryset of the user model: every user for a superuser; else the issuer, plus the
        users without staff or superuser rights when ``staff_for_users`` is true.
    """
    users = get_user_model().objects.all()
    if issuer.is_superuser:
        return users
    allowed = Q(pk=issuer.pk)
    if staff_for_users:
        allowed |= Q(is_staff=False, is_superuser=False)
    return users.filter(allowed)
