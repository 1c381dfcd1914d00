"""The turn recorder: a running turn's writes, each one short transaction (docs/store.md).

The turn's runner holds one :class:`TurnRecorder` for all rounds of the agent loop. Nothing
is written per delta: the agent loop assembles each round's assistant message, and the
recorder saves what the loop assembled when the round ends. Writes per turn::

    send                 one INSERT each of user message and placeholder + the claim (message_send)
    finish_round         1 UPDATE of the placeholder (+1 INSERT of its calls)
    begin_round          1 INSERT of the next placeholder + 1 UPDATE of the active leaf
    attach_tool_result   1 INSERT of the tool reply + 1 UPDATE of the call + 1 UPDATE of the active leaf
    end_turn / fail / cancel   1 UPDATE of the conversation (+1 DELETE of a partial placeholder)
    pause                1 UPDATE of the conversation + 1 UPDATE of the calls that wait for approval

The turn's budget (:mod:`jxai_app.policy.budget`) writes beside them, in the same
transaction, which the turn's runner opens (docs/turns.md "Writes"): a round's usage with
``finish_round`` (or alone, for a round that saved nothing), the turn's reservation deleted
with the end or the pause (a waiting turn holds none).

Each message the turn inserts is a child of the one before it and becomes the conversation's
active leaf (docs/store.md "Branches"); the turn's messages are the conversation's newest, so
the recorder keeps the chain's end and the next position in memory.

Every method is sync (call it in a worker thread) and guarded by the turn id: when the rows
show the turn is no longer this recorder's (Stop handled by another worker, the
conversation deleted, the turn recovered after its lease lapsed) it writes nothing, returns
False and :attr:`lost` is True. A method whose transaction failed (``DatabaseError``) changed
nothing and may be called again with the same arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Sequence

from django.db import transaction
from django.utils import timezone

from jxai_app.models import (
    ApprovalState, Conversation, ConversationStatus, Message, MessageRole, MessageStatus, ToolCall,
)
from jxai_app.store.branches import ONLY_CHILD, Siblings, leaf_after_drop
from jxai_app.store.common import storable
from jxai_app.store.turn import TurnStart, tool_result_insert
from jxai_app.store.usage import context_tokens, context_warning

__all__ = ["Saved", "TurnRecorder"]


@dataclass(frozen=True, slots=True)
class Saved:
    """A message as the recorder just wrote it, with what its ``message_saved`` frame shows
    (:func:`jxai_app.store.serializers.message_dict` with ``written``): no read-back."""

    message: Message
    siblings: Siblings
    calls: list[ToolCall]


class TurnRecorder:
    """Writes one turn (module docstring).

    Args:
        turn: what :func:`~jxai_app.store.message_send` saved.
        user: the turn's user (whose usage ledger each round's tokens go to).
        context_window: the model's context window in tokens, for the 80 % warning (``None``
            or 0: never warn).
    """

    def __init__(self, turn: TurnStart, *, user: Any, context_window: int | None = None) -> None:
        self.conversation_id = turn.conversation_id
        self.turn_id = turn.turn_id
        self.model = turn.model
        self.user = user
        self.context_window = context_window
        self.message_id: int | None = turn.assistant_message_id
        """The round's assistant message (the placeholder while a round is open)."""
        self._turn_position = turn.assistant_position
        self._tip, self._tip_position = ((turn.assistant_message_id, turn.assistant_position)
                                         if turn.assistant_message_id is not None
                                         else (turn.resumed_after, turn.resumed_after_position))
        """The last message the turn inserted (the active leaf) and its position."""
        self._before_round: int = turn.user_message.pk
        """The parent of the open round's placeholder (the leaf again if it is dropped)."""
        self.round_open = turn.assistant_message_id is not None
        self.lost = False
        """True once the rows showed the turn is no longer this recorder's."""
        self.ended = False
        self.stopped_question: int | None = None
        """Set by :meth:`cancel` when the Stop left the question with no answer (it is marked ``stopped``)."""
        self._token_count: int | None = None
        self._open: Message | None = turn.placeholder
        """The open round's placeholder as inserted (its row, to complete in memory as written)."""
        self._open_siblings: Siblings = turn.placeholder_siblings
        self.saved: Saved | None = None
        """The message the last write saved, as written (``None`` until one was)."""

    # ------------------------------------------------------------------ guards
    def _owns_turn(self) -> bool:
        """Inside a transaction: lock the conversation row and check the turn is ours."""
        rows = Conversation.objects.select_for_update().filter(
            pk=self.conversation_id, turn_id=self.turn_id, status=ConversationStatus.STREAMING)
        return rows.exists()

    def _lose(self) -> bool:
        self.lost = self.ended = True
        self.round_open = False
        self.message_id = None
        return False

    def lose(self) -> None:
        """The turn is no longer this recorder's (its lease renewal found it gone): write
        nothing more (memory only)."""
        self._lose()

    # ------------------------------------------------------------------ rounds
    def finish_round(self, *, message: Mapping[str, Any] | None, stop_reason: str, usage: Mapping[str, Any] | None,
                     estimated: bool, call_started: Mapping[str, datetime] | None = None) -> bool:
        """Complete the round's message with what the agent loop assembled (the row stays
        even when empty; the wire leaves empty ones out), in one transaction: the
        placeholder's UPDATE and one INSERT of its calls; the caller settles the round's
        tokens in the user's usage ledger in the same transaction
        (:meth:`jxai_app.policy.budget.TurnBudget.settle`, with the same figures as the row,
        so they always agree: docs/turns.md "Writes").

        Args:
            message: the loop's assistant wire message (``content``, ``reasoning_content``,
                ``tool_calls``) or ``None`` when the round drew nothing.
            stop_reason: the round's ``done`` stop reason.
            usage: the round's usage in the saved shape (:func:`jxai_app.store.usage.round_usage`),
                ``None`` when there is nothing to count.
            estimated: the usage is an estimate (the provider sent none).
            call_started: when each call's ``tool_call_start`` arrived, by call id.

        Returns:
            False when the turn is lost; True otherwise (also when no round was open).
        """
        if self.ended or not self.round_open:
            return not self.lost
        message = message or {}
        text = storable(message.get("content") or "")
        reasoning = message.get("reasoning_content")
        reasoning = None if reasoning is None else storable(reasoning)
        calls = message.get("tool_calls") or []
        started = call_started or {}
        now = timezone.now()
        with transaction.atomic(savepoint=False):
            written = Message.objects.filter(pk=self.message_id, status=MessageStatus.STREAMING).update(
                content=text, reasoning_content=reasoning, usage=dict(usage) if usage else None,
                stop_reason=stop_reason, status=MessageStatus.COMPLETE, updated_at=now)
            if written:
                rows = ToolCall.objects.bulk_create([
                    ToolCall(message_id=self.message_id, position=i, call_id=storable(c["id"]),
                             name=storable(c["function"]["name"]), arguments=storable(c["function"]["arguments"]),
                             started_at=started.get(c["id"], now))
                    for i, c in enumerate(calls)])
        if not written:
            return self._lose()
        if self._open is not None:
            done = self._open
            done.content, done.reasoning_content, done.usage = text, reasoning, dict(usage) if usage else None
            done.stop_reason, done.status, done.updated_at = stop_reason, MessageStatus.COMPLETE, now
            self.saved = Saved(done, self._open_siblings, rows)
        self.round_open = False
        if usage:
            self._token_count = context_tokens(usage, reasoning_replayed=reasoning is not None and bool(text or calls))
        return True

    def begin_round(self) -> bool:
        """Open the next round's placeholder (1 INSERT) after tool results (nothing while
        a round is open; docs/store.md "The placeholder"). Returns False when lost or ended."""
        if self.ended:
            return False
        if self.round_open:
            return True
        before = self._tip
        placeholder = self._insert_assistant(status=MessageStatus.STREAMING)
        if placeholder is None:
            return False
        self.message_id, self.round_open, self._before_round = placeholder.pk, True, before
        self._open, self._open_siblings = placeholder, ONLY_CHILD
        return True

    def add_assistant_message(self, content: str) -> bool:
        """Append a complete assistant message the loop wrote itself, e.g. the round-cap
        summary (1 INSERT; no usage: no model request made it). Returns False when lost/ended."""
        if self.ended:
            return False
        message = self._insert_assistant(content=content, stop_reason="stop")
        if message is None:
            return False
        self.message_id = message.pk
        self.saved = Saved(message, ONLY_CHILD, [])
        return True

    def _insert_assistant(self, **fields: Any) -> Message | None:
        with transaction.atomic():
            if not self._owns_turn():
                self._lose()
                return None
            if "content" in fields:
                fields["content"] = storable(fields["content"])
            message = Message.objects.create(conversation_id=self.conversation_id, parent_id=self._tip,
                                             position=self._tip_position + 1, role=MessageRole.ASSISTANT,
                                             model=self.model, **fields)
            self._lead_to(message)
        return self._extended(message)

    def _lead_to(self, message: Message) -> None:
        """Make ``message`` (just inserted, in the transaction that checked the turn) the active leaf."""
        Conversation.objects.filter(pk=self.conversation_id).update(active_leaf_id=message.pk)

    def _extended(self, message: Message) -> Message:
        """After the commit: ``message`` ends the turn's chain."""
        self._tip, self._tip_position = message.pk, message.position
        return message

    def attach_tool_result(self, *, call_id: str, content: str, success: bool | None = None) -> Message | None:
        """Save a tool's result: the ``tool`` reply (1 INSERT) and the call's result, success
        and finish time (1 UPDATE), for the nearest call with that id (docs/store.md "Tool results").

        Returns:
            The saved ``tool`` message, or ``None`` when the turn is lost or ended.

        Raises:
            ProblemError: ``invalid-request`` for an unknown call id, a call already answered,
                or non-text content; nothing is written.
        """
        if self.ended:
            return None
        with transaction.atomic():
            if not self._owns_turn():
                self._lose()
                return None
            reply = tool_result_insert(
                conversation_id=self.conversation_id, call_id=storable(call_id), content=storable(content),
                success=success, now=timezone.now(), turn_position=self._turn_position, parent_id=self._tip,
                position=self._tip_position + 1)
            self._lead_to(reply)
        self.saved = Saved(reply, ONLY_CHILD, [])
        return self._extended(reply)

    # ------------------------------------------------------------------ the turn's end
    def pause(self, call_ids: Sequence[str]) -> bool:
        """Pause the turn until its waiting calls are decided (docs/approval.md "The turn
        pauses"), in one transaction: the calls ``call_ids`` of the round just saved wait for
        the owner (1 UPDATE), and the conversation is ``awaiting_approval`` with its turn id
        and lease cleared (nothing renews or recovers it; the token count kept; 1 UPDATE).
        Nobody can decide a call before the pause is saved. Returns False when lost."""
        return self._end(status=ConversationStatus.AWAITING_APPROVAL, waiting=call_ids)

    def end_turn(self) -> bool:
        """End the turn normally: conversation idle, turn cleared, token count and context
        warning from the last request (1 UPDATE; a round still open is dropped as partial).
        Returns False when lost."""
        return self._end(status=ConversationStatus.IDLE)

    def fail(self, message: str, problem: Mapping[str, Any] | None = None) -> bool:
        """End the turn with an error (docs/store.md "What error and Stop remove"): the partial placeholder and its calls deleted,
        completed rounds kept, status ``error`` with ``last_error``/``last_problem`` for the
        Retry banner. Returns False when lost."""
        return self._end(status=ConversationStatus.ERROR, error=message, problem=problem)

    def cancel(self) -> bool:
        """Stop the turn (docs/store.md "What error and Stop remove"): the partial placeholder and its calls deleted, completed
        rounds kept, status ``idle``, error cleared. Returns False when lost."""
        return self._end(status=ConversationStatus.IDLE, stopped=True)

    def _end(self, *, status: str, error: str = "", problem: Mapping[str, Any] | None = None,
             waiting: Sequence[str] = (), stopped: bool = False) -> bool:
        if self.ended:
            return not self.lost
        changes: dict[str, Any] = {
            "status": status, "turn_id": None, "turn_heartbeat": None, "updated_at": timezone.now(),
            "last_error": storable(error), "last_problem": dict(problem) if problem is not None else None,
        }
        if self._token_count is not None:
            changes["token_count"] = self._token_count
            changes["context_warning"] = context_warning(self._token_count, self.context_window)
        marked = None
        with transaction.atomic(savepoint=False):
            if self.round_open and self.message_id is not None:
                Message.objects.filter(pk=self.message_id, status=MessageStatus.STREAMING).delete()
                changes["active_leaf_id"], marked = leaf_after_drop(self.conversation_id, self._before_round,
                                                                    stopped=stopped)
            written = Conversation.objects.filter(pk=self.conversation_id, turn_id=self.turn_id).update(**changes)
            if not written:
                transaction.set_rollback(True)
            elif waiting:
                ToolCall.objects.filter(message_id=self.message_id, call_id__in=[storable(c) for c in waiting]).update(
                    approval_state=ApprovalState.AWAITING, approver=self.user, approval_requested_at=timezone.now())
        if not written:
            return self._lose()
        self.ended, self.round_open, self.stopped_question = True, False, marked
        return True
