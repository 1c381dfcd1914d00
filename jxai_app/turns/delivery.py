"""How frames reach sockets, chosen once per worker (docs/turns.md "Delivery").

- :class:`LocalDelivery` (no channel layer other processes share: the embedded default):
  every frame is pushed to this process's sockets directly, unbounded and in publish order.
- :class:`LayerDelivery` (``channels_redis``): the same direct push, plus every other worker
  through the channel layer. Each worker has **one** layer channel in one group,
  ``jxai.workers``; what a worker publishes is gathered for ``batch_interval`` (50 ms) and
  sent to the group as one ``jxai.frames`` message, however many turns and sockets it holds
  (the layer is never sent one message per delta), or as several when the batch is larger
  than :data:`LAYER_MESSAGE_BYTES`: an entry larger than that alone (a long answer's
  ``message_saved``) travels as ``piece`` entries, slices of its JSON text, which the
  receiving worker joins before routing it (docs/turns.md "Delivery"). A control reply over
  that size (a replay of a long running turn) travels in pieces the same way. A worker hands the frames of other
  workers to its own sockets that follow the conversation (or belong to the user, for list
  notices) and drops its own batch when the group echoes it back: a socket never gets a
  frame twice.

Control between workers (Stop from any tab, replays for a socket that saw a gap) is a
``jxai.control`` message to the group; the worker running the turn answers the asker's
channel with ``jxai.reply``.

**The layer may fail** (Redis restarting, a network cut). Publishing then logs and drops the
layer copy (this worker's sockets still get everything); sockets keep connecting, since none
of them touches the layer. Each worker sends itself a ``jxai.ping`` through the group every
``health_interval``; when its own pings stop coming back the layer counts as down, and when
they come back every socket of the worker resynchronises (a fresh ``snapshot`` of what it
follows), since frames of other workers may have been lost meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any, Awaitable, Callable, Protocol

from jxai_app.core.unicode import replace_unclean_in
from jxai_app.ops import metrics
from jxai_app.turns.framing import MAX_FRAME_BYTES, encode, json_bytes, pieces

__all__ = ["BROADCAST_GROUP", "LAYER_MESSAGE_BYTES", "LayerDelivery", "LocalDelivery", "Socket", "layer_batches",
           "reply_messages"]

logger = logging.getLogger("jxai_app.turns")

BROADCAST_GROUP = "jxai.workers"
"""The channel-layer group every worker's channel is in."""
FRAMES, CONTROL, REPLY, PING = "jxai.frames", "jxai.control", "jxai.reply", "jxai.ping"
"""Layer message types: frame batches, control requests, their replies, health pings."""
MAX_OUTBOX = 20_000
"""Frames kept for other workers while the layer does not take them (a hung connection)."""
LAYER_MESSAGE_BYTES = MAX_FRAME_BYTES
"""The largest ``jxai.frames`` message a worker publishes (its entries measured as JSON,
UTF-8): Redis disconnects a pub/sub subscriber whose unread output passes 32 MB (8 MB for a
minute) by default, so one long answer must not become one message."""
_PIECE_OVERHEAD = json_bytes({"piece": "", "index": 10**9, "count": 10**9})


def _pieces_of(value: dict[str, Any], budget: int) -> list[dict[str, Any]]:
    """``value``'s JSON text as ``{"piece": slice, "index": i, "count": n}`` dicts (i from 0),
    each at most ``budget`` bytes as JSON; :meth:`LayerDelivery._assemble` joins them."""
    slices = pieces(encode(value), budget - _PIECE_OVERHEAD)
    return [{"piece": part, "index": i, "count": len(slices)} for i, part in enumerate(slices)]


def layer_batches(entries: list[dict[str, Any]], limit: int = LAYER_MESSAGE_BYTES) -> list[list[dict[str, Any]]]:
    """``entries`` (``{conversationId, [user], frame}``) in order, grouped into the entry lists
    of consecutive ``jxai.frames`` messages of at most ``limit`` bytes each; an entry over
    ``limit`` alone is replaced by its pieces (``_pieces_of``). An entry that is not
    JSON-serialisable is logged and left out (the local sockets' sessions report it)."""
    batches: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    used = 0
    for entry in entries:
        try:
            size = json_bytes(entry)
        except (TypeError, ValueError):  # a bug's frame must not stop the worker's batches
            logger.exception("channel layer: dropping a %s frame that is not JSON", entry["frame"].get("type"))
            continue
        parts = [(entry, size)] if size <= limit else [(piece, limit) for piece in _pieces_of(entry, limit)]
        for part, part_size in parts:
            if current and used + part_size > limit:
                batches.append(current)
                current, used = [], 0
            current.append(part)
            used += part_size
    if current:
        batches.append(current)
    return batches


