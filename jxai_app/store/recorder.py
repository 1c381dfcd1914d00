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

Methods **that never touch the database** (cheap, call them on the event loop):
``add_delta``, ``add_reasoning``, ``tool_call_start``, ``tool_call_delta``,
``tool_call_end``, ``set_usage``, ``record``, ``snapshot`` and the properties. The five
stream methods and ``record`` return ``flush_due``: when True, call ``flush()``.

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

import time
from datetime import datetime
from typing import Any, Callable, Mapping

from django.db import transaction
from django.utils import timezone

from jxai_app.models import Conversation, ConversationStatus, Message, MessageRole, MessageStatus, ToolCall
from jxai_app.store.buffer import RoundBuffer
from jxai_app.store.common import FLUSH_INTERVAL_SECONDS, KEEPALIVE_INTERVAL_SECONDS, next_position
from jxai_app.store.turn import TurnStart, tool_result_insert
from jxai_app.store.usage import context_tokens, context_warning, usage_estimate, usage_from
from jxai_app.streaming.events import (
    DeltaEvent,
    ReasoningEvent,
    StreamEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UsageEvent,
)


class TurnRecorder:
    """Buffers one turn's stream and writes it with bounded writes (see module docstring).

    Args:
        turn: what :func:`~jxai_app.store.message_send` returned.
        context_window: the model's context window in tokens, for the 80 % warning
            (``None`` or 0: never warn).
        clock: monotonic seconds (inject a fake clock in tests).
        flush_interval: least seconds between two placeholder writes while streaming.
        keepalive_interval: seconds without any write after which ``flush`` writes a heartbeat.
    """

    def __init__(
        self, turn: TurnStart, *, context_window: int | None = None,
        clock: Callable[[], float] = time.monotonic, flush_interval: float = FLUSH_INTERVAL_SECONDS,
        keepalive_interval: float = KEEPALIVE_INTERVAL_SECONDS,
    ) -> None:
        self.conversation_id = turn.conversation_id
        """The conversation (UUID)."""
        self.turn_id = turn.turn_id
        """The turn this recorder owns."""
        self.model = turn.model
        """Model alias saved on the assistant messages."""
        self.context_window = context_window
        self._clock = clock
        self._flush_interval = flush_interval
        self._keepalive_interval = keepalive_interval
        self._round = RoundBuffer()
        self._message_id: int | None = turn.assistant_message_id
        self._streaming = True
        self._lost = False
        self._ended = False
        self._usage: UsageEvent | Mapping[str, Any] | None = None
        self._last_write = clock()
        self._token_count: int | None = None

    # ------------------------------------------------------------------ state (memory)
    @property
    def message_id(self) -> int | None:
        """Primary key of the round's assistant message (placeholder while streaming);
        ``None`` after ``fail``/``cancel`` or when lost."""
        return self._message_id

    @property
    def streaming(self) -> bool:
        """True while a placeholder is open (stream methods are no-ops otherwise, CS-5 … CS-7)."""
        return self._streaming

    @property
    def lost(self) -> bool:
        """True once the rows showed the turn is no longer this recorder's."""
        return self._lost

    @property
    def ended(self) -> bool:
        """True after ``end_turn``/``fail``/``cancel`` or once lost."""
        return self._ended

    @property
    def token_count(self) -> int | None:
        """Context tokens of the last finished request (CS-24), ``None`` before any."""
        return self._token_count

    @property
    def context_warning(self) -> bool:
        """True when :attr:`token_count` reached 80 % of the context window."""
        return self._token_count is not None and context_warning(self._token_count, self.context_window)

    @property
    def flush_due(self) -> bool:
        """True when ``flush()`` would write: new text and ``flush_interval`` passed, or
        ``keepalive_interval`` passed with no write at all."""
        if self._ended:
            return False
        elapsed = self._clock() - self._last_write
        return (self._streaming and self._round.dirty and elapsed >= self._flush_interval) or (
            elapsed >= self._keepalive_interval
        )

    def add_delta(self, content: str) -> bool:
        """Append answer text (CS-5). Memory only; ignored unless streaming. Returns ``flush_due``."""
        if not self._streaming:
            return False
        self._round.add_text(content)
        return self.flush_due

    def add_reasoning(self, content: str) -> bool:
        """Append thinking text, kept apart from the answer (CS-6). Memory only; returns ``flush_due``."""
        if not self._streaming:
            return False
        self._round.add_reasoning(content)
        return self.flush_due

    def tool_call_start(self, call_id: str, name: str) -> bool:
        """Open a call (CS-7); a repeated start of an open id is ignored (one call, RP-10).
        Memory only; returns ``flush_due``."""
        if not self._streaming:
            return False
        self._round.start_call(call_id, name)
        return self.flush_due

    def tool_call_delta(self, call_id: str, args: str) -> bool:
        """Append an argument fragment to an open call; unknown ids are ignored (CS-8).
        Memory only; returns ``flush_due``."""
        if not self._streaming:
            return False
        self._round.add_args(call_id, args)
        return self.flush_due

    def tool_call_end(self, call_id: str) -> bool:
        """Mark a call complete (CS-9: changes nothing saved; a call that never ends is still
        saved with its cut-off arguments). Memory only; returns ``flush_due``."""
        if not self._streaming:
            return False
        self._round.end_call(call_id)
        return self.flush_due

    def set_usage(self, usage: UsageEvent | Mapping[str, Any] | None) -> None:
        """Keep the round's provider usage for ``finish_round`` (memory only)."""
        if self._streaming:
            self._usage = usage

    def record(self, event: StreamEvent) -> bool:
        """Apply a non-terminal stream event with the memory methods; returns ``flush_due``.

        Raises:
            TypeError: for ``done``/``error``: end the round with ``finish_round``,
                ``fail`` or ``cancel`` instead (they write).
        """
        if isinstance(event, DeltaEvent):
            return self.add_delta(event.content)
        if isinstance(event, ReasoningEvent):
            return self.add_reasoning(event.content)
        if isinstance(event, ToolCallStartEvent):
            return self.tool_call_start(event.id, event.name)
        if isinstance(event, ToolCallDeltaEvent):
            return self.tool_call_delta(event.id, event.args)
        if isinstance(event, ToolCallEndEvent):
            return self.tool_call_end(event.id)
        if isinstance(event, UsageEvent):
            self.set_usage(event)
            return self.flush_due
        raise TypeError(f"record() takes stream content events, not {event.type!r}; "
                        "use finish_round(), fail() or cancel()")

    def snapshot(self) -> dict[str, Any]:
        """The round so far, for a tab that subscribes mid-turn (memory only)::

            {"messageId": int | None, "streaming": bool, "content": str,
             "reasoning": str | None, "toolCalls": [{"id", "name", "arguments"}]}
        """
        return {"messageId": self._message_id, "streaming": self._streaming, **self._round.snapshot()}

    # ------------------------------------------------------------------ writes
    def _take_text(self) -> tuple[str, str | None]:
        """The buffered text and reasoning (buffer marked clean); counts as a write."""
        self._last_write = self._clock()
        return self._round.take_text()

    def _mark_lost(self) -> bool:
        self._lost = self._ended = True
        self._streaming = False
        self._message_id = None
        return False

    def _owns_turn(self) -> bool:
        """Inside a transaction: lock the conversation row and check the turn is ours."""
        rows = Conversation.objects.select_for_update().filter(
            pk=self.conversation_id, turn_id=self.turn_id, status=ConversationStatus.STREAMING
        )
        return bool(list(rows.values_list("pk", flat=True)))

    def flush(self) -> bool:
        """Write what is due: the placeholder's text and reasoning so far (1 UPDATE) when there
        is new text, else a heartbeat (1 UPDATE) when ``keepalive_interval`` passed without a
        write, else nothing. Writes even before ``flush_interval`` when called directly.

        Returns:
            False when the turn is lost (placeholder gone), True otherwise.
        """
        if self._ended:
            return not self._lost
        if self._streaming and self._round.dirty:
            text, reasoning = self._take_text()
            written = Message.objects.filter(pk=self._message_id, status=MessageStatus.STREAMING).update(
                content=text, reasoning_content=reasoning, updated_at=timezone.now()
            )
            return bool(written) or self._mark_lost()
        return self.keepalive()

    def keepalive(self) -> bool:
        """Refresh ``Conversation.turn_heartbeat`` (1 UPDATE) when ``keepalive_interval``
        passed without any write; otherwise write nothing. Returns False when lost."""
        if self._ended:
            return not self._lost
        if self._clock() - self._last_write < self._keepalive_interval:
            return True
        self._last_write = self._clock()
        written = Conversation.objects.filter(pk=self.conversation_id, turn_id=self.turn_id).update(
            turn_heartbeat=timezone.now()
        )
        return bool(written) or self._mark_lost()

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
        with transaction.atomic():
            if not self._owns_turn():
                return self._mark_lost()
            placeholder = Message.objects.create(
                conversation_id=self.conversation_id, position=next_position(self.conversation_id),
                role=MessageRole.ASSISTANT, model=self.model, status=MessageStatus.STREAMING,
            )
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
        with transaction.atomic():
            if not self._owns_turn():
                return self._mark_lost()
            message = Message.objects.create(
                conversation_id=self.conversation_id, position=next_position(self.conversation_id),
                role=MessageRole.ASSISTANT, model=self.model, content=content, stop_reason=stop_reason,
            )
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
