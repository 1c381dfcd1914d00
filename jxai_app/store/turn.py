"""Turn services: send, cancel, retry, tool results (docs/store.md "Sending", "What error
and Stop remove", "Retry", "Tool results").

One turn per conversation, across worker processes, enforced by the database: a send locks
the conversation's row, then claims it with one conditional ``UPDATE … WHERE NOT
status='streaming'`` that sets a fresh ``turn_id``; the loser of two simultaneous sends
updates no row and gets ``conflict``. Every later write of the turn is guarded by that
``turn_id`` (:mod:`jxai_app.store.recorder`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from jxai_app.core.agent import Decision
from jxai_app.core.problems import problem_error
from jxai_app.models import (
    Conversation,
    ConversationStatus,
    Message,
    MessageRole,
    MessageStatus,
    ToolCall,
)
from jxai_app.policy import ratelimit, reservations
from jxai_app.store.conversation import conversation_create
from jxai_app.store.common import LEASE_SECONDS, get_owned, invalid, next_position, title_from
from jxai_app.store.recovery import lease_lapsed, turn_abandon
from jxai_app.store.usage import estimate_tokens
from jxai_app.store.wire import messages_to_wire, with_tool_calls


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnStart:
    """What a successful send saved and read: hand it to the turn's runner and recorder."""

    conversation: Conversation
    """The conversation as the send left it (status streaming, the new turn, title, model)."""
    turn_id: uuid.UUID
    """The new turn's id (``Conversation.turn_id``)."""
    user_message: Message
    """The saved user message."""
    assistant_message_id: int | None
    """Primary key of the assistant placeholder (status ``streaming``); ``None`` for a resumed
    turn, whose first round opens its own after the decided calls' results."""
    history: list[dict[str, Any]]
    """OpenAI wire messages (:mod:`jxai_app.store.wire`), ending with the user message (a
    resumed turn: with the paused round and the results it has)."""
    created: bool
    """True when the send created the conversation."""
    resumed_after: int | None = None
    """A turn resumed after an approval (docs/approval.md): the last message saved before it
    (a snapshot shows the saved messages up to it, then the turn's events); ``None`` for a send."""
    decisions: tuple[Decision, ...] = ()
    """A resumed turn: the decisions on the paused round's calls, in call order."""
    prior_calls: Mapping[str, int] = field(default_factory=dict)
    """A resumed turn: calls the turn ran before it paused, by tool name (the per-turn caps)."""

    @property
    def anchor_message_id(self) -> int:
        """The last saved message before the turn's own events (the user message of a send)."""
        return self.user_message.pk if self.resumed_after is None else self.resumed_after

    @property
    def conversation_id(self) -> uuid.UUID:
        """The conversation the turn runs in."""
        return self.conversation.pk

    @property
    def model(self) -> str:
        """The model alias the turn uses."""
        return self.conversation.model


def _conflict(conversation: Conversation | None = None) -> Exception:
    if conversation is not None and conversation.status == ConversationStatus.AWAITING_APPROVAL:
        return problem_error("conflict", "A tool call in this conversation waits for your approval; approve or "
                             "deny it first, or press Stop.", code="approval_pending")
    return problem_error("conflict", "A turn is already running in this conversation; wait for it or press Stop.")


