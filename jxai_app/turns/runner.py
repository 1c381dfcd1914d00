"""One running turn: the agent loop → the store → every socket (issue 4 item 2; SPEC §5–§7).

A :class:`TurnRunner` is a task owned by the worker process, not by a connection. It runs
:func:`jxai_app.core.agent.run_turn` and, for every event:

1. numbers it (``seq`` 1, 2, 3 … per turn) with the id of the assistant message it belongs
   to, and appends it to the turn's :class:`~jxai_app.turns.log.ReplayLog`;
2. pushes it at once to the sockets of this process following the conversation (the hub);
3. gathers it for the layer (:class:`~jxai_app.turns.batches.LayerBatcher`): every
   ``batch_interval`` (50 ms) one ``jxai.frames`` message with every frame since the last
   one goes to the conversation's group (the layer drops messages past 100 per channel);
4. applies it to the store through a :class:`~jxai_app.store.TurnRecorder`: text stays in
   memory and is flushed at most every 2 s; a round's end, a tool result and the turn's end
   are one or two writes each (all writes one at a time, in a thread, never per delta);
5. at each round's end, adds the round's tokens to the user's usage ledger
   (:class:`~jxai_app.turns.meter.RoundMeter`: the provider's ``usage``, or an estimate
   marked ``estimated`` when it sent none).

Per-turn frames besides the events, in order on the same path: ``conversation`` (status
streaming) and ``message_saved`` of the user message first; ``message_saved`` after each
completed round and tool result; ``conversation`` (final status) after the turn ended in
the database, right after the ``turn_end`` event.

A runner exists only for a send that committed (:mod:`jxai_app.turns.launch`): the
model request goes out after the send's transaction, never for a refused or failed send.

Control from any worker: :class:`~jxai_app.turns.remote.ControlChannel` (cancel, replay,
follow/unfollow).

When the rows show the turn is no longer its own (Stop handled by the database on another
worker, the conversation deleted, recovery), the runner sets its own Stop signal and writes
nothing more; its events still reach the sockets, ending with ``turn_end``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import aclosing
from typing import Any, Callable

from channels.db import database_sync_to_async

from jxai_app import conf
from jxai_app.core.agent import (
    AgentPolicy, RoundEndEvent, RoundStartEvent, ToolResultEvent, ToolStartEvent, TurnEndEvent, run_turn,
)
from jxai_app.models import Conversation, Message
from jxai_app.core.problems import problem
from jxai_app.store.serializers import conversation_dict, message_dict
from jxai_app.store import TurnRecorder, TurnStart
from jxai_app.store.wire import with_tool_calls
from jxai_app.core.streaming.base import REQUEST_SENT
from jxai_app.core.streaming.events import DoneEvent, ErrorEvent
from jxai_app.core.tools import ToolContext
from jxai_app.turns.batches import LayerBatcher
from jxai_app.turns.hub import TurnHub, TurnState
from jxai_app.turns.log import ReplayLog
from jxai_app.turns.meter import RoundMeter
from jxai_app.turns.remote import ControlChannel

__all__ = ["TurnRunner"]

logger = logging.getLogger("jxai_app.turns")

KEEPALIVE_TICK_SECONDS = 3.0
"""The recorder is asked to flush at least this often (it writes a heartbeat only when due)."""
OPENING_AT_LATEST_SECONDS = 0.02
"""The turn's opening frames (``conversation``, ``message_saved``) go out once the model
request is written, or this long after the turn started, whichever comes first."""
YIELD_INTERVAL_SECONDS = 0.002
"""Longest stretch the runner applies buffered events without letting other tasks (the
sockets that send them) run."""


async def _let_sockets_write() -> None:
    """Give the loop three turns: the socket's task sends the frame in the first; the
    server's write goes out when the loop next polls its sockets (daphne's Twisted
    transports buffer a write until the socket is reported writable), in the second, after
    this task's own wake-up unless it has yielded again; the third runs that write before
    this task goes on with the rest of a buffered burst."""
    for _ in range(3):
        await asyncio.sleep(0)


def _read_message(pk: int) -> dict[str, Any] | None:
    message = with_tool_calls(Message.objects.filter(pk=pk)).first()
    return None if message is None else message_dict(message)


def _read_conversation(pk: uuid.UUID) -> dict[str, Any] | None:
    conversation = Conversation.objects.filter(pk=pk).first()
    return None if conversation is None else conversation_dict(conversation)


class TurnRunner:
    """Runs one turn (see the module docstring); built and started by
    :func:`jxai_app.turns.launch.start_turn` once the send committed.

    Args:
        hub: the worker's hub (registry, local followers, layer).
        user: the requesting user (tools get it in their ``ToolContext``).
        turn: what the send saved (conversation, turn id, the two message ids).
        user_message: the saved user message (protocol dict), published first.
        conversation: the conversation as the send saved it (protocol dict, status
            ``streaming``), announced first without reading it again.
        model: the model alias the turn uses.
        history: OpenAI wire messages so far, ending with the user message.
        context_window: the model's context window in tokens.
        tools: a tool view (``None``: no tools offered).
        client_factory: builds the model's streaming client (may raise; the turn then
            ends with an ``error`` event).
        system_prompt, policy: as ``run_turn`` takes them.
    """

    def __init__(self, *, hub: TurnHub, user: Any, turn: TurnStart, user_message: dict[str, Any],
                 conversation: dict[str, Any], model: str, history: list[dict[str, Any]], context_window: int | None,
                 tools: Any, client_factory: Callable[[], Any], system_prompt: str, policy: AgentPolicy) -> None:
        self.hub = hub
        self.user = user
        self.turn: TurnStart = turn
        """What the send saved."""
        self.conversation_id: uuid.UUID = turn.conversation_id
        self._cid = str(turn.conversation_id)
        self.turn_id = str(turn.turn_id)
        self.model = model
        self.user_message = user_message
        self._conversation = conversation
        self.signal = asyncio.Event()
        self.log = ReplayLog()
        self.finished = asyncio.Event()
        self.remote_followers: set[str] = set()
        self._history = history
        self._tools = tools
        self._client_factory = client_factory
        self._system_prompt = system_prompt
        self._policy = policy
        self._recorder = TurnRecorder(turn, context_window=context_window)
        self._message_id: int | None = turn.assistant_message_id
        self._ended = False
        self._lost = False
        self._write_lock = asyncio.Lock()
        self._flush_wanted = asyncio.Event()
        self._batcher = LayerBatcher(hub, turn.conversation_id, self.turn_id) if hub.fanout else None
        self._remote = ControlChannel(self)
        self._error: ErrorEvent | None = None
        self._meter = RoundMeter(history, system_prompt)
        self._first_notice: asyncio.Task[None] | None = None
        self._opened = False
        self._opening: asyncio.TimerHandle | None = None
        self._held: RoundStartEvent | None = None
        self.task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ control
    def start(self) -> asyncio.Task[None]:
        """Register with the hub (cancel, replay and snapshots find the turn from now on) and
        start the task (strong reference kept by the hub)."""
        self.hub.register(self)
        self.hub.starting.add(self)
        self.task = self.hub.spawn(self._main(), name=f"jxai-turn-{self.turn_id}")
        return self.task

    def cancel(self) -> None:
        """Stop: the model request closes within ~100 ms, the turn ends ``cancelled`` and its
        partial assistant message is dropped (completed rounds stay)."""
        self.signal.set()

    @property
    def ended(self) -> bool:
        """True once ``turn_end`` was published."""
        return self._ended

    def state(self, after_seq: int = 0) -> TurnState:
        """The turn's items after ``after_seq`` (for ``snapshot`` and ``replay``)."""
        return TurnState(turn_id=self.turn_id, user_message_id=self.turn.user_message_id,
                         last_seq=self.log.last_seq, items=self.log.items_after(after_seq), ended=self._ended)

    def follower_left(self) -> None:
        """A socket following the conversation closed: with ``JXAI_CANCEL_ON_DISCONNECT``,
        Stop the turn when nobody follows it any more, on any worker."""
        if self._ended or self.signal.is_set() or not conf.cancel_on_disconnect():
            return
        if self.hub.follower_count(self.conversation_id) == 0 and not self.remote_followers:
            logger.info("turn %s: last follower left, cancelling (JXAI_CANCEL_ON_DISCONNECT)", self.turn_id)
            self.cancel()

    # ------------------------------------------------------------------ publishing
    def _publish(self, frame: dict[str, Any]) -> None:
        self.hub.push_local(self.conversation_id, frame)
        if self._batcher is not None:
            self._batcher.add(frame)

    def _open(self) -> None:
        """Publish the turn's opening frames, ``conversation`` (status streaming) then
        ``message_saved`` of the user message, once: when the model request is written
        (:data:`jxai_app.core.streaming.base.REQUEST_SENT`), at the latest after
        ``OPENING_AT_LATEST_SECONDS``, and always before the turn's first event. The sockets
        encode and send them while the provider prepares its answer, not in front of the
        request (issue 4, time to first token)."""
        if self._opened:
            return
        self._opened = True
        if self._opening is not None:
            self._opening.cancel()
        frame = {"type": "conversation", "conversation": self._conversation}
        self._publish(frame)
        # the notice to the user's other sockets (a layer round trip with Redis) once the
        # model's first output came, at most 50 ms later (StartingTurns.after)
        self._first_notice = self.hub.spawn(self._notify_first(frame), name=f"jxai-turn-notice-{self.turn_id}")
        self._publish({"type": "message_saved", "conversationId": self._cid, "message": self.user_message})
        if self._held is not None:  # the first round's start, held by _run until now
            held, self._held = self._held, None
            self._round_started(held)

    def _round_started(self, event: RoundStartEvent) -> None:
        self._meter.start_round()
        self._publish_event(event.to_dict())

    def _publish_event(self, event: dict[str, Any]) -> None:
        self._open()
        seq = self.log.last_seq + 1
        self.log.append(seq, self._message_id, event)
        self._publish({"type": "events", "conversationId": self._cid, "turnId": self.turn_id,
                       "items": [{"seq": seq, "messageId": self._message_id, "event": event}]})

    async def _publish_conversation(self, data: dict[str, Any] | None = None) -> None:
        if data is None:
            data = await database_sync_to_async(_read_conversation)(self.conversation_id)
        if data is not None:
            frame = {"type": "conversation", "conversation": data}
            self._publish(frame)  # in order with the events, for the followers
            if self._first_notice is not None:  # the user's other tabs get the notices in order
                await asyncio.gather(self._first_notice, return_exceptions=True)
            await self.hub.notify_user(self.conversation_id, frame, user_pk=getattr(self.user, "pk", None))

    async def _notify_first(self, frame: dict[str, Any]) -> None:
        await self.hub.starting.after()
        await self.hub.notify_user(self.conversation_id, frame, user_pk=getattr(self.user, "pk", None))

    async def _publish_message(self, pk: int | None) -> None:
        if pk is None:
            return
        data = await database_sync_to_async(_read_message)(pk)
        if data is not None:
            self._publish({"type": "message_saved", "conversationId": self._cid, "message": data})

    # ------------------------------------------------------------------ store
    async def _write(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a writing recorder method in a thread, one at a time."""
        async with self._write_lock:
            return await database_sync_to_async(method)(*args, **kwargs)

    def _mark_lost(self) -> None:
        if not self._lost:
            logger.info("turn %s: no longer owns conversation %s; stopping", self.turn_id, self.conversation_id)
        self._lost = True
        self.signal.set()

    async def _keep_flushed(self) -> None:
        """Flush the recorder when it says so, and tick for its heartbeat while silent."""
        while not self.finished.is_set():
            try:
                await asyncio.wait_for(self._flush_wanted.wait(), KEEPALIVE_TICK_SECONDS)
            except asyncio.TimeoutError:
                pass
            self._flush_wanted.clear()
            if self.finished.is_set() or self._lost or not self._recorder.flush_due:
                continue
            try:
                if not await self._write(self._recorder.flush):
                    self._mark_lost()
            except Exception:
                logger.exception("turn %s: flush failed", self.turn_id)

    def _context(self, call_id: str, name: str) -> ToolContext:
        return ToolContext(user=self.user, conversation_id=str(self.conversation_id), call_id=call_id,
                           signal=self.signal, model=self.model)

    # ------------------------------------------------------------------ the turn
    async def _main(self) -> None:
        run = asyncio.ensure_future(self._run())
        helpers: list[asyncio.Task[Any]] = []
        try:
            helpers = [asyncio.ensure_future(self._remote.serve()), asyncio.ensure_future(self._keep_flushed())]
            if self._batcher is not None:
                self._batcher.start()
            self._opening = asyncio.get_running_loop().call_later(OPENING_AT_LATEST_SECONDS, self._open)
            await asyncio.shield(run)
        except asyncio.CancelledError:
            self.signal.set()
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            await asyncio.shield(self._abort("cancelled", None))
            raise
        except Exception as exc:
            logger.exception("turn %s failed", self.turn_id)
            self.signal.set()
            await self._abort("error", exc)
        finally:
            if self._opening is not None:
                self._opening.cancel()
            self.hub.starting.discard(self)
            self.finished.set()
            self._flush_wanted.set()
            if self._batcher is not None:
                self._batcher.close()
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await self._remote.close()
            self.hub.unregister(self)

    async def _run(self) -> None:
        """The agent loop's events, applied in order. The first round's start is held until
        the opening frames go out (:meth:`_open` publishes it right after them), so that it
        does not send them before the request."""
        REQUEST_SENT.set(self._open)  # this task's context: the request's trace calls it
        client = self._client_factory()
        events = run_turn(client=client, tools=self._tools, history=self._history,
                          system_prompt=self._system_prompt, policy=self._policy, signal=self.signal,
                          context_factory=self._context)
        loop = asyncio.get_running_loop()
        yielded = loop.time()
        awaiting_output = True
        async with aclosing(events) as stream:
            async for event in stream:
                if not self._opened and isinstance(event, RoundStartEvent) and event.round == 1:
                    self._held = event
                    continue
                if not isinstance(event, RoundStartEvent):
                    self.hub.starting.discard(self)  # output, or the turn's end: housekeeping may run
                await self._apply(event)
                # A network read can hold many events that the HTTP stack hands over without
                # ever suspending, so the sockets' tasks would wait for the whole burst: let
                # them send a round's first output at once, and catch up at least every few ms.
                if isinstance(event, RoundStartEvent):
                    awaiting_output = True
                elif awaiting_output:
                    awaiting_output = False
                    await _let_sockets_write()
                    yielded = loop.time()
                elif loop.time() - yielded >= YIELD_INTERVAL_SECONDS:
                    await asyncio.sleep(0)
                    yielded = loop.time()

    async def _apply(self, event: Any) -> None:
        recorder = self._recorder
        if isinstance(event, RoundStartEvent):
            if event.round > 1 and not self._lost:
                if not await self._write(recorder.begin_round):
                    self._mark_lost()
                elif recorder.message_id is not None:
                    self._message_id = recorder.message_id
            self._round_started(event)
        elif isinstance(event, RoundEndEvent):
            self._publish_event(event.to_dict())
            if event.stop_reason not in ("cancelled", "error") and not self._lost:
                if await self._write(recorder.finish_round, stop_reason=event.stop_reason,
                                     input_estimate=self._meter.input_estimate):
                    await self._publish_message(self._message_id)
                else:
                    self._mark_lost()
            await self._meter.record(self.user, self.turn_id)
            self._meter.grow(event.message)
        elif isinstance(event, ToolStartEvent):
            self._publish_event(event.to_dict())
        elif isinstance(event, ToolResultEvent):
            self._meter.grow(event.message)
            self._publish_event(event.to_dict())
            if not self._lost:
                reply = await self._write(recorder.attach_tool_result, call_id=event.call_id,
                                          content=event.message.get("content", ""), success=event.success)
                if reply is None:
                    self._mark_lost()
                else:
                    await self._publish_message(reply.pk)
        elif isinstance(event, TurnEndEvent):
            await self._end(event)
        elif isinstance(event, (DoneEvent, ErrorEvent)):
            if isinstance(event, ErrorEvent):
                self._error = event
            self._publish_event(event.to_dict())
        else:
            self._meter.see(event)
            self._publish_event(event.to_dict())
            if recorder.record(event):
                self._flush_wanted.set()

    def _failure_problem(self, message: str) -> dict[str, Any]:
        error = self._error
        if error is not None and error.problem is not None:
            doc = dict(error.problem)
        else:
            doc = problem("upstream-failure", message)
        if error is not None and error.code and "code" not in doc:
            doc["code"] = error.code
        return doc

    async def _end(self, event: TurnEndEvent) -> None:
        """Save the turn's end (one or two writes), then publish ``turn_end`` and the
        conversation's final state."""
        recorder = self._recorder
        if not self._lost:
            outcome = event.outcome
            if outcome == "complete":
                ok = await self._write(recorder.end_turn)
            elif outcome == "cancelled":
                ok = await self._write(recorder.cancel)
            elif outcome == "cap_partial":
                ok = await self._write(recorder.add_assistant_message, event.message or "")
                if ok:
                    self._message_id = recorder.message_id
                    await self._publish_message(self._message_id)
                    ok = await self._write(recorder.end_turn)
            elif outcome == "cap_failed":
                ok = await self._write(recorder.fail, event.message or "", None)
            else:  # error, empty
                text = event.message or "The model request failed."
                ok = await self._write(recorder.fail, text, self._failure_problem(text))
            if not ok:
                self._lost = True
        wire = event.to_dict()
        wire.pop("appended", None)  # the saved messages travel as message_saved
        self._publish_event(wire)
        self._ended = True
        await self._publish_conversation()

    async def _abort(self, outcome: str, exc: BaseException | None) -> None:
        """The task failed or was cancelled outside the loop's own flow: end the turn in the
        database and tell the sockets, unless ``turn_end`` already went out."""
        self.hub.starting.discard(self)
        if self._ended:
            return
        try:
            if outcome == "cancelled":
                if not self._lost:
                    await database_sync_to_async(self._recorder.cancel)()
                self._publish_event(DoneEvent(stop_reason="cancelled").to_dict())
                self._publish_event({"type": "turn_end", "outcome": "cancelled", "message": "The turn was stopped.",
                                     "usage": None})
            else:
                detail = f"The turn failed unexpectedly ({type(exc).__name__})."
                doc = problem("internal-error", detail, code="internal_error")
                if not self._lost:
                    await database_sync_to_async(self._recorder.fail)(detail, doc)
                self._publish_event(ErrorEvent(message=detail, code="internal_error", problem=doc).to_dict())
                self._publish_event({"type": "turn_end", "outcome": "error", "message": detail, "usage": None})
            self._ended = True
            await self._publish_conversation()
        except Exception:
            logger.exception("turn %s: could not end cleanly", self.turn_id)
