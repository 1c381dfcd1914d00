"""Tool calls that wait for a person's approval: the decision, the resume, expiry and Stop
(docs/approval.md).

A paused turn holds nothing: its conversation is ``awaiting_approval`` with no turn id and no
lease, so the lease watch never takes it for dead, a send is refused, and any worker may
answer. Each decision is one transaction: the conversation row is locked by id and owner (a
foreign or missing id is ``not-found``, like every other service), the call's state changes
with one conditional ``UPDATE … WHERE approval_state = 'awaiting_approval'`` (the first
decision wins, a second one is a ``conflict``), and when no call of the paused round waits
any more the same transaction claims the conversation for the resumed turn with a fresh turn
id and lease (one conditional UPDATE from ``awaiting_approval`` to ``streaming``, so exactly
one worker resumes it). The resumed turn's history is the store's own
(:func:`~jxai_app.store.wire.to_messages`), repaired by the agent loop as every request is.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from jxai_app.core.agent import Decision
from jxai_app.core.agent.calls import tool_message
from jxai_app.core.problems import problem_error
from jxai_app.models import ApprovalState, Conversation, ConversationStatus, Message, ToolCall
from jxai_app.store.branches import Tree
from jxai_app.store.common import bounded_text, get_owned
from jxai_app.store.turn import TurnStart, tool_result_insert
from jxai_app.store.wire import takes_files, to_messages

__all__ = [
    "STOPPED_REASON", "Decided", "approval_decide", "approvals_expire", "approvals_stop", "denial_text",
    "expiry_text",
]

STOPPED_REASON = "the turn was stopped"
"""The reason recorded for the calls a Stop denies."""
MAX_REASON_CHARS = 2000
"""The longest reason kept with a decision (longer ones are cut)."""


def denial_text(reason: str) -> str:
    """The failed result the model reads for a denied call (docs/approval.md "What the model sees")."""
    return f"The user denied this call: {reason.strip() or 'no reason given'}"


def expiry_text(timeout: float) -> str:
    """The failed result the model reads for a call nobody decided in time."""
    return (f"The user did not answer the approval request within {timeout:g} seconds; "
            "the call was not run.")


@dataclass(frozen=True, kw_only=True, slots=True)
class Decided:
    """What one decision changed."""

    conversation_id: uuid.UUID
    message_id: int
    """The assistant message whose call was decided (its ``message_saved`` shows the new state)."""
    resumed: TurnStart | None
    """The resumed turn when this was the round's last waiting call (start its runner), else ``None``."""


def _paused_round(conversation: Conversation) -> list[ToolCall]:
    """The paused round's calls that needed approval and have no result yet (waiting or
    decided), in call order: those of the last assistant message that has any."""
    unanswered = (ToolCall.objects.filter(message__conversation=conversation, finished_at__isnull=True)
                  .exclude(approval_state=ApprovalState.NONE))
    latest = unanswered.aggregate(top=Max("message__position"))["top"]
    if latest is None:
        return []
    return list(unanswered.filter(message__position=latest).order_by("position"))


def _paused_turn(conversation: Conversation) -> tuple[Tree, int, list[int], dict[int, int]]:
    """The paused turn on the active path (nothing moves the leaf while a turn waits: sends,
    edits, regenerates and branch switches are refused): the tree, the turn's question, the
    ids of the turn's messages after it (root first) and their positions."""
    tree = Tree.of(conversation.pk)
    path = tree.active
    question = None if tree.leaf is None else tree.question_of(tree.leaf)
    assert question is not None  # a paused round follows its user message
    turn_ids = path[path.index(question) + 1:]
    positions = dict(Message.objects.filter(pk__in=turn_ids).values_list("pk", "position"))
    return tree, question, turn_ids, positions


def _prior_calls(turn_ids: list[int]) -> dict[str, int]:
    """Calls of the turn (its messages ``turn_ids``) that ran (not denied, not expired, not
    waiting), by tool name, for the resumed turn's per-turn caps (docs/approval.md "Limits")."""
    ran = ToolCall.objects.filter(message_id__in=turn_ids, finished_at__isnull=False,
                                  approval_state__in=[ApprovalState.NONE, ApprovalState.APPROVED])
    return dict(Counter(ran.values_list("name", flat=True)))


def _decision(call: ToolCall, timeout: float) -> Decision:
    refusal = ""
    if call.approval_state == ApprovalState.DENIED:
        refusal = denial_text(call.decision_reason)
    elif call.approval_state == ApprovalState.EXPIRED:
        refusal = expiry_text(timeout)
    return Decision(call_id=call.call_id, name=call.name, arguments=call.arguments,
                    approved=call.approval_state == ApprovalState.APPROVED, refusal=refusal)


def _resume(conversation: Conversation, calls: list[ToolCall], *, timeout: float) -> TurnStart | None:
    """Inside the deciding transaction: when no call of the paused round waits any more, claim
    the conversation for the resumed turn (fresh turn id and lease) and describe it."""
    if any(c.approval_state == ApprovalState.AWAITING for c in calls):
        return None
    now = timezone.now()
    turn_id = uuid.uuid4()
    claimed = Conversation.objects.filter(pk=conversation.pk, status=ConversationStatus.AWAITING_APPROVAL).update(
        status=ConversationStatus.STREAMING, turn_id=turn_id, turn_heartbeat=now, updated_at=now)
    if not claimed:
        return None
    conversation.status, conversation.turn_id, conversation.turn_heartbeat = ConversationStatus.STREAMING, turn_id, now
    tree, question, turn_ids, positions = _paused_turn(conversation)
    last = turn_ids[-1]
    return TurnStart(conversation=conversation, turn_id=turn_id, user_message=Message.objects.get(pk=question),
                     user_siblings=tree.siblings(question), assistant_message_id=None,
                     assistant_position=positions[turn_ids[0]],
                     history=to_messages(conversation, files=takes_files(conversation.model)), created=False,
                     resumed_after=last, resumed_after_position=positions[last],
                     decisions=tuple(_decision(c, timeout) for c in calls), prior_calls=_prior_calls(turn_ids))


