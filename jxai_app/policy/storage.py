"""How many bytes of attachments a user may keep (docs/attachments.md "Limits and checks").

The one place the per-user storage quota is decided: everything that needs it (the upload,
the settings dialog) asks :func:`storage_quota`, so a per-group limit can override the
deployment's ``JXAI_STORAGE_PER_USER_BYTES`` here alone.
"""

from __future__ import annotations

from typing import Any

from jxai_app import conf

__all__ = ["storage_quota"]


def storage_quota(user: Any) -> int | None:
    """The bytes of attachments ``user`` may keep, or ``None`` for no limit
    (``JXAI_STORAGE_PER_USER_BYTES``; 0 means none)."""
    del user  # the same for everyone until per-group limits exist
    quota = conf.get_attachment_limits().per_user_bytes
    return quota if quota > 0 else None
