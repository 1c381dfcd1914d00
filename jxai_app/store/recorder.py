"""The turn recorder: applies one turn's stream to the database with bounded writes.

The turn runner holds one :class:`TurnRecorder` per turn (all rounds of the agent loop).
Deltas, reasoning and tool-call fragments are buffered **in memory**; the placeholder's
text reaches the database at most once every ``flush_interval`` seconds while streaming
and once at the end of the round, never once per delta (SPEC §6, issue 7).

Writes per assistant message (INSERT/UPDATE/DELETE statements)::

    send                 2   conversation UPDATE (the one-turn lock) + one INSERT of
                             user message and placeholder          (message_send)
    begin_round          1   INSERT of the next placeholder        (later rounds)
    flush                1   placeholder UPDATE, ≤ 1 per flush_interval while streaming,
                             or a heartbeat UPDATE after keepalive_interval of silence
    finish_round         1   placeholder UPDATE (+1 INSERT of all its calls when it has any)
    attach_tool_result   2   INSERT of the tool reply + UPDATE of the call
    end_turn             1   conversation UPDATE (or inside finish_round(last=True))

So a one-round answer costs 4 + one per 2 s of streaming; a first round with calls
4 + one per 2 s + 2 per call; a later round (placeholder INSERT instead of the send) one
write less than that.

Methods **that never touch the database** (cheap, call them on the event loop: the five
stream methods, ``set_usage``, ``record``, ``snapshot`` and the properties), the flush rules,
``flush`` and ``keepalive`` live in the base class,
:class:`~jxai_app.store.recorder_stream.RecorderStream`; this module adds the round and
turn-end writes. The stream methods and ``record`` return ``flush_due``: when True, call
``flush()``.

Methods **that may write** (sync; from async code call them through
``asgiref.sync.sync_to_async``, one at a time): ``flush``, ``keepalive``, ``begin_round``,
``finish_round``, ``attach_tool_result``, ``add_assistant_message``, ``end_turn``, ``fail``,
``cancel``. A memory method may run while a flush runs in another thread (a lock guards
the buffers); two writing methods must not run at once.

The turn is **lost** when its rows show it no longer owns the conversation (Stop from
another worker, recovery, the conversation deleted): the writing methods then return
False (or ``None``), write nothing more, and :attr:`lost` is True: stop the turn quietly.

While nothing streams for a while (a slow first token, a long tool run) the runner should
call ``flush()`` every few seconds: it writes a heartbeat only when ``keepalive_interval``
passed without any write, so the recovery of dead turns (30 s) never takes a live one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from django.db import transaction
from django.utils import timezone

from jxai_app.models import Conversation, ConversationStatus, Message, MessageRole, MessageStatus, ToolCall
from jxai_app.store.common import next_position
from jxai_app.store.recorder_stream import RecorderStream
from jxai_app.store.turn import tool_result_insert
from jxai_app.store.usage import context_tokens, usage_estimate, usage_from
from jxai_app.core.streaming.events import UsageEvent

__all__ = ["RecorderStream", "TurnRecorder"]


class TurnRecorder(RecorderStream):
    """Buffers one turn's stream and writes it with bounded writes (see module docstring).

    The constructor (``turn``, ``context_window``, ``clock``, ``flush_interval``,
    ``keepalive_interval``), the buffering, the flush rules, ``flush`` and ``keepalive`` are
    :class:`~jxai_app.store.recorder_stream.RecorderStream`'s; this class adds the round and
    turn-end writes.
    """

    # ------------------------------------------------------------------ round and turn-end writes
    def _owns_turn(self) -> bool:
        """Inside a transaction: lock the conversation row and check the turn is ours."""
        rows = Conversation.objects.select_for_update().filter(
            pk=self.conversation_id, turn_id=self.turn_id, status=ConversationStatus.STREAMING
        )
        return bool(list(rows.values_list("pk", flat=True)))

    def _insert_assistant(self, **fields: Any) -> Message | None:
        """INSERT an assistant message of this turn's model at the conversation's next
        position with ``fields``, in a transaction that first checks the turn is ours;
        ``None`` (and the turn marked lost) when it is not."""
        with transaction.atomic():
            if not self._owns_turn():
                self._mark_lost()
                return None
            return Message.objects.create(
                conversation_id=self.conversation_id, position=next_position(self.conversation_id),
                role=MessageRole.ASSISTANT, model=self.model, **fields,
            )

    def finish_round(
        self, *, stop_reason: str, usage: UsageEvent | Mapping[str, Any] | None = None,
        input_estimate: int = 0, last: bool = False,
    ) -> bool:
        """Complete the round's message: final text, reasoning, usage, stop reason, status
        ``complete`` (1 UPDATE) and its calls (1 INSERT when any), in one transaction (CS-17:
        the message stays even when empty; the wire leaves empty ones out).

        Args:
            stop_reason: the ``done`` event's stop reason; ``cancelled`` means :meth:`cancel`.
            usage: the provider's usage; defaults to the ``usage`` event recorded. Missing or
                invalid (CS-25) → an estimate marked ``estimated`` (``input_estimate`` tokens in,
                produced characters / 4 out).
            input_estimate: the caller's token estimate of the request, used only for estimates.
            last: also end the turn (as :meth:`end_turn`, +1 UPDATE) in the same transaction.

        Returns:
            False when the turn is lost; True otherwise (also when no round was open).
        """
        if stop_reason == "cancelled":
            return self.cancel()
        if not self._streaming:
            return self.end_turn() if last else not self._lost
        self._streaming = False
        self._last_write = self._clock()
        text, reasoning, calls = self._round.close()
        saved_usage: dict[str, Any] | None = usage_from(usage if usage is not None else self._usage)
        if saved_usage is None:
            produced = len(text) + len(reasoning or "") + sum(len(c.arguments) for c in calls)
            saved_usage = usage_estimate(input_tokens=input_estimate, output_chars=produced)
        tokens = context_tokens(saved_usage, reasoning_replayed=reasoning is not None and bool(text or calls))
        now = timezone.now()
        with transaction.atomic():
            written = Message.objects.filter(pk=self._message_id, status=MessageStatus.STREAMING).update(
                content=text, reasoning_content=reasoning, usage=saved_usage, stop_reason=stop_reason,
                status=MessageStatus.COMPLETE, updated_at=now,
            )
            if not written:
                return self._mark_lost()
            if calls:
                ToolCall.objects.bulk_create([
                    ToolCall(message_id=self._message_id, position=i, call_id=c.call_id, name=c.name,
                             arguments=c.arguments, started_at=c.started_at)
                    for i, c in enumerate(calls)
                ])
            self._token_count = tokens
            if last:
                return self._end(status=ConversationStatus.IDLE, now=now)
        return True

    def attach_tool_result(self, *, call_id: str, content: str, success: bool | None = None) -> Message | None:
        """Save a tool's result: the ``tool`` reply (1 INSERT) and the call's result,
        success and finish time (1 UPDATE), for the nearest call with that id (CS-12 … CS-15).

        Returns:
            The saved ``tool`` message, or ``None`` when the turn is lost or ended.

        Raises:
            ProblemError: ``invalid-request`` for an unknown call id, a call already answered,
                or non-text content; nothing is written.
        """
        if self._ended:
            return None
        with transaction.atomic():
            if not self._owns_turn():
                self._mark_lost()
                return None
            reply = tool_result_insert(conversation_id=self.conversation_id, call_id=call_id,
                                       content=content, success=success, now=timezone.now())
        self._last_write = self._clock()
        return reply

    def begin_round(self) -> bool:
        """Open the next round's placeholder (1 INSERT) after tool results (CS-4: ignored while
        a round is open). Clears the round buffers and usage. Returns False when lost/ended."""
        if self._ended:
            return False
        if self._streaming:
            return True
        placeholder = self._insert_assistant(status=MessageStatus.STREAMING)
        if placeholder is None:
            return False
        self._round.clear()
        self._message_id, self._usage, self._streaming = placeholder.pk, None, True
        self._last_write = self._clock()
        return True

    def add_assistant_message(self, content: str, *, stop_reason: str = "stop") -> bool:
        """Append a complete assistant message the loop wrote itself, e.g. the round-cap
        summary (1 INSERT; no usage, since no model request made it). Returns False when
        lost/ended."""
        if self._ended:
            return False
        message = self._insert_assistant(content=content, stop_reason=stop_reason)
        if message is None:
            return False
        self._message_id = message.pk
        self._last_write = self._clock()
        return True

    def end_turn(self) -> bool:
        """End the turn normally: conversation idle, turn cleared, token count and context
        warning from the last request (1 UPDATE). A round still open is finished first with
        stop reason ``stop``. Returns False when lost (already ended elsewhere)."""
        if self._ended:
            return not self._lost
        if self._streaming:
            return self.finish_round(stop_reason="stop", last=True)
        return self._end(status=ConversationStatus.IDLE, now=timezone.now())

    def fail(self, message: str, problem: Mapping[str, Any] | None = None) -> bool:
        """End the turn with an error (CS-18): delete the partial placeholder and its calls,
        keep completed rounds, status ``error`` with ``last_error``/``last_problem`` for the
        Retry banner. Returns False when lost."""
        return self._drop_partial(status=ConversationStatus.ERROR, error=message, problem=problem)

    def cancel(self) -> bool:
        """Stop the turn (CS-19): delete the partial placeholder and its calls, keep completed
        rounds, status ``idle``, error cleared. Returns False when lost."""
        return self._drop_partial(status=ConversationStatus.IDLE)

    def _drop_partial(self, *, status: str, error: str = "", problem: Mapping[str, Any] | None = None) -> bool:
        if self._ended:
            return not self._lost
        with transaction.atomic():
            if self._message_id is not None:  # also after a finish_round whose write failed
                Message.objects.filter(pk=self._message_id, status=MessageStatus.STREAMING).delete()
            ended = self._end(status=status, now=timezone.now(), error=error, problem=problem)
        self._streaming, self._message_id = False, None
        self._round.clear()
        return ended

    def _end(self, *, status: str, now: datetime, error: str = "",
             problem: Mapping[str, Any] | None = None) -> bool:
        """The conversation UPDATE that ends the turn (guarded by ``turn_id``)."""
        changes: dict[str, Any] = {
            "status": status, "turn_id": None, "turn_heartbeat": None, "updated_at": now,
            "last_error": error, "last_problem": dict(problem) if problem is not None else None,
        }
        if self._token_count is not None:
            changes["token_count"] = self._token_count
            changes["context_warning"] = self.context_warning
        written = Conversation.objects.filter(pk=self.conversation_id, turn_id=self.turn_id).update(**changes)
        self._ended = True
        self._streaming = False
        return bool(written) or self._mark_lost()
