"""Erasure of a user's data (docs/data.md "Erasure"): every content row goes with the user's
row; the usage ledger's rows stay, anonymised (their user foreign key is ``SET_NULL``), so
quotas of the day and cost reports keep their totals; an :class:`~jxai_app.models.ErasureRecord`
says who ran it and when.

Refused while one of the user's turns runs or waits for approval (its writes would land after
the erasure) and while staff hold one of their conversations (a legal hold keeps it).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Q

from jxai_app.core.problems import problem_error
from jxai_app.models import Conversation, ConversationStatus, ErasureRecord, SignInEvent

__all__ = ["account_erase"]


@transaction.atomic
def account_erase(*, user: Any, by: Any = None) -> ErasureRecord:
    """Delete ``user`` and every row that is theirs (conversations with their messages, tool
    calls and feedback; notes, settings, API tokens, limits, reservations, admissions, and
    whatever else cascades from the user), keep their ledger rows and sign-in audit events
    without the user (the events also lose the name and detail), and record it.

    Args:
        user: the user to erase.
        by: the staff member running it, ``None`` when the user deletes their own account.

    Returns:
        The saved record (``removed``: rows deleted per model label).

    Raises:
        ProblemError: ``conflict`` when a turn of theirs is running or waiting for approval,
            or a conversation of theirs is under a legal hold.
    """
    states = list(Conversation.objects.select_for_update().filter(owner_id=user.pk)
                  .values_list("status", "legal_hold"))
    if any(held for _, held in states):
        raise problem_error("conflict", "A conversation of this account is under a legal hold, so its data cannot "
                            "be erased now; the operator can tell you more.", code="legal_hold")
    if any(status in (ConversationStatus.STREAMING, ConversationStatus.AWAITING_APPROVAL) for status, _ in states):
        raise problem_error("conflict", "An answer is still being written (or waits for your approval); stop it "
                            "first, then try again.")
    erased_pk = user.pk
    # The sign-in audit stays (a security record) but no longer names them (docs/data.md "Erasure").
    SignInEvent.objects.filter(Q(user_id=erased_pk) | Q(user__isnull=True, actor__iexact=user.get_username())) \
        .update(user=None, actor="", detail="")
    _, removed = user.delete()
    return ErasureRecord.objects.create(erased_user_id=erased_pk, erased_by=by, self_service=by is None,
                                        removed=removed)
