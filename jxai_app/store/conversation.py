"""Conversation services: create, open, list, rename, delete, read the transcript.

HackSoft style: keyword-only, typed, short transactions. Every service that takes a
conversation id also takes the requesting user and raises ``ProblemError`` ``not-found`` for
a missing, malformed or foreign id alike.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from jxai_app.models import Conversation, Message, MessageRole
from jxai_app.store.common import STALE_AFTER_SECONDS, get_owned, invalid, not_found, owned, owned_one
from jxai_app.store.recovery import turn_abandon, turn_is_stale
from jxai_app.store.wire import with_tool_calls

TITLE_MAX_LENGTH = Conversation._meta.get_field("title").max_length or 200


@transaction.atomic
def conversation_create(
    *, user: Any, model: str, title: str = "", system_prompt: str | None = None
) -> Conversation:
    """Create an idle conversation owned by ``user``.

    Args:
        user: an authenticated user (the owner).
        model: model alias (validated by the caller against the model registry).
        title: optional title; derived from the first user message when empty.
        system_prompt: when given (non-empty), saved as a ``system`` message at position 0
            and sent first on the wire (CS-29).

    Raises:
        ProblemError: ``invalid-request`` for an anonymous user or an over-long title.
    """
    if user is None or not getattr(user, "is_authenticated", False):
        raise invalid("A conversation needs a logged-in owner.")
    title = title.strip()
    if len(title) > TITLE_MAX_LENGTH:
        raise invalid(f"The title is longer than {TITLE_MAX_LENGTH} characters.")
    conversation = Conversation.objects.create(owner=user, model=model, title=title)
    if system_prompt:
        Message.objects.create(conversation=conversation, position=0, role=MessageRole.SYSTEM, content=system_prompt)
    return conversation


def conversation_get(
    *, user: Any, conversation_id: uuid.UUID | str, stale_after: float = STALE_AFTER_SECONDS
) -> Conversation:
    """Open a conversation ``user`` owns, first dropping a partial message whose turn died
    (SPEC §6 "dropped … at the next access to the conversation").

    Raises:
        ProblemError: ``not-found`` for a missing, malformed or foreign id.
    """
    conversation = get_owned(user, conversation_id)
    if turn_is_stale(conversation, stale_after=stale_after):
        turn_abandon(conversation_id=conversation.pk, turn_id=conversation.turn_id, stale_after=stale_after)
        conversation.refresh_from_db()
    return conversation


def conversation_list(*, user: Any) -> QuerySet[Conversation]:
    """``user``'s conversations, most recently updated first (index ``jxai_conv_owner_recent``).
    Slice it for paging; empty for an anonymous user."""
    return owned(user).order_by("-updated_at")


def message_list(
    *, user: Any, conversation_id: uuid.UUID | str, stale_after: float = STALE_AFTER_SECONDS
) -> tuple[Conversation, list[Message]]:
    """Open a conversation (as :func:`conversation_get`) and return it with its messages in
    position order, calls prefetched in call order. A live turn's placeholder is included
    (status ``streaming``, content as of the last flush).

    Raises:
        ProblemError: ``not-found`` for a missing, malformed or foreign id.
    """
    conversation = conversation_get(user=user, conversation_id=conversation_id, stale_after=stale_after)
    messages = with_tool_calls(Message.objects.filter(conversation=conversation).order_by("position"))
    return conversation, list(messages)


def conversation_rename(*, user: Any, conversation_id: uuid.UUID | str, title: str) -> Conversation:
    """Set the title (trimmed, 1 … 200 characters).

    Raises:
        ProblemError: ``not-found``; ``invalid-request`` for an empty or over-long title.
    """
    title = title.strip() if isinstance(title, str) else ""
    if not title:
        raise invalid("The title must not be empty.")
    if len(title) > TITLE_MAX_LENGTH:
        raise invalid(f"The title is longer than {TITLE_MAX_LENGTH} characters.")
    if not owned_one(user, conversation_id).update(title=title, updated_at=timezone.now()):
        raise not_found()
    return get_owned(user, conversation_id)


@transaction.atomic
def conversation_delete(*, user: Any, conversation_id: uuid.UUID | str) -> uuid.UUID | None:
    """Delete a conversation with its messages and calls.

    Returns:
        The id of the turn that was running in it (the caller should stop that turn; its
        recorder finds the rows gone and writes nothing more), or ``None``.

    Raises:
        ProblemError: ``not-found``.
    """
    conversation = get_owned(user, conversation_id, for_update=True)
    running = conversation.turn_id
    conversation.delete()
    return running

