"""How many bytes of attachments a user may keep (docs/attachments.md "Limits and checks").

Everything that needs the per-user storage quota (the upload, the settings dialog) asks
:func:`storage_quota`: the user's effective ``storage_bytes_per_user`` under the group
entitlements rule (the most generous of their groups', else ``JXAI_STORAGE_PER_USER_BYTES``;
docs/security.md "Group entitlements").
"""

from __future__ import annotations

from typing import Any

from jxai_app.policy.entitlements import entitlements_for

__all__ = ["storage_quota"]


def storage_quota(user: Any) -> int | None:
    """The bytes of attachments ``user`` may keep, or ``None`` for no limit (an effective
    limit of 0). One query (:func:`~jxai_app.policy.entitlements.entitlements_for`).

    Raises:
        django.db.DatabaseError: the database is unreachable.
    """
    quota = entitlements_for(user).storage_bytes_per_user
    return quota if quota > 0 else None
