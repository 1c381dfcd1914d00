"""One running turn: the agent loop → the store → every socket (docs/turns.md).

A :class:`TurnRunner` is a task owned by the worker process, not by a connection. It runs
:func:`jxai_app.core.agent.run_turn` and, for every event, in order:

1. numbers it (``seq`` 1, 2, 3 … per turn) with the id of the assistant message it belongs
   to and appends it to the turn's :class:`~jxai_app.turns.replay.ReplayLog`;
2. publishes it (``events`` frame) to every socket following the conversation, on every
   worker (:mod:`jxai_app.turns.delivery`);
3. at a round's end, a tool result and the turn's end, saves what the agent loop assembled
   through the turn's :class:`~jxai_app.store.TurnRecorder` (never per delta), with the
   round's usage and the turn's end in its budget (:class:`~jxai_app.policy.budget.TurnBudget`)
   in the same transaction, and publishes ``message_saved`` once it is saved, read in the
   same database hop (docs/turns.md "Writes").

Frames of a turn, in order on one path: ``conversation`` (status streaming) and
``message_saved`` of the user message; ``events`` from seq 1; ``message_saved`` after each
saved round and tool result; the ``turn_end`` event; ``conversation`` (final status).

**Faults.** The worker renews the leases of its running turns every third of
``JXAI_TURN_LEASE_SECONDS`` (:mod:`jxai_app.turns.recovery`). A write that fails because the database is
unreachable is retried with backoff for up to ``JXAI_STORE_RETRY_SECONDS``, the finished
state kept in memory; the followers get one ``saving`` frame, then the normal frames once
it is saved. When it gives up, the turn ends as an ``error`` (an ``error`` event with
problem ``service-unavailable``, then ``turn_end``); the conversation row is left to the
lease rule, which drops the partial message once the database answers again. When the rows
show the turn is no longer its own (Stop handled in the database, the conversation deleted,
the turn recovered), the runner sets its own Stop signal and writes nothing more; its
events still reach the sockets, ending with ``turn_end``.

**Approval.** A turn whose round has calls waiting for the owner's approval ends
``awaiting_approval``: the pause is saved first (the calls waiting, the conversation paused,
no lease), then the round's ``message_saved`` (the card), the ``tool_approval_request``
events and ``turn_end``. A turn resumed after the decision (``TurnStart.decisions``) answers
them first and opens its own first round (docs/approval.md).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import aclosing
from datetime import datetime
from typing import Any, Callable, Mapping

from django.db import transaction
from django.utils import timezone

from jxai_app import conf
from jxai_app.core.agent import (
    RoundEndEvent, RoundStartEvent, ToolApprovalRequestEvent, ToolResultEvent, ToolStartEvent,
    TurnEndEvent, run_turn,
)
from jxai_app.core.errors import ProblemError
from jxai_app.core.problems import problem
from jxai_app.core.streaming.events import (
    DeltaEvent, DoneEvent, ErrorEvent, ReasoningEvent, ToolCallDeltaEvent, ToolCallStartEvent, UsageEvent,
)
from jxai_app.core.streaming.usage import reached_provider
from jxai_app.core.tokens import estimate_tokens
from jxai_app.core.tools import ToolContext
from jxai_app.db import DATABASE_ERRORS, db_call
from jxai_app.ops import metrics
from jxai_app.store import TurnRecorder, round_usage
from jxai_app.store.serializers import conversation_dict, message_dict
from jxai_app.turns.clients import turn_client
from jxai_app.turns.frames import conversation_frame, message_frame, saved_frame
from jxai_app.turns.hub import TurnHub, TurnState
from jxai_app.turns.observe import TurnObserver
from jxai_app.turns.plan import TurnPlan
from jxai_app.turns.replay import ReplayLog

__all__ = ["StoreUnavailable", "TurnRunner"]

logger = logging.getLogger("jxai_app.turns")

YIELD_EVERY = 64
"""One network read can hold hundreds of events that the HTTP stack hands over without
suspending, and the sockets' writes wait until this task suspends. So the runner yields to
the event loop after a round's first output (it goes out at once) and then after every this
many events (later ones go out in batches, a frame each). Measured with ``bench/e2e.py
--latency-only`` (embedded default): added time to first token 28–31 ms p50 without, about
10 ms with; yielding after every event gave the same first token but 100 ms instead of 35 ms
added to the last one."""

class StoreUnavailable(Exception):
    """A write was retried for ``JXAI_STORE_RETRY_SECONDS`` and the database never answered."""


class _RoundTally:
    """What one turn's model requests cost, for :func:`jxai_app.store.round_usage`: the
    provider's ``usage`` of the current round, the characters it produced, and the estimated
    size of the next request (the history, grown by every message the turn appends)."""

    def __init__(self, history: list[dict[str, Any]], system_prompt: str) -> None:
        self.input_estimate = estimate_tokens(history) + estimate_tokens(system_prompt)
        self.reported: UsageEvent | None = None
        self.produced = 0
        self.terminal: DoneEvent | ErrorEvent | None = None

    def start(self) -> None:
        self.reported, self.produced, self.terminal = None, 0, None

    def see(self, event: Any) -> None:
        if isinstance(event, (DoneEvent, ErrorEvent)):
            self.terminal = event
        elif isinstance(event, UsageEvent):
            self.reported = event
        elif isinstance(event, (DeltaEvent, ReasoningEvent)):
            self.produced += len(event.content)
        elif isinstance(event, ToolCallStartEvent):
            self.produced += len(event.name)
        elif isinstance(event, ToolCallDeltaEvent):
            self.produced += len(event.args)

    def usage(self) -> tuple[dict[str, Any] | None, bool]:
        return round_usage(self.reported, produced_chars=self.produced, input_estimate=self.input_estimate,
                           reached=reached_provider(self.terminal))

    def sent(self) -> bool:
        """Whether the round's request went to the provider: not when jxai refused it itself
        (``quota-exceeded`` from :class:`~jxai_app.turns.limits.TurnLimits`), which is no
        provider request for the ledger's counts."""
        return not (isinstance(self.terminal, ErrorEvent) and self.terminal.code == "quota-exceeded")

    def grow(self, message: dict[str, Any] | None) -> None:
        if message:
            self.input_estimate += estimate_tokens(message)


