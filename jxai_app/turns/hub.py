"""The worker's turn hub: its running turns, its delivery, its leases, its drain
(docs/turns.md).

One :class:`TurnHub` per worker process (per event loop: :func:`jxai_app.turns.worker.get_hub`
makes it). It holds

- the **runners** of the turns running in this process, with strong references to their
  tasks, and the renewal of their leases: every third of ``JXAI_TURN_LEASE_SECONDS``, all of
  them in one statement (:func:`jxai_app.store.leases_renew`) on the worker's lease thread
  (:func:`jxai_app.db.lease_call`), which never waits behind the worker's other database
  work; a runner whose turn is gone stops;
- the **delivery** (:mod:`jxai_app.turns.delivery`), chosen once: in-process only when no
  channel layer other processes share is configured, through the layer otherwise;
- its **background jobs**, given by its maker: the lease watch (:mod:`jxai_app.turns.recovery`),
  which recovers turns whose worker died and tells their tabs;
- the **drain** on SIGTERM under daphne: new turns are refused (``service-unavailable``),
  running turns get up to ``JXAI_DRAIN_SECONDS`` to finish, the rest are stopped, then every
  socket of the worker closes with code 4001 (going away), after its ``turn_end``.

The hub knows its runners only as :class:`Running` (what it calls on them), so it sits below
the runner (docs/architecture.md "Floors").
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Awaitable, Callable, Protocol, Sequence

from channels.layers import InMemoryChannelLayer, get_channel_layer

from jxai_app import conf, store
from jxai_app.db import DATABASE_ERRORS, lease_call
from jxai_app.ops import metrics
from jxai_app.ops.memory import IDLE_TRIM_SECONDS, TRIM_INTERVAL_SECONDS, collect_garbage, release_free_memory, \
    trim_available
from jxai_app.tools import mcp as mcp_tools
from jxai_app.turns.delivery import LayerDelivery, LocalDelivery

__all__ = ["CLOSE_GOING_AWAY", "Running", "TurnHub", "TurnState"]

logger = logging.getLogger("jxai_app.turns")

CLOSE_GOING_AWAY = 4001
"""WebSocket close code of a worker that is shutting down: reconnect (another worker answers).
RFC 6455's own code for this is 1001, but daphne's websocket library lets an application
close only with 1000 or 3000–4999 (autobahn's ``sendClose``), so jxai uses its 4000s range,
as it does for 4401 (docs/websocket.md)."""


class Running(Protocol):
    """A running turn as the hub sees it (:class:`jxai_app.turns.runner.TurnRunner`)."""

    conversation_id: uuid.UUID
    turn_uuid: uuid.UUID
    turn_id: str
    ended: bool
    task: asyncio.Task[None] | None

    def cancel(self) -> None:
        """Stop the turn."""

    def lease_lost(self) -> None:
        """The turn is no longer this worker's: write nothing more and stop."""

    def state(self, after_seq: int = 0) -> TurnState:
        """The turn's items after ``after_seq``."""


Job = Callable[["TurnHub"], Awaitable[None]]
"""A background job of the hub, started with it (the lease watch)."""


class TurnState:
    """What a runner tells about its turn: ``{turnId, userMessageId, lastSeq, items, ended}``."""

    __slots__ = ("turn_id", "user_message_id", "last_seq", "items", "ended")

    def __init__(self, *, turn_id: str, user_message_id: int | None, last_seq: int,
                 items: list[dict[str, Any]], ended: bool) -> None:
        self.turn_id = turn_id
        self.user_message_id = user_message_id
        self.last_seq = last_seq
        self.items = items
        self.ended = ended

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> TurnState:
        """The state in a ``jxai.reply`` layer message (see :meth:`to_message`)."""
        return cls(turn_id=str(message["turnId"]), user_message_id=message.get("userMessageId"),
                   last_seq=int(message["lastSeq"]), items=list(message.get("items") or []),
                   ended=bool(message.get("ended")))

    def to_message(self) -> dict[str, Any]:
        """``{turnId, userMessageId, lastSeq, items, ended}`` for a layer message (msgpack-safe)."""
        return {"turnId": self.turn_id, "userMessageId": self.user_message_id, "lastSeq": self.last_seq,
                "items": self.items, "ended": self.ended}


def choose_delivery(worker_id: str, layer_alias: str = "default") -> LocalDelivery:
    """Through the channel layer when one is configured that other processes can share (not
    Channels' in-memory layer), else in-process only."""
    layer = get_channel_layer(layer_alias)
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return LocalDelivery()
    return LayerDelivery(layer, worker_id=worker_id)


class TurnHub:
    """One worker's turns (module docstring).

    Args:
        delivery: how frames reach sockets (default :func:`choose_delivery`).
        worker_id: a unique id for this worker (default random).
        idle_trim: seconds without a running turn before free memory is returned to the
            system (:mod:`jxai_app.ops.memory`); ``None``: never.
        jobs: background jobs started with the hub, each until the hub shuts down (the
            worker's hub gets the lease watch, :func:`jxai_app.turns.worker.get_hub`); this
            hub's own leases are always renewed.
    """

    def __init__(self, *, delivery: LocalDelivery | None = None, worker_id: str | None = None,
                 idle_trim: float | None = IDLE_TRIM_SECONDS, jobs: Sequence[Job] = ()) -> None:
        self.worker_id = worker_id or uuid.uuid4().hex
        self.delivery = delivery if delivery is not None else choose_delivery(self.worker_id)
        self.draining = False
        """True once the worker stopped taking new turns (SIGTERM)."""
        self._runners: dict[uuid.UUID, Running] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closers: dict[Any, Any] = {}
        self._started: asyncio.Task[None] | None = None
        self._jobs = tuple(jobs)
        self.idle_trim = idle_trim if trim_available() else None
        self._trim_task: asyncio.Task[None] | None = None
        self._last_trim = float("-inf")

    async def ensure_started(self) -> None:
        """Start the delivery, the lease renewal and the jobs once (the first socket does)."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        await self.delivery.start(self._answer)
        self.spawn(self._renew_leases(), name="jxai-lease-renewal")
        for job in self._jobs:
            self.spawn(job(self), name=f"jxai-{type(job).__name__}")

    async def _renew_leases(self) -> None:
        """Renew this worker's leases every third of the lease until cancelled; a renewal the
        database does not take is logged and tried again next time."""
        while True:
            await asyncio.sleep(conf.get_turn_timing().lease / 3)
            runners = {runner.turn_uuid: runner for runner in self.runners()}
            if not runners:
                continue
            try:
                live = await lease_call(store.leases_renew, list(runners))
            except DATABASE_ERRORS as exc:
                logger.warning("leases: the database did not take this worker's renewal (%s)", exc)
                continue
            for turn_id, runner in runners.items():
                if turn_id not in live and not runner.ended:
                    runner.lease_lost()

    # ------------------------------------------------------------------ runners and tasks
    def runner(self, conversation_id: uuid.UUID) -> Running | None:
        """The turn running in this process for the conversation, or ``None``."""
        return self._runners.get(conversation_id)

    def runners(self) -> list[Running]:
        """Every runner of this process."""
        return list(self._runners.values())

    def register(self, runner: Running) -> None:
        """Make ``runner`` the conversation's live runner here."""
        self._runners[runner.conversation_id] = runner

    def unregister(self, runner: Running) -> None:
        """Forget ``runner`` (if still registered); the last one to go schedules the return of
        free memory."""
        if self._runners.get(runner.conversation_id) is runner:
            del self._runners[runner.conversation_id]
        self.trim_soon()

    def spawn(self, coro: Awaitable[Any], *, name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the hub keeps a strong reference to until it ends."""
        task = asyncio.ensure_future(coro)
        if name:
            task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no turn runs here; True when that happened within ``timeout`` seconds."""
        tasks = [r.task for r in self.runners() if r.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            return not pending
        return True

    # ------------------------------------------------------------------ sockets
    def add_socket(self, socket: Any, user_pk: Any, close: Any) -> None:
        """A socket of ``user_pk`` opened; ``close(code)`` closes it (the drain's end)."""
        self.delivery.join_user(user_pk, socket)
        self._closers[socket] = close
        metrics.WEBSOCKETS_OPEN.inc()

    def remove_socket(self, socket: Any, user_pk: Any) -> None:
        """The socket closed."""
        self.delivery.leave_user(user_pk, socket)
        if self._closers.pop(socket, None) is not None:
            metrics.WEBSOCKETS_OPEN.dec()
        self.trim_soon()

    # ------------------------------------------------------------------ other workers
    async def ask_runner(self, conversation_id: uuid.UUID, op: str, **members: Any) -> dict[str, Any] | None:
        """Ask whatever worker runs the conversation's turn (``op``: ``cancel``, ``replay``,
        ``followers``); ``None`` when none answered."""
        return await self.delivery.ask({"op": op, "conversationId": str(conversation_id), **members})

    async def _answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Answer another worker's control request about a turn of this worker."""
        cid = uuid.UUID(str(message.get("conversationId")))
        op = message.get("op")
        if op == "followers":
            count = self.delivery.follower_count(cid)
            return {"followers": count} if count else None
        runner = self._runners.get(cid)
        if runner is None:
            return None
        if op == "cancel":
            runner.cancel()
            return {"cancelled": True, "turnId": runner.turn_id}
        if op == "replay":
            after = message.get("afterSeq")
            return runner.state(after if isinstance(after, int) and after >= 0 else 0).to_message()
        return None

    async def turn_state(self, conversation_id: uuid.UUID, *, after_seq: int = 0) -> TurnState | None:
        """The running turn's events after ``after_seq``: from the local runner at once, else
        by asking the other workers; ``None`` when no runner answered."""
        runner = self._runners.get(conversation_id)
        if runner is not None:
            return runner.state(after_seq)
        answer = await self.ask_runner(conversation_id, "replay", afterSeq=after_seq)
        return None if answer is None else TurnState.from_message(answer)

    def notify(self, conversation_id: uuid.UUID, frame: dict[str, Any], *, user_pk: Any = None) -> None:
        """Publish a notice (not a turn event) to the conversation's followers and, when
        ``user_pk`` is given, to that user's other sockets, on every worker."""
        self.delivery.publish(conversation_id, frame)
        if user_pk is not None:
            self.delivery.publish_user(user_pk, conversation_id, frame)

    # ------------------------------------------------------------------ stopping
    async def drain(self, timeout: float) -> None:
        """Stop taking turns, let running ones finish for up to ``timeout`` seconds, stop the
        rest (each ends ``cancelled``, its partial message dropped), then close every socket
        with :data:`CLOSE_GOING_AWAY` once its ``turn_end`` went out."""
        self.draining = True
        logger.info("draining: %d turn(s) running; new turns are refused", len(self._runners))
        if not await self.wait_idle(timeout):
            for runner in self.runners():
                runner.cancel()
            await self.wait_idle(10.0)
        await self.delivery.flush()

        async def close(socket: Any, closer: Any) -> None:
            await socket.flushed()
            await closer(CLOSE_GOING_AWAY)

        closing = list(self._closers.items())
        for failure in await asyncio.gather(*(close(s, c) for s, c in closing), return_exceptions=True):
            if isinstance(failure, Exception):
                logger.error("draining: a socket did not close cleanly", exc_info=failure)
        logger.info("drained: %d socket(s) closed", len(closing))

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every running turn, wait for them up to ``timeout`` seconds, then cancel the
        hub's tasks and stop the delivery."""
        for runner in self.runners():
            runner.cancel()
        await self.wait_idle(timeout)
        self.idle_trim = None  # nothing more to schedule: the worker stops
        if self._trim_task is not None:
            self._trim_task.cancel()
            await asyncio.gather(self._trim_task, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await mcp_tools.close()  # this loop's MCP sessions (a stdio child ends with its session)
        await self.delivery.stop()
        metrics.forget_process()

    # ------------------------------------------------------------------ memory
    def trim_soon(self) -> None:
        """Memory was freed (a turn ended, a socket closed): unless a trim is pending, return
        free memory once no turn has run for ``idle_trim`` seconds."""
        if self.idle_trim is None or (self._trim_task is not None and not self._trim_task.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._trim_task = loop.create_task(self._trim_when_idle(self.idle_trim))

    async def _trim_when_idle(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(delay, self._last_trim + TRIM_INTERVAL_SECONDS - loop.time()))
        if self._runners:
            return
        self._last_trim = loop.time()
        try:
            collect_garbage()  # a burst leaves reference cycles (connections, frames): free them first
            await asyncio.to_thread(release_free_memory)
        except Exception:
            logger.exception("returning free memory failed")
