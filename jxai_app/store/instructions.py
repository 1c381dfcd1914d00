"""Custom instructions: a text of the user's own added to the system prompt of every new
turn (docs/store.md "Custom instructions")."""

from __future__ import annotations

from typing import Any

from jxai_app import conf
from jxai_app.models import UserSettings
from jxai_app.store.common import bounded_text, invalid

INSTRUCTIONS_HEADING = "The user's custom instructions (follow them unless they conflict with the above):"
"""The line between the deployment's system prompt and the user's text."""


def instructions_get(*, user: Any) -> str:
    """``user``'s custom instructions, ``""`` when none (or anonymous)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return ""
    return UserSettings.objects.filter(user_id=user.pk).values_list("custom_instructions", flat=True).first() or ""


def instructions_set(*, user: Any, text: str) -> str:
    """Save ``user``'s custom instructions (trimmed; ``""`` removes them) and return them.
    They apply from the next turn on; a running turn keeps the prompt it started with.

    Raises:
        ProblemError: ``invalid-request`` for an anonymous user, text that is not a string,
            or text over ``JXAI_CUSTOM_INSTRUCTIONS_MAX_CHARS`` characters.
    """
    if user is None or not getattr(user, "is_authenticated", False):
        raise invalid("Custom instructions need a logged-in user.")
    text = bounded_text(text, what="Custom instructions", limit=conf.get_page_limits().custom_instructions_max_chars)
    UserSettings.objects.update_or_create(user_id=user.pk, defaults={"custom_instructions": text})
    return text


def system_prompt_for(*, user: Any, base: str) -> str:
    """The system prompt of a new turn of ``user``: ``base`` (``JXAI_SYSTEM_PROMPT``), then,
    when the user saved custom instructions, :data:`INSTRUCTIONS_HEADING` and their text."""
    text = instructions_get(user=user)
    if not text:
        return base
    return f"{base}\n\n{INSTRUCTIONS_HEADING}\n{text}" if base else text