def message_send(
    *, user: Any, conversation_id: uuid.UUID | str | None, text: str, model: str | None = None,
    admit: bool = True, lease: float = LEASE_SECONDS, prompt_overhead: int = 0, reservation: int | None = None,
) -> TurnStart:
    """Save the user's message and an empty assistant placeholder and start a turn (docs/store.md "Sending"):
    the one send service, in one short transaction.

    1. The conversation: created (owned by ``user``, model ``model``) when
       ``conversation_id`` is ``None``, else its row, locked (``select_for_update``; on
       SQLite the ``IMMEDIATE`` transaction holds the write lock), looked up by id and owner
       at once so a foreign id costs what a missing one does.
    2. A running turn whose lease lapsed is recovered first (:mod:`jxai_app.store.recovery`);
       a live one is a ``conflict``.
    3. ``admit``: the user's quota and rate limit (:func:`jxai_app.policy.ratelimit.check_turn_allowed`),
       in this transaction, so a refusal saves nothing; the first round's tokens are reserved
       there for the new turn (the history's estimate, ``prompt_overhead`` and the answer's
       allowance; docs/security.md "Quota reservations").
    4. The claim (one conditional UPDATE), then one INSERT of both messages (``bulk_create``),
       and the history the request needs.

    Args:
        user: the requesting user (must own the conversation).
        conversation_id: the conversation, or ``None`` for a new one.
        text: the user's message (not blank; length limits are the caller's).
        model: a model alias: the new conversation's, or one to switch to (``None``: keep).
        admit: check and count the turn against the user's allowance.
        lease: the turn lease in seconds (``JXAI_TURN_LEASE_SECONDS``).
        prompt_overhead: estimated tokens the request carries beside the history (the
            system prompt's), for the reservation.
        reservation: with ``admit`` False, the reservation its caller's admission made (a
            ``retry``'s), handed to the new turn (:func:`jxai_app.policy.reservations.adopt`).

    Raises:
        ProblemError: ``not-found`` (missing or foreign id), ``invalid-request`` (blank text),
            ``conflict`` while a live turn runs, ``quota-exceeded`` / ``rate-limited``.
        django.db.DatabaseError: the database failed (nothing saved).
    """
    if not isinstance(text, str) or not text.strip():
        raise invalid("The message is empty.")
    with transaction.atomic():
        created = conversation_id is None
        if created:
            conversation = conversation_create(user=user, model=model or "")
        else:
            conversation = get_owned(user, conversation_id, for_update=True)
        claimable = ~Q(status__in=[ConversationStatus.STREAMING, ConversationStatus.AWAITING_APPROVAL])
        if conversation.status == ConversationStatus.AWAITING_APPROVAL:
            raise _conflict(conversation)
        if conversation.status == ConversationStatus.STREAMING:
            if not lease_lapsed(conversation, lease=lease):
                raise _conflict()
            turn_abandon(conversation_id=conversation.pk, turn_id=conversation.turn_id, interrupted=True)
            claimable = Q()  # recovered just now, under the lock
        earlier = list(with_tool_calls(Message.objects.filter(conversation=conversation).order_by("position")))
        turn_id = uuid.uuid4()
        prompt = estimate_tokens([*messages_to_wire(earlier), {"role": MessageRole.USER, "content": text}])
        if admit:
            ratelimit.check_turn_allowed(user, prompt_tokens=prompt + prompt_overhead, turn_id=turn_id)
        elif reservation is not None:
            reservations.adopt(reservation, turn_id, prompt_tokens=prompt + prompt_overhead)
        position = earlier[-1].position + 1 if earlier else 0
        now = timezone.now()
        changes: dict[str, Any] = {
            "status": ConversationStatus.STREAMING, "turn_id": turn_id, "turn_heartbeat": now,
            "last_error": "", "last_problem": None, "updated_at": now, "title": conversation.title or title_from(text),
            "model": model or conversation.model,
        }
        if not Conversation.objects.filter(claimable, pk=conversation.pk).update(**changes):
            raise _conflict()
        for name, value in changes.items():
            setattr(conversation, name, value)
        user_message, placeholder = Message.objects.bulk_create([
            Message(conversation=conversation, position=position, role=MessageRole.USER, content=text),
            Message(conversation=conversation, position=position + 1, role=MessageRole.ASSISTANT,
                    model=conversation.model, status=MessageStatus.STREAMING),
        ])
    return TurnStart(conversation=conversation, turn_id=changes["turn_id"], user_message=user_message,
                     assistant_message_id=placeholder.pk, history=messages_to_wire([*earlier, user_message]),
                     created=created)