class TurnRunner:
    """Runs one turn (module docstring); built and started by
    :func:`jxai_app.turns.start.launch` once the start committed.

    Args:
        hub: the worker's hub (registry, delivery).
        plan: what the start saved and read: the user (tools get it in their
            ``ToolContext``; usage is theirs), the turn, its budget, model, tools and system
            prompt.
    """

    def __init__(self, *, hub: TurnHub, plan: TurnPlan) -> None:
        turn = plan.turn
        self.hub, self.user, self.turn = hub, plan.user, turn
        self.conversation_id: uuid.UUID = turn.conversation_id
        self.turn_uuid: uuid.UUID = turn.turn_id
        self.turn_id = str(turn.turn_id)
        self.signal = asyncio.Event()
        """Stop: set by :meth:`cancel`, by a lost turn, or by the drain's end."""
        self.log = ReplayLog()
        self.ended = False
        """True once ``turn_end`` was published."""
        self.task: asyncio.Task[None] | None = None
        self._cid = str(turn.conversation_id)
        self._plan = plan
        self._budget = plan.budget
        self._recorder = TurnRecorder(turn, user=plan.user, context_window=plan.model.context_window)
        self._message_id: int | None = turn.assistant_message_id
        self._tally = _RoundTally(turn.history, plan.system_prompt)
        self._call_started: dict[str, datetime] = {}
        self._error: ErrorEvent | None = None
        self._waiting: list[ToolApprovalRequestEvent] = []
        """The round's calls that wait for approval (docs/approval.md "The turn pauses")."""
        self._timing = conf.get_turn_timing()
        self._saving_told = False
        self._observer = TurnObserver(model=turn.model, conversation_id=self._cid, turn_id=self.turn_id)

    # ------------------------------------------------------------------ control
    def start(self) -> asyncio.Task[None]:
        """Register with the hub (Stop, replays and snapshots find the turn from now on)
        and start the task."""
        self.hub.register(self)
        self.task = self.hub.spawn(self._main(), name=f"jxai-turn-{self.turn_id}")
        return self.task

    def cancel(self) -> None:
        """Stop: the model request closes within ~100 ms, the turn ends ``cancelled`` and its
        partial assistant message is dropped (completed rounds stay)."""
        self.signal.set()

    def state(self, after_seq: int = 0) -> TurnState:
        """The turn's items after ``after_seq`` (for ``snapshot`` and ``replay``)."""
        return TurnState(turn_id=self.turn_id, user_message_id=self.turn.anchor_message_id,
                         last_seq=self.log.last_seq, items=self.log.items_after(after_seq), ended=self.ended)

    # ------------------------------------------------------------------ publishing
    def _publish(self, frame: dict[str, Any]) -> None:
        self.hub.delivery.publish(self.conversation_id, frame)

    def _event(self, event: dict[str, Any]) -> None:
        seq = self.log.last_seq + 1
        self.log.append(seq, self._message_id, event)
        self._observer.see(event)
        self._publish({"type": "events", "conversationId": self._cid, "turnId": self.turn_id,
                       "items": [{"seq": seq, "messageId": self._message_id, "event": event}]})

    def _publish_conversation(self, data: dict[str, Any]) -> None:
        frame = {"type": "conversation", "conversation": data}
        self._publish(frame)
        self.hub.delivery.publish_user(getattr(self.user, "pk", None), self.conversation_id, frame)

    def _publish_saved(self, frame: Mapping[str, Any] | None) -> None:
        """Publish a frame a write read back in its own hop (``None``: nothing to tell)."""
        if frame is not None:
            if frame.get("type") == "conversation":
                self._publish_conversation(frame["conversation"])
            else:
                self._publish(dict(frame))

    # ------------------------------------------------------------------ writes (sync: database threads)
    def _finish_round(self, usage: dict[str, Any] | None, estimated: bool, **round_end: Any) -> Any:
        """A round's message and its usage in one transaction, then its ``message_saved``."""
        with transaction.atomic():
            saved = self._recorder.finish_round(usage=usage, estimated=estimated, **round_end)
            self._budget.settle(usage, estimated=estimated)  # spent even when the message is no longer ours
        return saved, saved_frame(self.conversation_id, self._recorder.saved) if saved else None

    def _tool_result(self, **result: Any) -> Any:
        reply = self._recorder.attach_tool_result(**result)
        return None if reply is None else saved_frame(self.conversation_id, self._recorder.saved)

    def _close(self, write: Callable[..., bool], *args: Any) -> Any:
        """The turn's end (``write``: the recorder's ``end_turn``, ``fail``, ``cancel`` or
        ``pause``) and its budget closed in one transaction, then the conversation's frame."""
        with transaction.atomic():
            ended = write(*args)
            if ended:
                self._budget.close()
        return ended, conversation_frame(self.conversation_id)

    # ------------------------------------------------------------------ the store
    async def _save(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a store call in a database thread; while the database is unreachable, retry
        with backoff (0.25 s doubling to 2 s) for up to ``JXAI_STORE_RETRY_SECONDS``, telling
        the followers once (``saving``).

        Raises:
            StoreUnavailable: the database never answered in time.
            ProblemError: the store refused (e.g. an unknown tool call id).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timing.store_retry
        delay = 0.25
        while True:
            try:
                return await db_call(method, *args, **kwargs)
            except DATABASE_ERRORS as exc:
                metrics.STORE_WRITE_RETRIES.inc()
                if loop.time() + delay > deadline:
                    raise StoreUnavailable(str(exc)) from exc
                if not self._saving_told:
                    self._saving_told = True
                    logger.warning("turn %s: the database is not answering (%s); retrying for up to %g s",
                                   self.turn_id, exc, self._timing.store_retry)
                    self._publish({"type": "saving", "conversationId": self._cid, "turnId": self.turn_id})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _lost(self) -> None:
        if not self._recorder.lost:
            return
        if not self.signal.is_set():
            logger.info("turn %s: no longer owns conversation %s; stopping", self.turn_id, self.conversation_id)
        self.signal.set()

    def lease_lost(self) -> None:
        """The worker's lease renewal found the turn gone (stopped in the database, taken,
        deleted): write nothing more and stop."""
        self._recorder.lose()
        self._lost()

    def _context(self, call_id: str, name: str) -> ToolContext:
        return ToolContext(user=self.user, conversation_id=self._cid, call_id=call_id, signal=self.signal,
                           model=self.turn.model)

    # ------------------------------------------------------------------ the turn
    async def _main(self) -> None:
        self._observer.started()
        try:
            self._publish_conversation(conversation_dict(self.turn.conversation))
            if self.turn.resumed_after is None:  # a resumed turn's messages are all saved already
                self._publish({"type": "message_saved", "conversationId": self._cid,
                               "message": message_dict(self.turn.user_message, self.turn.user_siblings)})
            await self._run()
        except asyncio.CancelledError:
            self.signal.set()
            await asyncio.shield(self._abort("cancelled", None))
            raise
        except StoreUnavailable as exc:
            await self._give_up(exc)
        except Exception as exc:
            logger.exception("turn %s failed", self.turn_id)
            self.signal.set()
            await self._abort("error", exc)
        finally:
            self._observer.close()
            await self.hub.delivery.flush()
            self.hub.unregister(self)

    async def _run(self) -> None:
        plan = self._plan
        events = run_turn(client=turn_client(plan.model.alias, plan.budget), tools=plan.tools, history=self.turn.history,
                          system_prompt=plan.system_prompt, policy=conf.get_agent_policy(), signal=self.signal,
                          context_factory=self._context, decided=self.turn.decisions)
        unyielded = 0
        async with aclosing(events) as stream:
            async for event in stream:
                await self._apply(event)
                unyielded += 1
                if isinstance(event, RoundStartEvent):
                    unyielded = YIELD_EVERY - 1  # the round's first output yields at once
                elif unyielded >= YIELD_EVERY:
                    unyielded = 0
                    await asyncio.sleep(0)

    async def _apply(self, event: Any) -> None:
        recorder = self._recorder
        if isinstance(event, RoundStartEvent):
            if (event.round > 1 or not recorder.round_open) and not recorder.lost:  # a resumed turn opens round 1
                if await self._save(recorder.begin_round):
                    self._message_id = recorder.message_id
                self._lost()
            self._tally.start()
            self._event(event.to_dict())
        elif isinstance(event, RoundEndEvent):
            self._event(event.to_dict())
            usage, estimated = self._tally.usage()
            self._observer.round_usage(usage, estimated)
            if event.stop_reason not in ("cancelled", "error") and not recorder.lost:
                _, frame = await self._save(self._finish_round, usage, estimated, message=event.message,
                                            stop_reason=event.stop_reason, call_started=self._call_started)
                self._publish_saved(frame)
                self._lost()
            else:  # no message to save; its tokens were spent all the same, a failed one counts as such
                await self._save(self._budget.settle, usage, estimated=estimated,
                                 failed=event.stop_reason == "error" and self._tally.sent())
            self._tally.grow(event.message)
        elif isinstance(event, ToolStartEvent):
            self._event(event.to_dict())
        elif isinstance(event, ToolResultEvent):
            self._tally.grow(event.message)
            self._event(event.to_dict())
            if not recorder.lost:
                self._publish_saved(await self._save(self._tool_result, call_id=event.call_id,
                                                     content=event.message.get("content", ""),
                                                     success=event.success))
                self._lost()
        elif isinstance(event, ToolApprovalRequestEvent):  # published once the pause is saved (_end)
            self._waiting.append(event)
        elif isinstance(event, TurnEndEvent):
            await self._end(event)
        elif isinstance(event, (DoneEvent, ErrorEvent)):
            if isinstance(event, ErrorEvent):
                self._error = event
            self._tally.see(event)
            self._event(event.to_dict())
        else:
            self._tally.see(event)
            if isinstance(event, ToolCallStartEvent):
                self._call_started.setdefault(event.id, timezone.now())
            self._event(event.to_dict())

    def _failure_problem(self, message: str) -> dict[str, Any]:
        error = self._error
        doc = dict(error.problem) if error is not None and error.problem is not None else problem(
            "upstream-failure", message)
        if error is not None and error.code and "code" not in doc:
            doc["code"] = error.code
        return doc

    async def _end(self, event: TurnEndEvent) -> None:
        """Save the turn's end, then publish ``turn_end`` and the conversation's final state."""
        recorder = self._recorder
        final: Mapping[str, Any] | None = None
        if not recorder.lost:
            outcome = event.outcome
            if outcome == "complete":
                _, final = await self._save(self._close, recorder.end_turn)
            elif outcome == "cancelled":
                ended, final = await self._save(self._close, recorder.cancel)
                if ended:  # the question's "Stopped" mark
                    self._publish_saved(await self._save(message_frame, self.conversation_id,
                                                         recorder.stopped_question))
            elif outcome == "awaiting_approval":  # every tab shows the saved card (docs/approval.md)
                ended, final = await self._save(self._close, recorder.pause, [e.call_id for e in self._waiting])
                if ended:
                    self._publish_saved(await self._save(message_frame, self.conversation_id, self._message_id))
            elif outcome == "cap_partial":
                if await self._save(recorder.add_assistant_message, event.message or ""):
                    self._message_id = recorder.message_id
                    self._publish_saved(saved_frame(self.conversation_id, recorder.saved))
                    _, final = await self._save(self._close, recorder.end_turn)
            elif outcome == "cap_failed":
                _, final = await self._save(self._close, recorder.fail, event.message or "", None)
            else:  # error, empty
                text = event.message or "The model request failed."
                _, final = await self._save(self._close, recorder.fail, text, self._failure_problem(text))
        if final is None:  # lost, or not ended here: the row says what became of the turn
            final = await self._save(conversation_frame, self.conversation_id)
        for waiting in self._waiting:  # after the pause is saved: a tab can decide at once
            self._event(waiting.to_dict())
        wire = event.to_dict()
        wire.pop("appended", None)  # the saved messages travel as message_saved
        self._event(wire)
        self.ended = True
        self._publish_saved(final)

    async def _give_up(self, exc: StoreUnavailable) -> None:
        """The database never came back: end the turn for every tab as an error. The row
        stays as the outage left it; the lease rule drops the partial once it answers."""
        logger.error("turn %s: giving up saving after %g s: %s", self.turn_id, self._timing.store_retry, exc)
        self.signal.set()
        detail = "The answer could not be saved: the database did not answer in time."
        doc = problem("service-unavailable", detail, code="store_unavailable", retry_after=5)
        self._end_for_tabs(ErrorEvent(message=detail, code="store_unavailable", problem=doc), "error", detail)
        data = conversation_dict(self.turn.conversation)
        self._publish_conversation({**data, "status": "error",
                                    "lastError": {"message": detail, "code": "store_unavailable", "problem": doc}})

    def _end_for_tabs(self, terminal: DoneEvent | ErrorEvent, outcome: str, message: str) -> None:
        if not self.ended:
            self._event(terminal.to_dict())
            self._event({"type": "turn_end", "outcome": outcome, "message": message, "usage": None})
            self.ended = True

    async def _abort(self, outcome: str, exc: BaseException | None) -> None:
        """The task failed or was cancelled outside the loop's own flow: end the turn in the
        database (one attempt: the worker may be stopping) and tell the sockets, unless
        ``turn_end`` already went out."""
        if self.ended:
            return
        if outcome == "cancelled":
            write: Callable[[], bool] = self._recorder.cancel
            self._end_for_tabs(DoneEvent(stop_reason="cancelled"), "cancelled", "The turn was stopped.")
        else:
            detail = f"The turn failed unexpectedly ({type(exc).__name__})."
            doc = problem("internal-error", detail, code="internal_error")
            write = lambda: self._recorder.fail(detail, doc)  # noqa: E731
            self._end_for_tabs(ErrorEvent(message=detail, code="internal_error", problem=doc), "error", detail)
        try:
            frame = None
            if not self._recorder.lost:
                _, frame = await db_call(self._close, write)
            self._publish_saved(frame if frame is not None else await db_call(conversation_frame, self.conversation_id))
        except (ProblemError, *DATABASE_ERRORS):
            logger.exception("turn %s: could not end cleanly", self.turn_id)