def approval_decide(*, user: Any, conversation_id: uuid.UUID | str, call_id: str, approved: bool,
                    reason: str = "", timeout: float) -> Decided:
    """Record ``user``'s decision on a waiting call, in one transaction (module docstring).

    Args:
        user: the deciding user; only the call's approver (the conversation's owner) may.
        conversation_id: the conversation of the call.
        call_id: the provider's call id (as in the ``tool_approval_request`` event).
        approved: approve (the tool runs) or deny (the model reads :func:`denial_text`).
        reason: optional, kept with the decision (trimmed; at most :data:`MAX_REASON_CHARS`).
        timeout: ``JXAI_APPROVAL_TIMEOUT_SECONDS`` (for the expiry text of other calls).

    Returns:
        What changed; ``resumed`` is the turn to start when this was the last waiting call.

    Raises:
        ProblemError: ``not-found`` (a missing, foreign or malformed conversation id, or no
            call with that id waits there), ``conflict`` (the call was decided already),
            ``invalid-request`` (a reason over :data:`MAX_REASON_CHARS` characters; nothing saved).
    """
    reason = bounded_text(reason or "", what="The reason", limit=MAX_REASON_CHARS)
    with transaction.atomic():
        conversation = get_owned(user, conversation_id, for_update=True)
        call = (ToolCall.objects.filter(message__conversation=conversation, call_id=call_id)
                .exclude(approval_state=ApprovalState.NONE).order_by("-message__position", "-position").first())
        if call is None or call.approver_id not in (None, user.pk):
            raise problem_error("not-found", "No tool call with this id waits for approval in this conversation.")
        state = ApprovalState.APPROVED if approved else ApprovalState.DENIED
        decided = ToolCall.objects.filter(pk=call.pk, approval_state=ApprovalState.AWAITING).update(
            approval_state=state, decided_by=user, decided_at=timezone.now(), decision_reason=reason)
        if not decided:
            raise problem_error("conflict", f"Tool call {call_id!r} was decided already ({call.approval_state}).",
                                code="approval_decided")
        resumed = _resume(conversation, _paused_round(conversation), timeout=timeout)
    return Decided(conversation_id=conversation.pk, message_id=call.message_id, resumed=resumed)


def approvals_expire(*, timeout: float, now: datetime | None = None) -> list[Decided]:
    """Expire every call that waited longer than ``timeout`` seconds (every worker's lease watch
    runs it once a second): each is marked ``expired`` by one conditional UPDATE (a decision
    that came first wins), and a round with no call left waiting is resumed here.

    Returns:
        One :class:`Decided` per conversation changed (start the resumed turns).
    """
    cutoff = (now or timezone.now()) - timedelta(seconds=timeout)
    due = (ToolCall.objects.filter(approval_state=ApprovalState.AWAITING, approval_requested_at__lt=cutoff)
           .values_list("message__conversation_id", flat=True).distinct())
    out = []
    for cid in list(due):
        with transaction.atomic():
            conversation = Conversation.objects.select_for_update().filter(pk=cid).first()
            if conversation is None:
                continue
            stale = ToolCall.objects.filter(message__conversation=conversation, approval_state=ApprovalState.AWAITING,
                                            approval_requested_at__lt=cutoff)
            message_id = stale.values_list("message_id", flat=True).first()
            if message_id is None or not stale.update(approval_state=ApprovalState.EXPIRED, decided_at=timezone.now(),
                                                      decision_reason="expired"):
                continue
            resumed = _resume(conversation, _paused_round(conversation), timeout=timeout)
        out.append(Decided(conversation_id=cid, message_id=message_id, resumed=resumed))
    return out


def approvals_stop(*, user: Any, conversation_id: uuid.UUID | str) -> bool:
    """Stop a paused turn (docs/approval.md "Stop"): every waiting call is denied by ``user``
    with :data:`STOPPED_REASON`, each gets its failed result as a ``tool`` message (so the
    history stays answered), and the conversation returns to ``idle``. One transaction.

    Returns:
        True when a paused turn was stopped, False when the conversation was not paused.

    Raises:
        ProblemError: ``not-found``.
    """
    with transaction.atomic():
        conversation = get_owned(user, conversation_id, for_update=True)
        if conversation.status != ConversationStatus.AWAITING_APPROVAL:
            return False
        now = timezone.now()
        _, _, turn_ids, positions = _paused_turn(conversation)
        tip = turn_ids[-1]
        for call in _paused_round(conversation):
            if call.approval_state == ApprovalState.AWAITING:
                ToolCall.objects.filter(pk=call.pk).update(approval_state=ApprovalState.DENIED, decided_by=user,
                                                           decided_at=now, decision_reason=STOPPED_REASON)
                refusal = denial_text(STOPPED_REASON)
            else:  # decided, not run yet: the Stop comes first
                refusal = _decision(call, 0).refusal or denial_text(STOPPED_REASON)
            content = tool_message(call.call_id, {"success": False, "error": refusal})["content"]
            reply = tool_result_insert(conversation_id=conversation.pk, call_id=call.call_id, content=content,
                                       success=False, now=now, turn_position=positions[turn_ids[0]], parent_id=tip,
                                       position=positions[tip] + 1)
            tip, positions[reply.pk] = reply.pk, reply.position
        Conversation.objects.filter(pk=conversation.pk).update(status=ConversationStatus.IDLE, updated_at=now,
                                                               active_leaf_id=tip)
    return True