def reply_messages(reply: dict[str, Any], limit: int = LAYER_MESSAGE_BYTES) -> list[dict[str, Any]]:
    """A ``jxai.reply`` message (``type``, ``request`` and the answer's members) as the layer
    messages that carry it: itself within ``limit`` bytes, else its pieces, each a
    ``jxai.reply`` of the same ``request`` (a replay of a long running turn)."""
    if json_bytes(reply) <= limit:
        return [reply]
    head = {"type": REPLY, "request": reply.get("request")}
    return [{**head, **piece} for piece in _pieces_of(reply, limit - json_bytes(head))]


class Socket(Protocol):
    """A socket's receiving end (:class:`jxai_app.turns.session.Session`)."""

    def deliver(self, frame: dict[str, Any]) -> None:
        """Take one protocol frame; must not block and must not drop it."""

    def refresh(self) -> None:
        """Frames may have been lost: send a fresh snapshot of what the socket follows."""


Control = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]
"""Answers a control request for a turn of this worker (``None``: not ours, stay silent)."""


class LocalDelivery:
    """This process's sockets: who follows which conversation, and each user's sockets."""

    remote = False
    """True when frames also reach other workers."""
    up = True
    """True while frames reach every socket they should (in-process: always; ``/readyz``)."""

    def __init__(self) -> None:
        self._followers: dict[uuid.UUID, set[Socket]] = {}
        self._users: dict[Any, set[Socket]] = {}

    async def start(self, control: Control) -> None:
        """Begin delivering (nothing to do without a layer)."""

    async def stop(self) -> None:
        """Stop delivering (nothing to do without a layer)."""

    async def flush(self) -> None:
        """Send what is gathered for other workers now (nothing without a layer)."""

    def follow(self, conversation_id: uuid.UUID, socket: Socket) -> None:
        """``socket`` gets the conversation's frames from now on."""
        self._followers.setdefault(conversation_id, set()).add(socket)

    def unfollow(self, conversation_id: uuid.UUID, socket: Socket) -> None:
        """No more frames of the conversation for ``socket``."""
        group = self._followers.get(conversation_id)
        if group is not None:
            group.discard(socket)
            if not group:
                del self._followers[conversation_id]

    def follower_count(self, conversation_id: uuid.UUID) -> int:
        """Sockets of this process following the conversation."""
        return len(self._followers.get(conversation_id, ()))

    def join_user(self, user_pk: Any, socket: Socket) -> None:
        """``socket`` of ``user_pk`` gets the user's list notices."""
        self._users.setdefault(user_pk, set()).add(socket)

    def leave_user(self, user_pk: Any, socket: Socket) -> None:
        """``socket`` closed: no more list notices for it."""
        sockets = self._users.get(user_pk)
        if sockets is not None:
            sockets.discard(socket)
            if not sockets:
                del self._users[user_pk]

    def user_socket_count(self, user_pk: Any) -> int:
        """Sockets of ``user_pk`` open in this process (``JXAI_MAX_SOCKETS_PER_USER`` counts them)."""
        return len(self._users.get(user_pk, ()))

    def sockets(self) -> list[Socket]:
        """Every socket of this process."""
        return list({s for group in self._users.values() for s in group})

    def publish(self, conversation_id: uuid.UUID, frame: dict[str, Any]) -> None:
        """``frame`` to every socket following the conversation, in call order."""
        self._push(conversation_id, frame)

    def publish_user(self, user_pk: Any, conversation_id: uuid.UUID, frame: dict[str, Any]) -> None:
        """A list notice to the user's sockets that do not follow the conversation (those
        get it on the conversation's own path)."""
        self._push_user(user_pk, conversation_id, frame)

    def _push(self, conversation_id: uuid.UUID, frame: dict[str, Any]) -> None:
        for socket in list(self._followers.get(conversation_id, ())):
            socket.deliver(frame)

    def _push_user(self, user_pk: Any, conversation_id: uuid.UUID, frame: dict[str, Any]) -> None:
        followers = self._followers.get(conversation_id, set())
        for socket in list(self._users.get(user_pk, ())):
            if socket not in followers:
                socket.deliver(frame)

    async def ask(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """A control request to the other workers; ``None``: there are none here."""
        return None


class LayerDelivery(LocalDelivery):
    """:class:`LocalDelivery` plus the other workers, through the channel layer (module
    docstring).

    Args:
        layer: the channel layer.
        worker_id: this worker's id; its messages carry it as ``origin``.
        batch_interval: seconds frames are gathered before one layer message.
        reply_timeout: seconds to wait for another worker's answer.
        health_interval: seconds between health pings; the layer is down after three missed.
    """

    remote = True

    def __init__(self, layer: Any, *, worker_id: str, batch_interval: float = 0.05, reply_timeout: float = 1.0,
                 health_interval: float = 1.0) -> None:
        super().__init__()
        self.layer, self.worker_id = layer, worker_id
        self.batch_interval, self.reply_timeout, self.health_interval = batch_interval, reply_timeout, health_interval
        self.channel: str | None = None
        self.up = False
        """True while this worker's own pings come back through the layer."""
        self._outbox: list[dict[str, Any]] = []
        self._ready = asyncio.Event()
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._control: Control | None = None
        self._last_ping = 0.0
        self._was_up = False
        self._joined = asyncio.Event()
        self._pieces: dict[str, list[str]] = {}
        """Per origin worker: the slices of an entry received so far (``layer_batches``)."""
        self._sending = asyncio.Lock()
        """One batch at a time: the pieces of an entry, and batches, reach the layer in order."""

    async def start(self, control: Control) -> None:
        """Join the group (retried in the background while the layer is down) and start
        receiving, batching and pinging."""
        self._control = control
        self._tasks = [asyncio.ensure_future(coro) for coro in (self._receive(), self._forward(), self._watch())]

    async def stop(self) -> None:
        """Send what is gathered, stop the tasks and leave the group (errors logged)."""
        await self.flush()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.channel is not None:
            try:
                await self.layer.group_discard(BROADCAST_GROUP, self.channel)
            except Exception:
                logger.exception("channel layer: cannot leave %s", BROADCAST_GROUP)

    # ------------------------------------------------------------------ publishing
    def publish(self, conversation_id: uuid.UUID, frame: dict[str, Any]) -> None:
        """``frame`` to this process's followers now, and to the other workers' in the next batch."""
        self._push(conversation_id, frame)
        self._queue({"conversationId": str(conversation_id), "frame": frame})

    def publish_user(self, user_pk: Any, conversation_id: uuid.UUID, frame: dict[str, Any]) -> None:
        """A list notice for the user's sockets here and on the other workers."""
        self._push_user(user_pk, conversation_id, frame)
        self._queue({"conversationId": str(conversation_id), "user": user_pk, "frame": frame})

    def _queue(self, entry: dict[str, Any]) -> None:
        if len(self._outbox) >= MAX_OUTBOX:  # the layer hangs: keep memory bounded; followers elsewhere
            del self._outbox[: MAX_OUTBOX // 2]  # see a gap and fill it from the replay log
            logger.warning("channel layer: %d frames for other workers dropped (the layer is not taking them)",
                           MAX_OUTBOX // 2)
        self._outbox.append(entry)
        self._ready.set()

    async def _forward(self) -> None:
        while True:
            await self._ready.wait()
            await asyncio.sleep(self.batch_interval)
            self._ready.clear()
            await self._send_outbox()

    async def flush(self) -> None:
        """Send what is gathered now (the turn ended, the worker stops, a command publishes)."""
        await self._send_outbox()

    async def _send_outbox(self) -> None:
        async with self._sending:
            entries, self._outbox = self._outbox, []
            for batch in layer_batches(entries):
                if not await self._group_send({"type": FRAMES, "entries": batch}):
                    return

    async def _group_send(self, message: dict[str, Any]) -> bool:
        try:
            try:
                await self.layer.group_send(BROADCAST_GROUP, {**message, "origin": self.worker_id})
            except UnicodeEncodeError:  # a lone surrogate of model output: the layer encodes UTF-8 strictly
                await self.layer.group_send(BROADCAST_GROUP, {**replace_unclean_in(message), "origin": self.worker_id})
            return True
        except Exception as exc:
            metrics.LAYER_PUBLISH_FAILURES.inc()
            if self.up:
                logger.warning("channel layer: cannot publish (%s); other workers miss this worker's frames "
                               "until it is back", exc)
            self.up = False
            return False

    # ------------------------------------------------------------------ receiving
    async def _join(self) -> str:
        delay = 0.2
        while True:
            try:
                channel = self.channel or await self.layer.new_channel()
                self.channel = channel
                await self.layer.group_add(BROADCAST_GROUP, channel)
                self._joined.set()
                return channel
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("channel layer: cannot join %s (%s); retrying in %.1f s", BROADCAST_GROUP, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _receive(self) -> None:
        channel = await self._join()
        while True:
            try:
                message = await self.layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("channel layer: receive failed; retrying")
                await asyncio.sleep(0.5)
                continue
            try:
                await self._handle(message)
            except Exception:  # one malformed message must not end the receiver
                logger.exception("channel layer: dropping a message that cannot be handled: %.200r", message)

    async def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        mine = message.get("origin") == self.worker_id
        if kind == PING:
            if mine:
                self._pinged()
        elif kind == FRAMES and not mine:
            origin = str(message.get("origin"))
            for entry in message.get("entries") or []:
                if "piece" in entry:
                    joined = self._assemble(origin, entry)
                    if joined is None:
                        continue
                    entry = joined
                cid = uuid.UUID(str(entry["conversationId"]))
                if "user" in entry:
                    self._push_user(entry["user"], cid, entry["frame"])
                else:
                    self._push(cid, entry["frame"])
        elif kind == REPLY:
            request = str(message.get("request"))
            if "piece" in message:
                joined = self._assemble(f"reply:{request}", message)
                if joined is None:
                    return
                message = joined
            future = self._pending.get(request)
            if future is not None and not future.done():
                future.set_result(message)
        elif kind == CONTROL and not mine and self._control is not None:
            answer = await self._control(message)
            if answer is not None and isinstance(message.get("reply_to"), str):
                try:
                    for part in reply_messages({**answer, "type": REPLY, "request": message.get("request")}):
                        await self.layer.send(message["reply_to"], part)
                except Exception:
                    logger.exception("channel layer: cannot answer a %s request", message.get("op"))

    def _assemble(self, key: str, piece: dict[str, Any]) -> dict[str, Any] | None:
        """Add one piece (``_pieces_of``) of what ``key`` sends (an origin worker's entries, or
        ``reply:<request>``); the whole value once its last piece came, else ``None``. A piece
        out of order (a lost message) drops the partial value: the sockets' sequencers refill
        lost events, a lost ``message_saved`` is in the next snapshot, a lost reply is a
        request nobody answered."""
        parts = self._pieces.setdefault(key, [])
        if piece["index"] == 0:
            parts.clear()
        if piece["index"] != len(parts):
            logger.warning("channel layer: piece %s of %s from %s arrived after %d; dropping it",
                           piece["index"], piece["count"], key, len(parts))
            del self._pieces[key]
            return None
        parts.append(piece["piece"])
        if len(parts) < piece["count"]:
            return None
        del self._pieces[key]
        value: dict[str, Any] = json.loads("".join(parts))
        return value

    # ------------------------------------------------------------------ health
    def _pinged(self) -> None:
        self._last_ping = asyncio.get_running_loop().time()
        if not self.up:
            self.up = True
            if self._was_up:  # back after an outage: frames of other workers may be lost
                logger.info("channel layer: reachable again; this worker's sockets resynchronise")
                for socket in self.sockets():
                    socket.refresh()
            self._was_up = True

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        await self._joined.wait()
        self._pinged()
        while True:
            await self._group_send({"type": PING})
            await asyncio.sleep(self.health_interval)
            if self.up and loop.time() - self._last_ping > 3 * self.health_interval:
                logger.warning("channel layer: this worker's pings stopped coming back; it counts as down")
                self.up = False

    # ------------------------------------------------------------------ control
    async def ask(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Send a control request to every other worker and wait up to ``reply_timeout``
        for the answer of the one running the turn; ``None`` when none answered (no runner
        alive, or the layer down)."""
        if not self._joined.is_set():
            return None
        request = uuid.uuid4().hex
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request] = future

        async def asked() -> dict[str, Any] | None:
            if not await self._group_send({**message, "type": CONTROL, "request": request, "reply_to": self.channel}):
                return None
            return await future

        try:  # the whole exchange within the timeout: a layer that hangs (a network cut) too
            return await asyncio.wait_for(asked(), self.reply_timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self._pending.pop(request, None)
            self._pieces.pop(f"reply:{request}", None)
