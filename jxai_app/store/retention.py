"""Retention: conversations idle longer than ``JXAI_RETENTION_DAYS`` are removed by
``manage.py purge_conversations`` (docs/data.md "Retention").

Idle means no change for that long, to the conversation (``updated_at``: a send, a turn's
end, a rename) or to any of its messages (their ``updated_at``: an imported conversation keeps
its original times, but its messages were written at the import). Never
removed: a conversation whose turn is running or waiting for approval, or one under a legal
hold. The usage ledger is per user and day, not per conversation, so it is untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, QuerySet

from jxai_app.models import Conversation, ConversationStatus, Message

__all__ = ["Purged", "conversations_idle", "conversations_purge"]


@dataclass(frozen=True, slots=True)
class Purged:
    """One conversation removed (or, on a dry run, that would be)."""

    id: str
    owner_id: int
    updated_at: datetime
    messages: int


def conversations_idle(*, now: datetime, days: int) -> QuerySet[Conversation]:
    """Conversations with no change (theirs or a message's) for more than ``days`` days before
    ``now`` that may go: no turn running or waiting for approval, no legal hold (oldest first)."""
    cutoff = now - timedelta(days=days)
    return (Conversation.objects.filter(updated_at__lt=cutoff, legal_hold=False, turn_id__isnull=True)
            .exclude(status__in=(ConversationStatus.STREAMING, ConversationStatus.AWAITING_APPROVAL))
            .exclude(Exists(Message.objects.filter(conversation=OuterRef("pk"), updated_at__gte=cutoff)))
            .order_by("updated_at", "pk"))


def conversations_purge(*, now: datetime, days: int, dry_run: bool = False) -> list[Purged]:
    """Remove the conversations :func:`conversations_idle` selects, each in a transaction of
    its own that checks the rule again on the locked row (a send may have just woken it).

    Args:
        now: the clock.
        days: ``JXAI_RETENTION_DAYS`` (at least 1).
        dry_run: only list them.

    Returns:
        What was removed (or would be), oldest first.
    """
    candidates = list(conversations_idle(now=now, days=days).annotate(message_count=Count("messages"))
                      .values_list("pk", "owner_id", "updated_at", "message_count"))
    out = []
    for pk, owner_id, updated_at, count in candidates:
        if not dry_run:
            with transaction.atomic():
                row = conversations_idle(now=now, days=days).select_for_update().filter(pk=pk).first()
                if row is None:
                    continue
                row.delete()
        out.append(Purged(id=str(pk), owner_id=owner_id, updated_at=updated_at, messages=count))
    return out