def turn_cancel(*, user: Any, conversation_id: uuid.UUID | str) -> uuid.UUID | None:
    """Stop the running turn from anywhere (any tab, any worker): delete the partial
    assistant message and its calls, keep completed rounds, return to idle (docs/store.md "What error and Stop remove").

    The turn's own recorder then finds its placeholder gone and writes nothing more. Safe
    without a running turn (no-op).

    Returns:
        The id of the turn that was stopped, or ``None`` when none ran.

    Raises:
        ProblemError: ``not-found``.
    """
    conversation = get_owned(user, conversation_id)
    if conversation.status != ConversationStatus.STREAMING:
        return None
    ended = turn_abandon(conversation_id=conversation.pk, turn_id=conversation.turn_id, interrupted=False)
    return conversation.turn_id if ended else None


@transaction.atomic
def message_retry(*, user: Any, conversation_id: uuid.UUID | str) -> str | None:
    """Drop the last exchange so its user text can be sent again (docs/store.md "Retry").

    Removes the trailing non-user messages and then the last user message (earlier turns
    survive), sets the conversation idle and clears its error.

    Returns:
        The removed user message's text (send it again with :func:`message_send`), or
        ``None`` when there is no user message (no-op).

    Raises:
        ProblemError: ``not-found``; ``conflict`` while a turn runs.
    """
    conversation = get_owned(user, conversation_id, for_update=True)
    if conversation.status in (ConversationStatus.STREAMING, ConversationStatus.AWAITING_APPROVAL):
        raise _conflict(conversation)
    last_user = (Message.objects.filter(conversation=conversation, role=MessageRole.USER)
                 .order_by("-position").first())
    if last_user is None:
        return None
    Message.objects.filter(conversation=conversation, position__gte=last_user.position).delete()
    Conversation.objects.filter(pk=conversation.pk).update(
        status=ConversationStatus.IDLE, last_error="", last_problem=None, updated_at=timezone.now()
    )
    return last_user.content


def _result_of(content: str) -> tuple[Any, bool]:
    """``(result, success)`` of a tool reply: the parsed JSON (or the raw text when it is not
    JSON) and whether it succeeded: false iff an object with ``success: false`` (docs/store.md "Tool results")."""
    try:
        parsed = json.loads(content)
    except (TypeError, ValueError):
        return content, True
    return parsed, not (isinstance(parsed, dict) and parsed.get("success") is False)


def tool_result_insert(
    *, conversation_id: uuid.UUID, call_id: str, content: str, success: bool | None, now: datetime
) -> Message:
    """Save a tool reply (two writes; call it in a transaction, as ``TurnRecorder.attach_tool_result`` does).

    The call it answers is the one with ``call_id`` on the nearest preceding assistant
    message of the current turn (docs/store.md "Tool results": a reused id attaches to the later
    request; never across the turn's user message). The reply is appended as a ``tool``
    message and the call gets ``result``, ``success`` and ``finished_at``.

    Raises:
        ProblemError: ``invalid-request`` when no call of the turn has that id (a clear refusal
            loses nothing and corrupts nothing), when that call already has a result, or when ``content`` is not a string.
    """
    if not isinstance(content, str):
        raise invalid("A tool result must be text (the JSON the model will read).")
    turn_start = (Message.objects.filter(conversation_id=conversation_id, role=MessageRole.USER)
                  .aggregate(top=Max("position"))["top"])
    call = (ToolCall.objects.filter(
        message__conversation_id=conversation_id, message__role=MessageRole.ASSISTANT,
        message__status=MessageStatus.COMPLETE, message__position__gt=-1 if turn_start is None else turn_start,
        call_id=call_id,
    ).order_by("-message__position", "-position").first())
    if call is None:
        raise invalid(f"No tool call with id {call_id!r} in this turn.")
    if call.finished_at is not None:
        raise invalid(f"Tool call {call_id!r} already has a result.")
    result, derived = _result_of(content)
    reply = Message.objects.create(
        conversation_id=conversation_id, position=next_position(conversation_id), role=MessageRole.TOOL,
        tool_call_id=call_id, content=content,
    )
    ToolCall.objects.filter(pk=call.pk).update(
        result=result, success=derived if success is None else success, finished_at=now
    )
    return reply
