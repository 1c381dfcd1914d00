"""Temporary chats: left out of the list and search, removed once idle (docs/data.md
"Temporary chats").

A conversation created with ``temporary`` on stays the owner's like any other (its
address opens it, a turn runs in it) but :func:`~jxai_app.store.conversation.conversation_list`,
the list's pages and search never return it. :func:`temporary_chats_purge` removes those
whose last activity is older than ``JXAI_TEMPORARY_CHAT_HOURS``.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from jxai_app import conf
from jxai_app.models import Conversation, ConversationStatus

__all__ = ["temporary_chats_purge"]


@transaction.atomic
def temporary_chats_purge(*, hours: float | None = None, now: datetime | None = None,
                          dry_run: bool = False) -> list[uuid.UUID]:
    """Remove the temporary chats idle longer than ``hours`` (default
    ``JXAI_TEMPORARY_CHAT_HOURS``), with their messages and calls.

    Last activity is the newest of the conversation's ``updated_at`` and its messages'
    ``updated_at``. A chat whose turn is running (``streaming``, or holding a ``turn_id``)
    or waiting for an approval is never removed, however old: its turn ends first; nor is one
    staff put under a legal hold (docs/data.md "Retention"). The
    rows are locked while they are chosen, so a send that starts meanwhile waits or wins.

    Args:
        hours: the idle time in hours.
        now: the clock (tests).
        dry_run: only say which would go.

    Returns:
        The ids of the chats removed (or that would be, with ``dry_run``).
    """
    limit = (now or timezone.now()) - timedelta(hours=conf.temporary_chat_hours() if hours is None else hours)
    idle = (Conversation.objects.filter(temporary=True, legal_hold=False, turn_id__isnull=True)
            .exclude(status__in=[ConversationStatus.STREAMING, ConversationStatus.AWAITING_APPROVAL])
            .annotate(active_at=Greatest("updated_at", Coalesce(Max("messages__updated_at"), "updated_at")))
            .filter(active_at__lt=limit))
    ids = list(idle.values_list("pk", flat=True))
    if ids and not dry_run:
        locked = list(Conversation.objects.select_for_update().filter(
            pk__in=ids, legal_hold=False, turn_id__isnull=True).exclude(
            status__in=[ConversationStatus.STREAMING, ConversationStatus.AWAITING_APPROVAL])
            .values_list("pk", flat=True))
        Conversation.objects.filter(pk__in=locked).delete()
        ids = locked
    return ids
