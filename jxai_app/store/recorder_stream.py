"""The streaming half of the turn recorder: round state, memory-only stream methods and the
flush rules (when the placeholder's text is written, when a heartbeat is).

:class:`RecorderStream` is the base of :class:`~jxai_app.store.recorder.TurnRecorder`, which
adds the round and turn-end writes; use ``TurnRecorder`` (the write budget and the threading
rules are in :mod:`jxai_app.store.recorder`).

Methods **that never touch the database** (cheap, call them on the event loop):
``add_delta``, ``add_reasoning``, ``tool_call_start``, ``tool_call_delta``,
``tool_call_end``, ``set_usage``, ``record``, ``snapshot`` and the properties. The five
stream methods and ``record`` return ``flush_due``: when True, call ``flush()``.

The two writes here are ``flush`` (the placeholder's text, at most once per
``flush_interval`` while streaming: never once per delta, SPEC §6, issue 7) and
``keepalive`` (a heartbeat after ``keepalive_interval`` without any write, so the recovery
of dead turns never takes a live one).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from django.utils import timezone

from jxai_app.models import Conversation, Message, MessageStatus
from jxai_app.store.buffer import RoundBuffer
from jxai_app.store.common import FLUSH_INTERVAL_SECONDS, KEEPALIVE_INTERVAL_SECONDS
from jxai_app.store.turn import TurnStart
from jxai_app.store.usage import context_warning
from jxai_app.core.streaming.events import (
    DeltaEvent,
    ReasoningEvent,
    StreamEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UsageEvent,
)


class RecorderStream:
    """One turn's round state, buffered stream and flush rules (see module docstring).

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

    def _buffer(self, apply: Callable[..., None], *args: str) -> bool:
        """Apply one stream fragment to the round buffer (``apply(*args)``) unless no round is
        open (CS-5 … CS-7: then ignored, returns False). Memory only; returns ``flush_due``."""
        if not self._streaming:
            return False
        apply(*args)
        return self.flush_due

    def add_delta(self, content: str) -> bool:
        """Append answer text (CS-5). Memory only; ignored unless streaming. Returns ``flush_due``."""
        return self._buffer(self._round.add_text, content)

    def add_reasoning(self, content: str) -> bool:
        """Append thinking text, kept apart from the answer (CS-6). Memory only; returns ``flush_due``."""
        return self._buffer(self._round.add_reasoning, content)

    def tool_call_start(self, call_id: str, name: str) -> bool:
        """Open a call (CS-7); a repeated start of an open id is ignored (one call, RP-10).
        Memory only; returns ``flush_due``."""
        return self._buffer(self._round.start_call, call_id, name)

    def tool_call_delta(self, call_id: str, args: str) -> bool:
        """Append an argument fragment to an open call; unknown ids are ignored (CS-8).
        Memory only; returns ``flush_due``."""
        return self._buffer(self._round.add_args, call_id, args)

    def tool_call_end(self, call_id: str) -> bool:
        """Mark a call complete (CS-9: changes nothing saved; a call that never ends is still
        saved with its cut-off arguments). Memory only; returns ``flush_due``."""
        return self._buffer(self._round.end_call, call_id)

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

    # ------------------------------------------------------------------ streaming writes
    def _take_text(self) -> tuple[str, str | None]:
        """The buffered text and reasoning (buffer marked clean); counts as a write."""
        self._last_write = self._clock()
        return self._round.take_text()

    def _mark_lost(self) -> bool:
        self._lost = self._ended = True
        self._streaming = False
        self._message_id = None
        return False

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
