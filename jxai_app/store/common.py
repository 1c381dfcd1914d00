"""Helpers shared by the store's services: ownership lookups, positions, limits.

Every service that takes a conversation id also takes the requesting user, and answers
another user's conversation exactly like a missing one (issue 6: never a 403 that confirms
it exists). Ids that do not parse are missing ids too.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from django.db.models import Max, QuerySet

from jxai_app.core.errors import ProblemError
from jxai_app.models import Conversation, Message
from jxai_app.core.problems import problem_error
from jxai_app.store import sql

FLUSH_INTERVAL_SECONDS: Final[float] = 2.0
"""Most one placeholder write per this many seconds while streaming (SPEC §6)."""
KEEPALIVE_INTERVAL_SECONDS: Final[float] = 10.0
"""A running turn should show life at least this often (see ``TurnRecorder.keepalive``)."""
STALE_AFTER_SECONDS: Final[float] = 30.0
"""A streaming turn with no write for this long is dead (recovery threshold)."""
TITLE_MAX_CHARS: Final[int] = 60
"""Length of a title derived from the first user message."""

_NOT_FOUND_DETAIL: Final[str] = "Conversation not found."


def not_found() -> ProblemError:
    """The ``not-found`` problem used for missing *and* foreign conversations alike."""
    return problem_error("not-found", _NOT_FOUND_DETAIL)


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


@sql.statement
def _locked_row() -> str:
    return (f"SELECT {sql.columns(Conversation)} FROM {sql.table(Conversation)} "
            f"WHERE {sql.column(Conversation, 'id')} = %s AND {sql.column(Conversation, 'owner')} = %s{sql.locking()}")


def lock_owned(user: Any, conversation_id: Any) -> Conversation:
    """:func:`get_owned` with ``for_update=True`` in one hand-written statement (the send
    path, :mod:`jxai_app.store.sql`): the row of a conversation ``user`` owns, locked until
    the transaction ends where the database has row locks.

    Raises:
        ProblemError: ``not-found`` for a missing, foreign or malformed id (or no user).
    """
    rows, _ = sql.execute(*lock_owned_query(user, conversation_id))
    return locked_from(rows)


def lock_owned_query(user: Any, conversation_id: Any) -> tuple[str, list[Any]]:
    """:func:`lock_owned`'s statement and parameters, to send with others
    (:func:`jxai_app.store.sql.fetch_together`); read its rows with :func:`locked_from`.

    Raises:
        ProblemError: ``not-found`` for a malformed id or no user (nothing to ask).
    """
    cid = parse_id(conversation_id)
    if cid is None or user is None or not getattr(user, "is_authenticated", False) or user.pk is None:
        raise not_found()
    return _locked_row(), [sql.value(Conversation, "id", cid), user.pk]


def locked_from(rows: list[tuple[Any, ...]]) -> Conversation:
    """The conversation of :func:`lock_owned_query`'s rows.

    Raises:
        ProblemError: ``not-found`` when there is none (missing or foreign).
    """
    found = sql.rows_to_instances(Conversation, rows)
    if not found:
        raise not_found()
    return found[0]


def next_position(conversation_id: uuid.UUID) -> int:
    """The position after the conversation's last message (0 when it has none)."""
    top = Message.objects.filter(conversation_id=conversation_id).aggregate(top=Max("position"))["top"]
    return 0 if top is None else top + 1


def title_from(text: str) -> str:
    """A conversation title from a user message: its first non-empty line, at most
    :data:`TITLE_MAX_CHARS` characters (``…`` marks a cut)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= TITLE_MAX_CHARS else line[: TITLE_MAX_CHARS - 1].rstrip() + "…"
