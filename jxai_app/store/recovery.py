"""Turns whose worker died: the lease rule and the recovery (docs/turns.md "Leases").

A running turn holds a **lease** in its conversation row: ``Conversation.turn_heartbeat`` is
set by the send and renewed by the turn's worker every third of the lease, for all its
running turns in one statement (:func:`leases_renew`). A turn whose lease is older than
``lease`` seconds (``JXAI_TURN_LEASE_SECONDS``, default 6) is **dead**: its worker was
killed, or lost the database for longer than that.

Recovering a dead turn applies the store's rule for an interrupted turn: its streaming
placeholder (and the placeholder's calls) is deleted, completed rounds stay (the active path
ends at the last of them, docs/store.md "Branches"), and the
conversation ends in ``error`` with a problem saying the answer was interrupted (the page
offers Retry). A send to a conversation whose turn is dead recovers it first (same
transaction), so the conversation accepts a new send as soon as the lease lapsed.

Who recovers: every worker's lease watch (:mod:`jxai_app.turns.recovery`), the
``recover_partial_messages`` command, and a send. Each recovery is one conditional UPDATE
guarded by the turn id and the lapsed lease, so two recoverers never both end a turn, and a
runner that renewed its lease in time keeps it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from collections.abc import Collection
from typing import Any

from django.db import transaction
from django.utils import timezone

from jxai_app.core.problems import problem
from jxai_app.models import Conversation, ConversationStatus, Message, MessageStatus
from jxai_app.store.branches import leaf_after_drop
from jxai_app.store.common import LEASE_SECONDS

__all__ = ["INTERRUPTED", "Recovered", "lease_lapsed", "leases_renew", "strays_drop", "turn_abandon",
           "turns_lapsed"]

INTERRUPTED = ("The answer was interrupted: the server running it stopped before it finished. "
               "The partial answer was dropped; Retry to ask again.")
"""``last_error`` of a conversation whose turn was recovered."""


@dataclass(frozen=True, slots=True)
class Recovered:
    """One turn ended without its runner: where to publish its end, and what its budget
    forfeits (:func:`jxai_app.policy.budget.forfeit`)."""

    conversation_id: uuid.UUID
    turn_id: uuid.UUID | None
    owner_id: Any
    model: str
    """The conversation's model alias (prices the forfeited prompt)."""


def _cutoff(lease: float, now: datetime | None) -> datetime:
    return (now or timezone.now()) - timedelta(seconds=lease)


def lease_lapsed(conversation: Conversation, *, lease: float = LEASE_SECONDS, now: datetime | None = None) -> bool:
    """True when ``conversation`` is streaming and its turn's lease is older than ``lease``
    seconds (or was never set). Reads only the given row; idle and error rows never lapse."""
    if conversation.status != ConversationStatus.STREAMING:
        return False
    return conversation.turn_heartbeat is None or conversation.turn_heartbeat < _cutoff(lease, now)


def turn_abandon(*, conversation_id: uuid.UUID, turn_id: uuid.UUID | None, interrupted: bool,
                 lease: float | None = None, now: datetime | None = None) -> Recovered | None:
    """End turn ``turn_id`` of a conversation, dropping its partial message (completed rounds
    stay): Stop of a turn nobody runs (``interrupted`` False → ``idle``, error cleared) or the
    recovery of a dead one (``interrupted`` True → ``error`` with :data:`INTERRUPTED`). Runs
    in the caller's transaction (one of its own when there is none); the caller forfeits
    the turn's budget in it (:func:`jxai_app.policy.budget.forfeit`).

    Args:
        conversation_id: the conversation (ownership already checked by the caller).
        turn_id: the turn to end; ``None`` matches a streaming row with no turn id.
        interrupted: see above.
        lease: when given, only end the turn if its lease is still lapsed at this length (in
            the same UPDATE, so a runner that just renewed keeps its turn).
        now: the time to judge the lease by (tests); default now.

    Returns:
        The ended turn, or ``None`` when it had ended already or is alive.
    """
    with transaction.atomic(savepoint=False):
        return _abandon(conversation_id, turn_id, interrupted, lease, now)


