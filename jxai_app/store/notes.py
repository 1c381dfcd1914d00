"""A user's notes: what the built-in ``save_note`` tool writes (docs/approval.md "The
demonstration tool"). The owner is the user the tool acts for, never an argument."""

from __future__ import annotations

from typing import Any

from jxai_app.models import Note
from jxai_app.store.common import storable

__all__ = ["note_save"]


def note_save(*, owner: Any, text: str) -> dict[str, Any]:
    """Save ``text`` as a note of ``owner`` (one INSERT).

    Returns:
        ``{"id", "text", "created_at"}`` (ISO 8601), for the tool's result.
    """
    note = Note.objects.create(owner=owner, text=storable(text))
    return {"id": note.pk, "text": note.text, "created_at": note.created_at.isoformat()}
