"""Dropping partial messages whose turn no longer runs (SPEC §6, issue 7 "Recovery").

A turn is **alive** while it shows life: ``Conversation.turn_heartbeat`` (set by a send,
refreshed by ``TurnRecorder.keepalive``) or any write to one of the conversation's messages
(placeholder flushes every 2 s while text streams, a round's end, a tool reply) happened
within the threshold (default :data:`~jxai_app.store.common.STALE_AFTER_SECONDS`). Using
the message writes as heartbeats keeps a flush at one write (the write budget, issue 7).

A dead turn is abandoned: its streaming placeholder (and any calls) is deleted, completed
messages stay, and the conversation returns to ``idle`` with no turn. This runs from the
``recover_partial_messages`` management command (``make run``; ``--all`` at a
single-process start) and whenever a conversation is opened or sent to.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from jxai_app.models import Conversation, ConversationStatus, Message, MessageStatus
from jxai_app.store.common import STALE_AFTER_SECONDS


def _alive_since(cutoff: datetime) -> Q:
    """Rows of a conversation whose turn showed life at or after ``cutoff``."""
    recent_write = Exists(Message.objects.filter(conversation_id=OuterRef("pk"), updated_at__gte=cutoff))
    return Q(turn_heartbeat__gte=cutoff) | Q(recent_write)


def _cutoff(now: datetime | None, stale_after: float) -> datetime:
    return (now or timezone.now()) - timedelta(seconds=stale_after)


def turn_is_stale(
    conversation: Conversation, *, stale_after: float = STALE_AFTER_SECONDS, now: datetime | None = None
) -> bool:
    """True when ``conversation`` is streaming but its turn showed no life for
    ``stale_after`` seconds (one query). Idle and error conversations are never stale."""
    if conversation.status != ConversationStatus.STREAMING:
        return False
    cutoff = _cutoff(now, stale_after)
    return not Conversation.objects.filter(pk=conversation.pk).filter(_alive_since(cutoff)).exists()


@transaction.atomic
def turn_abandon(
    *, conversation_id: uuid.UUID, turn_id: uuid.UUID | None, stale_after: float | None = None,
    now: datetime | None = None,
) -> bool:
    """End the turn ``turn_id`` of a conversation as if cancelled: delete its streaming
    placeholder and calls, return to ``idle`` (CS-19).

    Args:
        conversation_id: the conversation (ownership already checked by the caller).
        turn_id: the turn to end; ``None`` matches a streaming row with no turn id.
        stale_after: when given, only end it if it is still stale at this threshold
            (checked in the same UPDATE, so a turn that just wrote survives).
        now: the time to judge staleness by (tests); defaults to now.

    Returns:
        True when the turn was ended, False when it had already ended or showed life.
    """
    rows = Conversation.objects.filter(pk=conversation_id, status=ConversationStatus.STREAMING, turn_id=turn_id)
    if stale_after is not None:
        rows = rows.filter(~_alive_since(_cutoff(now, stale_after)))
    ended = rows.update(
        status=ConversationStatus.IDLE, turn_id=None, turn_heartbeat=None,
        last_error="", last_problem=None, updated_at=timezone.now(),
    )
    if ended:
        Message.objects.filter(conversation_id=conversation_id, status=MessageStatus.STREAMING).delete()
    return bool(ended)


def turns_recover(
    *, stale_after: float = STALE_AFTER_SECONDS, everything: bool = False, now: datetime | None = None
) -> int:
    """Abandon every dead turn and drop placeholders left outside any turn.

    Args:
        stale_after: seconds without life after which a turn is dead.
        everything: end every streaming turn whatever its heartbeat (a single-process
            start, when no turn can be alive).
        now: the time to judge by (tests).

    Returns:
        How many conversations were returned to idle.
    """
    candidates = Conversation.objects.filter(status=ConversationStatus.STREAMING)
    if not everything:
        candidates = candidates.filter(~_alive_since(_cutoff(now, stale_after)))
    recovered = 0
    for cid, tid in candidates.values_list("pk", "turn_id"):
        recovered += turn_abandon(
            conversation_id=cid, turn_id=tid, stale_after=None if everything else stale_after, now=now
        )
    # A placeholder outside a streaming conversation cannot belong to a live turn.
    Message.objects.filter(status=MessageStatus.STREAMING).exclude(
        conversation__status=ConversationStatus.STREAMING
    ).delete()
    return recovered