def _abandon(conversation_id: uuid.UUID, turn_id: uuid.UUID | None, interrupted: bool, lease: float | None,
             now: datetime | None) -> Recovered | None:
    rows = Conversation.objects.filter(pk=conversation_id, status=ConversationStatus.STREAMING, turn_id=turn_id)
    if lease is not None:
        cutoff = _cutoff(lease, now)
        rows = rows.filter(turn_heartbeat__lt=cutoff) | rows.filter(turn_heartbeat__isnull=True)
    changes: dict[str, Any] = {"status": ConversationStatus.IDLE, "last_error": "", "last_problem": None}
    if interrupted:
        changes = {"status": ConversationStatus.ERROR, "last_error": INTERRUPTED,
                   "last_problem": problem("internal-error", INTERRUPTED, code="turn_interrupted")}
    if not rows.update(turn_id=None, turn_heartbeat=None, updated_at=timezone.now(), **changes):
        return None
    partial = Message.objects.filter(conversation_id=conversation_id, status=MessageStatus.STREAMING)
    parents = list(partial.values_list("parent_id", flat=True))
    if parents:
        partial.delete()
        leaf, _ = leaf_after_drop(conversation_id, parents[0], stopped=not interrupted)
        Conversation.objects.filter(pk=conversation_id).update(active_leaf_id=leaf)
    owner, model = Conversation.objects.filter(pk=conversation_id).values_list("owner_id", "model").get()
    return Recovered(conversation_id=conversation_id, turn_id=turn_id, owner_id=owner, model=model or "")


def leases_renew(turn_ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
    """Renew the leases of these running turns (one SELECT, one UPDATE, however many).

    Returns:
        The turns that still run; a turn missing from it was stopped, taken or deleted
        elsewhere, and its runner must stop writing.
    """
    if not turn_ids:
        return set()
    live = set(Conversation.objects.filter(turn_id__in=list(turn_ids), status=ConversationStatus.STREAMING)
               .values_list("turn_id", flat=True))
    if live:
        Conversation.objects.filter(turn_id__in=list(live), status=ConversationStatus.STREAMING).update(
            turn_heartbeat=timezone.now())
    return live


def turns_lapsed(*, lease: float = LEASE_SECONDS, everything: bool = False, now: datetime | None = None,
                 exclude: Collection[uuid.UUID] = ()) -> list[tuple[uuid.UUID, uuid.UUID | None]]:
    """The dead turns to recover (one indexed query; the workers' lease watch runs it every
    second): ``(conversation id, turn id)`` of each; end each with :func:`turn_abandon`
    (with ``lease``, so a runner that renewed since keeps its turn).

    Args:
        lease: seconds after which an unrenewed lease has lapsed.
        everything: recover every streaming turn whatever its lease (a single-process start,
            when no turn can be alive).
        now: the time to judge by (tests).
        exclude: conversations whose turn runs in the caller's own process (alive, however
            late its renewal).

    """
    candidates = Conversation.objects.filter(status=ConversationStatus.STREAMING).exclude(pk__in=list(exclude))
    if not everything:
        cutoff = _cutoff(lease, now)
        candidates = candidates.filter(turn_heartbeat__lt=cutoff) | candidates.filter(turn_heartbeat__isnull=True)
    return list(candidates.values_list("pk", "turn_id"))


def strays_drop() -> int:
    """Delete placeholders left outside any running turn (a crash between two writes of an
    older version); a scan of the messages, for the ``recover_partial_messages`` command, not
    the lease watch. Returns how many were deleted."""
    strays = Message.objects.filter(status=MessageStatus.STREAMING).exclude(
        conversation__status=ConversationStatus.STREAMING)
    for pk, parent_id, conversation_id in strays.values_list("pk", "parent_id", "conversation_id"):
        Conversation.objects.filter(pk=conversation_id, active_leaf_id=pk).update(active_leaf_id=parent_id)
    deleted, _ = strays.delete()
    return deleted
