"""The worker's turn hub: live runners, local followers, and the channel-layer plumbing.

One :class:`TurnHub` per worker process (per event loop: :func:`get_hub`). It holds

- the **runners** of the turns running in this process, with strong references to their
  tasks (a task's failure is logged by the runner and ends its turn as an error);
- the **followers**: sockets of this process following a conversation (they get frames
  pushed directly, unbounded and lossless, in publish order) and each user's sockets
  (conversation-list notices);
- a **reply channel** on the channel layer, where runners on other workers answer cancel
  and replay requests (``jxai.reply``).

Frames cross workers through the layer group of the conversation (``jxai.frames`` with
this hub's ``worker_id`` as ``origin``; a socket ignores frames of its own origin, which it
already got directly). See :mod:`jxai_app.turns.names` for every name and message.

With Channels' in-memory layer (the embedded default) no other process can share the
layer, so by default the hub sends nothing through it (``fanout`` off): everything is
delivered directly. That saves a deep copy per message and follower, and avoids the
in-memory layer's habit of dropping a channel from all its groups once one of its
messages expires. Tests that play two workers in one process turn ``fanout`` on.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from channels.layers import InMemoryChannelLayer, get_channel_layer

from jxai_app.ops.memory import (
    IDLE_TRIM_SECONDS, TRIM_INTERVAL_SECONDS, collect_garbage, release_free_memory, trim_available,
)
from jxai_app.turns import names
from jxai_app.turns.starts import StartingTurns

if TYPE_CHECKING:
    from jxai_app.turns.runner import TurnRunner

__all__ = ["Follower", "TurnHub", "TurnState", "get_hub", "receive_each"]

logger = logging.getLogger("jxai_app.turns")

REPLY_TIMEOUT_SECONDS = 1.0
"""How long to wait for a runner on another worker to answer a cancel or replay request."""


async def receive_each(layer: Any, channel: str, handle: Callable[[dict[str, Any]], Awaitable[None] | None],
                       failure: str) -> None:
    """Hand every message of a layer channel to ``handle`` (awaited when it returns an
    awaitable) until cancelled; a failing receive is logged with ``failure`` and retried
    after 0.5 s (a layer that is down for a while must not end the listener)."""
    while True:
        try:
            message = await layer.receive(channel)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception(failure)
            await asyncio.sleep(0.5)
            continue
        result = handle(message)
        if result is not None:
            await result


class Follower(Protocol):
    """A socket's receiving end (``jxai_app.turns.session.Session``)."""

    def deliver(self, frame: dict[str, Any]) -> None:
        """Take one protocol frame; must not block and must not drop it."""


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


