"""Conversation services: create, open, list, rename, delete, read the transcript.

HackSoft style: keyword-only, typed, short transactions. Every service that takes a
conversation id also takes the requesting user and raises ``ProblemError`` ``not-found`` for
a missing, malformed or foreign id alike.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from jxai_app.models import Conversation, Message, MessageRole
from jxai_app.store.branches import ActivePath, active_path
from jxai_app.store.common import get_owned, invalid, listed, not_found, owned_one, with_tool_calls

TITLE_MAX_LENGTH = Conversation._meta.get_field("title").max_length or 200


@transaction.atomic(savepoint=False)
def conversation_create(
    *, user: Any, model: str, title: str = "", system_prompt: str | None = None, temporary: bool = False
) -> Conversation:
    """Create an idle conversation owned by ``user``.

    Args:
        user: an authenticated user (the owner).
        model: model alias (validated by the caller against the model registry).
        title: optional title; derived from the first user message when empty.
        system_prompt: when given (non-empty), saved as a ``system`` message at position 0
            (the active leaf: the root every message follows) and sent first on the wire
            (docs/store.md "The OpenAI wire export").
        temporary: a temporary chat (docs/data.md "Temporary chats").

    Raises:
        ProblemError: ``invalid-request`` for an anonymous user or an over-long title.
    """
    if user is None or not getattr(user, "is_authenticated", False):
        raise invalid("A conversation needs a logged-in owner.")
    title = title.strip()
    if len(title) > TITLE_MAX_LENGTH:
        raise invalid(f"The title is longer than {TITLE_MAX_LENGTH} characters.")
    conversation = Conversation.objects.create(owner=user, model=model, title=title, temporary=temporary)
    if system_prompt:
        system = Message.objects.create(conversation=conversation, position=0, role=MessageRole.SYSTEM,
                                        content=system_prompt)
        conversation.active_leaf = system
        conversation.save(update_fields=["active_leaf"])
    return conversation


def conversation_get(*, user: Any, conversation_id: uuid.UUID | str) -> Conversation:
    """A conversation ``user`` owns. A turn that died is recovered by the workers' lease watch
    within seconds (:mod:`jxai_app.store.recovery`), not here.

    Raises:
        ProblemError: ``not-found`` for a missing, malformed or foreign id.
    """
    return get_owned(user, conversation_id)


def conversation_list(*, user: Any) -> QuerySet[Conversation]:
    """``user``'s conversations, most recently updated first (index ``jxai_conv_owner_recent``),
    temporary chats left out (docs/data.md "Temporary chats"). Slice it for paging; empty for
    an anonymous user."""
    return listed(user).order_by("-updated_at")


def conversation_page(*, user: Any, size: int, before: str | None = None) -> tuple[list[Conversation], str | None]:
    """One page of ``user``'s conversations (temporary chats left out), most recently updated
    first (ties by id), after the cursor ``before``.

    Returns:
        ``(conversations, next)``: at most ``size`` rows and the cursor of the following page
        (``"<updatedAt ISO>|<id>"``), ``None`` when there is none.

    Raises:
        ProblemError: ``invalid-request`` when ``before`` is not such a cursor.
    """
    size = max(1, size)
    rows = listed(user).order_by("-updated_at", "-pk")
    if before is not None:
        at, pk = _cursor(before)
        rows = rows.filter(Q(updated_at__lt=at) | Q(updated_at=at, pk__lt=pk))
    page = list(rows[: size + 1])
    if len(page) <= size:
        return page, None
    last = page[size - 1]
    return page[:size], f"{last.updated_at.isoformat()}|{last.pk}"


def _cursor(before: str) -> tuple[datetime, uuid.UUID]:
    try:
        at, pk = before.split("|")
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError("naive")
        return parsed, uuid.UUID(pk)
    except ValueError:
        raise invalid("'list': 'before' must be the 'next' cursor of a previous 'conversations' frame.") from None


def message_list(*, user: Any, conversation_id: uuid.UUID | str) -> tuple[Conversation, ActivePath]:
    """A conversation ``user`` owns with its active path (docs/store.md "Branches"): the
    messages root first, calls prefetched in call order, and each message's siblings. A
    running turn's placeholder is included (status ``streaming``, empty: its text lives in
    the runner until the round ends). Four queries, however long the path.

    Raises:
        ProblemError: ``not-found`` for a missing, malformed or foreign id.
    """
    conversation = conversation_get(user=user, conversation_id=conversation_id)
    return conversation, active_path(conversation)


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



def conversation_by_id(conversation_id: uuid.UUID) -> Conversation | None:
    """The conversation with this id, or ``None``, for code acting for its owner already (a
    turn's runner, the lease watch): no ownership check here."""
    return Conversation.objects.filter(pk=conversation_id).first()


def message_by_id(message_id: int) -> Message | None:
    """The message with this id with its calls (in call order) and feedback, or ``None``; no ownership
    check (see :func:`conversation_by_id`)."""
    return with_tool_calls(Message.objects.filter(pk=message_id).select_related("feedback")).first()


def database_ping() -> None:
    """One cheap query: returns when the database answers.

    Raises:
        django.db.DatabaseError: it does not.
    """
    Conversation.objects.exists()
