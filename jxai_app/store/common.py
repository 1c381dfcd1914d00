"""Helpers shared by the store's services: ownership lookups, positions, limits.

Every service that takes a conversation id also takes the requesting user, and answers
another user's conversation exactly like a missing one (never a 403 that confirms it exists;
docs/store.md "Ownership"). Ids that do not parse are missing ids too.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from django.db.models import Prefetch, QuerySet

from jxai_app.core.errors import ProblemError
from jxai_app.core.unicode import replace_unclean
from jxai_app.models import Attachment, Conversation, ConversationStatus, ToolCall
from jxai_app.core.problems import problem_error

LEASE_SECONDS: Final[float] = 6.0
"""Default lease of a running turn (``JXAI_TURN_LEASE_SECONDS``): its runner renews it every
third of this; a turn whose lease is older is dead and any worker recovers it (docs/turns.md)."""
TITLE_MAX_CHARS: Final[int] = 60
"""Length of a title derived from the first user message."""

_NOT_FOUND_DETAIL: Final[str] = "Conversation not found."


def not_found() -> ProblemError:
    """The ``not-found`` problem used for missing *and* foreign conversations alike."""
    return problem_error("not-found", _NOT_FOUND_DETAIL)


def message_not_found() -> ProblemError:
    """The ``not-found`` problem for a message id that is not one of the conversation's."""
    return problem_error("not-found", "Message not found.")


def conflict(conversation: Conversation | None = None) -> ProblemError:
    """The ``conflict`` problem of a request refused while a turn runs (docs/store.md "One
    turn per conversation"), or, for a ``conversation`` whose turn waits for an approval,
    with code ``approval_pending`` (docs/approval.md "The turn pauses")."""
    if conversation is not None and conversation.status == ConversationStatus.AWAITING_APPROVAL:
        return problem_error("conflict", "A tool call in this conversation waits for your approval; approve or "
                             "deny it first, or press Stop.", code="approval_pending")
    return problem_error("conflict", "A turn is already running in this conversation; wait for it or press Stop.")


def invalid(detail: str) -> ProblemError:
    """An ``invalid-request`` problem with ``detail``."""
    return problem_error("invalid-request", detail)


def parse_id(value: Any) -> uuid.UUID | None:
    """``value`` as a conversation UUID, or ``None`` when it is not one."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            return None
    return None


def owned(user: Any) -> QuerySet[Conversation]:
    """Conversations ``user`` owns; none for an anonymous or missing user."""
    if user is None or not getattr(user, "is_authenticated", False) or user.pk is None:
        return Conversation.objects.none()
    return Conversation.objects.filter(owner_id=user.pk)


def listed(user: Any) -> QuerySet[Conversation]:
    """Conversations ``user`` owns that the list and search show: temporary chats left out
    (docs/data.md "Temporary chats")."""
    return owned(user).filter(temporary=False)


def owned_one(user: Any, conversation_id: Any) -> QuerySet[Conversation]:
    """The one-row queryset for ``conversation_id`` if ``user`` owns it.

    Raises:
        ProblemError: ``not-found`` when the id does not parse.
    """
    cid = parse_id(conversation_id)
    if cid is None:
        raise not_found()
    return owned(user).filter(pk=cid)


def get_owned(user: Any, conversation_id: Any, *, for_update: bool = False) -> Conversation:
    """Fetch a conversation ``user`` owns (row-locked when ``for_update``).

    Raises:
        ProblemError: ``not-found`` for a missing, foreign or malformed id.
    """
    qs = owned_one(user, conversation_id)
    if for_update:
        qs = qs.select_for_update()
    conversation = qs.first()
    if conversation is None:
        raise not_found()
    return conversation


def with_tool_calls(messages: Any) -> Any:
    """``messages`` (a Message queryset) with their calls prefetched in call order, and their
    attachments in the order they were sent (docs/attachments.md "Rows")."""
    return messages.prefetch_related(
        Prefetch("tool_calls", queryset=ToolCall.objects.select_related("decided_by").order_by("position")),
        Prefetch("attachments", queryset=Attachment.objects.order_by("position")))


def storable(text: str) -> str:
    """``text`` as every database can store it: NUL (PostgreSQL's ``text`` has none) and lone
    surrogates (UTF-8 cannot encode them; a provider's JSON may carry ``"\\ud800"``) each
    replaced by U+FFFD (docs/store.md "Rows"; :mod:`jxai_app.core.unicode`)."""
    return replace_unclean(text)


def bounded_text(value: Any, *, what: str, limit: int) -> str:
    """A user's free text (a feedback comment, custom instructions) as saved: trimmed, NUL
    and lone surrogates as U+FFFD (:func:`storable`), at most ``limit`` characters.

    Raises:
        ProblemError: ``invalid-request`` when ``value`` is not a string or is longer than
            ``limit`` characters once trimmed (``what`` names it in the detail).
    """
    if not isinstance(value, str):
        raise invalid(f"{what} must be text.")
    text = storable(value.strip())
    if len(text) > limit:
        raise invalid(f"{what} may be at most {limit} characters (this is {len(text)}).")
    return text


def title_from(text: str) -> str:
    """A conversation title from a user message: its first non-empty line, at most
    :data:`TITLE_MAX_CHARS` characters (``…`` marks a cut)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= TITLE_MAX_CHARS else line[: TITLE_MAX_CHARS - 1].rstrip() + "…"