class TurnHub:
    """Registry and plumbing of one worker (see module docstring).

    Args:
        layer_alias: the channel layer to use (``CHANNEL_LAYERS`` key).
        worker_id: a unique id for this hub (default: random); frames carry it as ``origin``.
        batch_interval: seconds a runner gathers frames before one layer message.
        reply_timeout: seconds to wait for a runner elsewhere to answer.
        fanout: send frames and control messages through the layer; ``None``: only when
            the layer can reach other processes (not Channels' in-memory layer).
        idle_trim: seconds without a running turn before free memory is returned to the
            system (:func:`jxai_app.ops.memory.release_free_memory`); ``None``: never.
    """

    def __init__(self, *, layer_alias: str = "default", worker_id: str | None = None,
                 batch_interval: float = 0.05, reply_timeout: float = REPLY_TIMEOUT_SECONDS,
                 fanout: bool | None = None, idle_trim: float | None = IDLE_TRIM_SECONDS) -> None:
        self.layer_alias = layer_alias
        if fanout is None:
            layer = get_channel_layer(layer_alias)
            fanout = layer is not None and not isinstance(layer, InMemoryChannelLayer)
        self.fanout = fanout
        """True when frames and control messages go through the channel layer."""
        self.worker_id = worker_id or uuid.uuid4().hex
        self.batch_interval = batch_interval
        self.reply_timeout = reply_timeout
        self._runners: dict[uuid.UUID, TurnRunner] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._followers: dict[uuid.UUID, set[Follower]] = {}
        self._user_sockets: dict[Any, set[Follower]] = {}
        self._reply_channel: str | None = None
        self._reply_task: asyncio.Task[None] | None = None
        self._reply_lock = asyncio.Lock()
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.idle_trim = idle_trim if trim_available() else None
        """Seconds without a running turn before the worker's free memory is returned
        (:mod:`jxai_app.ops.memory`); ``None``: never."""
        self._trim_task: asyncio.Task[None] | None = None
        self._last_trim = float("-inf")
        self.starting = StartingTurns()
        """Turns of this worker waiting for their first output (:mod:`jxai_app.turns.starts`)."""

    @property
    def layer(self) -> Any:
        """The channel layer, or ``None`` when none is configured or ``fanout`` is off."""
        return get_channel_layer(self.layer_alias) if self.fanout else None

    # ------------------------------------------------------------------ runners and tasks
    def runner(self, conversation_id: uuid.UUID) -> TurnRunner | None:
        """The turn running in this process for the conversation, or ``None``."""
        return self._runners.get(conversation_id)

    def runners(self) -> list[TurnRunner]:
        """Every runner of this process."""
        return list(self._runners.values())

    def register(self, runner: TurnRunner) -> None:
        """Make ``runner`` the conversation's live runner here (replacing one winding down)."""
        self._runners[runner.conversation_id] = runner

    def unregister(self, runner: TurnRunner) -> None:
        """Forget ``runner`` (only if it is still the registered one). The last one to go
        schedules the return of free memory (:mod:`jxai_app.ops.memory`)."""
        if self._runners.get(runner.conversation_id) is runner:
            del self._runners[runner.conversation_id]
        self._trim_soon()

    def _trim_soon(self) -> None:
        """Memory was freed (a turn ended, a socket closed): unless a trim is already
        pending, return free memory once no turn has run for ``idle_trim`` seconds."""
        if self.idle_trim is None or (self._trim_task is not None and not self._trim_task.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside the worker's loop: nothing to schedule on
            return
        self._trim_task = loop.create_task(self._trim_when_idle(self.idle_trim))

    async def _trim_when_idle(self, delay: float) -> None:
        """After ``delay`` seconds (and at least :data:`~jxai_app.ops.memory.TRIM_INTERVAL_SECONDS`
        after the last time), with no turn running here, collect garbage and return free
        memory (the trim in a thread: it walks the heap). Not one of the hub's tasks:
        ``wait_idle`` ignores it."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(delay, self._last_trim + TRIM_INTERVAL_SECONDS - loop.time()))
        if self._runners:  # a turn runs: its end schedules the next attempt
            return
        self._last_trim = loop.time()
        try:
            collect_garbage()  # a burst leaves reference cycles (connections, frames): free them first
            await asyncio.to_thread(release_free_memory)
        except Exception:
            logger.exception("returning free memory failed")

    def spawn(self, coro: Awaitable[Any], *, name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the hub keeps a strong reference to until it ends."""
        task = asyncio.ensure_future(coro)
        if name:
            task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until every task of the hub ended; True when they did within ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._tasks or self._runners:
            if loop.time() >= deadline:
                return False
            pending = [t for t in self._tasks if t is not self._reply_task]
            if not pending and not self._runners:
                break
            if pending:
                await asyncio.wait(pending, timeout=max(0.0, deadline - loop.time()))
            else:
                await asyncio.sleep(0.01)
        return True

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every running turn (each ends ``cancelled``, its partial message dropped),
        wait for them up to ``timeout`` seconds, then cancel what is left and the reply task."""
        for runner in self.runners():
            runner.cancel()
        await self.wait_idle(timeout)
        if self._trim_task is not None:
            self._trim_task.cancel()
            await asyncio.gather(self._trim_task, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)

    # ------------------------------------------------------------------ local followers
    def follow(self, conversation_id: uuid.UUID, follower: Follower) -> None:
        """``follower`` gets the conversation's frames published in this process from now on."""
        self._followers.setdefault(conversation_id, set()).add(follower)

    def unfollow(self, conversation_id: uuid.UUID, follower: Follower, *, closing: bool = False) -> None:
        """Stop pushing the conversation's frames to ``follower``.

        ``closing``: the socket closed; the local runner then checks whether its last
        follower left (``JXAI_CANCEL_ON_DISCONNECT``).
        """
        group = self._followers.get(conversation_id)
        if group is not None:
            group.discard(follower)
            if not group:
                del self._followers[conversation_id]
        runner = self._runners.get(conversation_id)
        if closing and runner is not None:
            runner.follower_left()

    def follower_count(self, conversation_id: uuid.UUID) -> int:
        """Sockets of this process following the conversation."""
        return len(self._followers.get(conversation_id, ()))

    def join_user(self, user_pk: Any, follower: Follower) -> None:
        """Register a socket of ``user_pk`` for conversation-list notices."""
        self._user_sockets.setdefault(user_pk, set()).add(follower)

    def leave_user(self, user_pk: Any, follower: Follower) -> None:
        """A socket of ``user_pk`` closed: no more list notices for it."""
        sockets = self._user_sockets.get(user_pk)
        if sockets is not None:
            sockets.discard(follower)
            if not sockets:
                del self._user_sockets[user_pk]
        self._trim_soon()

    def push_local(self, conversation_id: uuid.UUID, frame: dict[str, Any]) -> None:
        """Deliver ``frame`` to this process's followers of the conversation, in call order."""
        for follower in list(self._followers.get(conversation_id, ())):
            follower.deliver(frame)

    # ------------------------------------------------------------------ layer
    async def group_frames(self, group: str, conversation_id: uuid.UUID, frames: list[dict[str, Any]],
                           *, scope: str = "conv") -> None:
        """Send frames to a layer group as one ``jxai.frames`` message (errors logged)."""
        layer = self.layer
        if layer is None or not frames:
            return
        try:
            await layer.group_send(group, {"type": names.FRAMES, "origin": self.worker_id, "scope": scope,
                                           "conversationId": str(conversation_id), "frames": frames})
        except Exception:
            logger.exception("channel layer: group_send to %s failed", group)

    async def notify(self, conversation_id: uuid.UUID, frame: dict[str, Any], *, user_pk: Any = None) -> None:
        """Publish a notice now (not a turn event): local followers (and the user's sockets),
        then the conversation's group (and the user's group) on the layer."""
        self.push_local(conversation_id, frame)
        await self.group_frames(names.conversation_group(conversation_id), conversation_id, [frame])
        await self.notify_user(conversation_id, frame, user_pk=user_pk)

    async def notify_user(self, conversation_id: uuid.UUID, frame: dict[str, Any], *, user_pk: Any) -> None:
        """A list notice for the user's sockets that do not follow the conversation (those
        get it on the conversation's own path): here directly, elsewhere through the layer."""
        if user_pk is None:
            return
        followers = self._followers.get(conversation_id, ())
        for follower in list(self._user_sockets.get(user_pk, ())):
            if follower not in followers:
                follower.deliver(frame)
        await self.group_frames(names.user_group(user_pk), conversation_id, [frame], scope="user")

    async def _ensure_reply_channel(self) -> str | None:
        layer = self.layer
        if layer is None:
            return None
        async with self._reply_lock:
            if self._reply_channel is None:
                self._reply_channel = await layer.new_channel()
                self._reply_task = self.spawn(self._receive_replies(self._reply_channel), name="jxai-hub-replies")
        return self._reply_channel

    async def _receive_replies(self, channel: str) -> None:
        def answer(message: dict[str, Any]) -> None:
            future = self._pending.get(str(message.get("request")))
            if future is not None and not future.done():
                future.set_result(message)

        await receive_each(self.layer, channel, answer, "channel layer: receiving replies failed")

    async def ask_runner(self, conversation_id: uuid.UUID, message: dict[str, Any]) -> dict[str, Any] | None:
        """Send a control message to whatever runner runs the conversation's turn (on any
        worker) and wait for its answer up to ``reply_timeout`` seconds; ``None`` when none
        answered (no runner alive, no channel layer, or the layer failing: logged)."""
        try:
            channel = await self._ensure_reply_channel()
        except Exception:
            logger.exception("channel layer: cannot open the reply channel")
            return None
        if channel is None:
            return None
        request = uuid.uuid4().hex
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request] = future
        try:
            await self.layer.group_send(names.control_group(conversation_id),
                                        {**message, "request": request, "reply_to": channel})
            return await asyncio.wait_for(future, self.reply_timeout)
        except asyncio.TimeoutError:
            return None
        except Exception:
            logger.exception("channel layer: control request to %s failed", conversation_id)
            return None
        finally:
            self._pending.pop(request, None)

    async def tell_runner(self, conversation_id: uuid.UUID, message: dict[str, Any]) -> None:
        """Send a control message to the conversation's runner without waiting (errors logged)."""
        layer = self.layer
        if layer is None:
            return
        try:
            await layer.group_send(names.control_group(conversation_id), message)
        except Exception:
            logger.exception("channel layer: control message to %s failed", conversation_id)

    async def turn_state(self, conversation_id: uuid.UUID, *, after_seq: int = 0,
                         follower: Follower | None = None) -> TurnState | None:
        """The running turn's events after ``after_seq``: from the local runner at once
        (and, atomically with reading it, ``follower`` starts following), else by asking
        the runner on another worker; ``None`` when no runner answered."""
        if follower is not None:
            self.follow(conversation_id, follower)
        runner = self._runners.get(conversation_id)
        if runner is not None:
            return runner.state(after_seq)
        answer = await self.ask_runner(conversation_id, {"type": names.REPLAY, "afterSeq": after_seq})
        return None if answer is None else TurnState.from_message(answer)


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TurnHub] = weakref.WeakKeyDictionary()


def get_hub() -> TurnHub:
    """The hub of the running event loop (one per worker process; tests get one per loop).

    Raises:
        RuntimeError: called outside a running event loop.
    """
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = TurnHub()
        _install_shutdown(hub)
    return hub


def _install_shutdown(hub: TurnHub) -> None:
    """Under daphne (Twisted's asyncio reactor), stop the hub's turns before the reactor
    stops, so their partial messages are dropped and conversations return to idle."""
    try:
        from twisted.internet import reactor  # type: ignore[import-untyped]
        from twisted.internet.defer import Deferred  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - daphne depends on twisted
        return
    if not getattr(reactor, "running", False):
        return

    def before_shutdown() -> Any:
        return Deferred.fromFuture(asyncio.ensure_future(hub.shutdown()))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
