"""One socket's side of the protocol: what it follows and the order of what it sends.

A :class:`Session` belongs to one websocket consumer. Everything the socket sends goes
through the session's queue and its one task, in order:

- frames pushed by this worker's hub (unbounded, lossless, in publish order);
- frames from other workers (``jxai.frames`` through the layer; frames of this worker's
  own origin are dropped by the consumer, since they arrived directly);
- the answers to the client's requests (``snapshot``, ``replay``, ``conversations`` …),
  run as jobs one at a time, so a snapshot and the live events after it never cross.

The **sequencer** guarantees each socket gets every event of a turn once and in order:
``seq <= lastSeq`` is dropped (a copy), ``seq > lastSeq + 1`` is a gap (a layer message was
lost) and is filled from the runner's replay log (here or on another worker) before the
live events go on; a turn first seen after its seq 1 (the socket joined late) triggers a
fresh snapshot. When no runner answers (its worker died) the database is the fallback.
Consecutive events of one turn waiting in the queue go out as one ``events`` frame.

Snapshot rule: when a turn runs, ``messages`` ends with the turn's user message and the
turn's own rounds (even completed ones) are given only as ``turn.items``; without a
running turn ``messages`` is the whole saved transcript.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from datetime import datetime
from typing import Any, Awaitable, Callable

from channels.db import database_sync_to_async
from django.db.models import Q

from jxai_app import conf, store
from jxai_app.core.errors import ProblemError
from jxai_app.models import ConversationStatus
from jxai_app.core.problems import problem, problem_error
from jxai_app.store.serializers import conversation_dict, conversation_dicts, message_dicts
from jxai_app.store.common import get_owned
from jxai_app.turns import control, names
from jxai_app.turns.hub import TurnHub

__all__ = ["Session"]

logger = logging.getLogger("jxai_app.turns")

Send = Callable[[dict[str, Any]], Awaitable[None]]
GroupChange = Callable[[str], Awaitable[None]]

_KNOWN_TURNS = 8
"""Turns whose last seq a session remembers (the current one and a few before)."""
_ENDED = 1 << 62
"""Last seq recorded for a turn that must be ignored from now on."""
_SNAPSHOT_ATTEMPTS = 3


def _owned(user: Any, conversation_id: Any) -> uuid.UUID:
    return get_owned(user, conversation_id).pk


def _load(user: Any, conversation_id: uuid.UUID) -> tuple[dict[str, Any], list[dict[str, Any]], str | None]:
    """The conversation, its messages, and the id of its running turn (``None``: idle)."""
    conversation, messages = store.message_list(user=user, conversation_id=conversation_id)
    running = conversation.turn_id if conversation.status == ConversationStatus.STREAMING else None
    return conversation_dict(conversation), message_dicts(messages), None if running is None else str(running)


def _cursor(before: str) -> tuple[datetime, uuid.UUID]:
    """Read a ``next`` cursor (``<updatedAt ISO>|<id>``) back.

    Raises:
        ProblemError: ``invalid-request`` when it is not one.
    """
    try:
        at, pk = before.split("|")
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError("naive")
        return parsed, uuid.UUID(pk)
    except ValueError:
        raise problem_error("invalid-request", "'list': 'before' must be the 'next' cursor of a previous "
                                               "'conversations' frame.") from None


def _page(user: Any, before: str | None = None) -> dict[str, Any]:
    """A ``conversations`` frame: one page (``JXAI_CONVERSATIONS_PAGE_SIZE``) of the user's
    conversations, most recently updated first, after the cursor ``before``; ``next`` (the
    cursor of the following page) only when there is one."""
    size = max(1, conf.get_limits().conversations_page_size)
    rows = store.conversation_list(user=user).order_by("-updated_at", "-pk")
    if before is not None:
        at, pk = _cursor(before)
        rows = rows.filter(Q(updated_at__lt=at) | Q(updated_at=at, pk__lt=pk))
    page = list(rows[: size + 1])
    frame: dict[str, Any] = {"type": "conversations", "items": conversation_dicts(page[:size])}
    if len(page) > size:
        last = page[size - 1]
        frame["next"] = f"{last.updated_at.isoformat()}|{last.pk}"
    return frame


def error_frame(doc: dict[str, Any], *, request: str | None = None,
                conversation_id: str | None = None) -> dict[str, Any]:
    """An ``error`` frame for a refused request: ``{type, message, code, problem[, conversationId][, request]}``."""
    slug = str(doc.get("type", "")).rstrip("/").rsplit("/", 1)[-1]
    frame: dict[str, Any] = {"type": "error", "message": doc.get("detail") or doc.get("title") or "error",
                             "code": slug, "problem": doc}
    if conversation_id is not None:
        frame["conversationId"] = conversation_id
    if request is not None:
        frame["request"] = request
    return frame


class Session:
    """One socket's queue, sequencer and request handlers (see the module docstring).

    Args:
        hub: the worker's hub.
        user: the socket's authenticated user.
        send: sends one frame on the socket.
        join_group, leave_group: add/remove the socket's layer channel to/from a group.
    """

    def __init__(self, *, hub: TurnHub, user: Any, send: Send, join_group: GroupChange,
                 leave_group: GroupChange) -> None:
        self.hub = hub
        self.user = user
        self.id = uuid.uuid4().hex
        self.following: uuid.UUID | None = None
        self._send = send
        self._join = join_group
        self._leave = leave_group
        self._group: str | None = None
        self._seqs: OrderedDict[str, int] = OrderedDict()
        self._recovering: set[str] = set()
        self._resnapshot = False
        self._announced: set[uuid.UUID] = set()
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._out: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self._group_lock = asyncio.Lock()
        self._group_syncs: set[asyncio.Task[None]] = set()
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the session's task and register for the user's list notices."""
        self.hub.join_user(self.user.pk, self)
        self._task = asyncio.ensure_future(self._loop())

    async def close(self) -> None:
        """The socket closed: send nothing more, stop the task, stop following (a running
        turn goes on unless ``JXAI_CANCEL_ON_DISCONNECT`` and this was its last follower).

        The hub forgets the session before anything is awaited, so an interrupted close
        never leaves it registered (nor frames piling up in its queue)."""
        if self._closed:
            return
        self._closed = True
        self.hub.leave_user(self.user.pk, self)
        following, self.following = self.following, None
        if following is not None:
            self.hub.unfollow(following, self, closing=True)
        while not self._queue.empty():
            self._queue.get_nowait()
        for task in (self._task, *self._group_syncs):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._group is not None:
            group, self._group = self._group, None
            await self._leave(group)
        if following is not None and following in self._announced:
            await self.hub.tell_runner(following, {"type": names.UNFOLLOW, "follower": self.id, "closing": True})

    # ------------------------------------------------------------------ input
    def deliver(self, frame: dict[str, Any]) -> None:
        """A frame from this worker (hub push). Never blocks, never drops."""
        if not self._closed:
            self._queue.put_nowait(("local", frame))

    def deliver_remote(self, frames: list[dict[str, Any]], *, scope: str) -> None:
        """Frames from another worker (``scope`` ``conv`` or ``user``)."""
        if not self._closed:
            kind = "user" if scope == "user" else "remote"
            for frame in frames:
                self._queue.put_nowait((kind, frame))

    def submit(self, request: str | None, conversation_id: str | None,
               job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job`` in the session's task after what is queued; a ``ProblemError`` it
        raises becomes an ``error`` frame answering ``request``."""
        if not self._closed:
            self._queue.put_nowait(("job", (request, conversation_id, job)))

    def refuse(self, doc: dict[str, Any], *, request: str | None = None, conversation_id: str | None = None) -> None:
        """Queue an ``error`` frame (the socket stays open)."""
        self.deliver(error_frame(doc, request=request, conversation_id=conversation_id))

    def adopt(self, conversation_id: uuid.UUID, turn_id: str) -> None:
        """Follow ``conversation_id`` at once, expecting ``turn_id`` from seq 1 (called by
        ``start_turn`` before the turn's task starts, so nothing is missed)."""
        self._follow_local(conversation_id)
        self._remember(turn_id, 0)
        self._queue.put_nowait(("group", conversation_id))

    # ------------------------------------------------------------------ the task
    async def _loop(self) -> None:
        while True:
            kind, payload = await self._queue.get()
            batch = [(kind, payload)]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            for kind, payload in batch:
                if kind == "job":
                    await self._flush()
                    await self._run_job(*payload)
                elif kind == "group":
                    self._sync_group_soon()
                else:
                    try:
                        self._route(kind, payload)
                    except Exception:  # a malformed frame from the layer must not end the socket
                        logger.exception("dropping a frame that cannot be routed: %.200r", payload)
            await self._flush()

    async def _flush(self) -> None:
        out, self._out = self._out, []
        for frame in out:
            if self._closed:
                return
            await self._send(frame)

    def _emit(self, frame: dict[str, Any]) -> None:
        last = self._out[-1] if self._out else None
        if (last is not None and frame["type"] == "events" == last["type"] and last["turnId"] == frame["turnId"]
                and last["conversationId"] == frame["conversationId"]):
            last["items"].extend(frame["items"])
        elif frame["type"] == "events":
            self._out.append({**frame, "items": list(frame["items"])})
        else:
            self._out.append(frame)

    async def _run_job(self, request: str | None, conversation_id: str | None,
                       job: Callable[[], Awaitable[None]]) -> None:
        try:
            await job()
        except ProblemError as exc:
            self._emit(error_frame(exc.problem, request=request, conversation_id=conversation_id))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("websocket request %s failed", request)
            self._emit(error_frame(problem("internal-error", "The request failed unexpectedly."),
                                   request=request, conversation_id=conversation_id))
        await self._flush()

    # ------------------------------------------------------------------ following
    def _follow_local(self, conversation_id: uuid.UUID) -> None:
        if self.following == conversation_id:
            return
        if self.following is not None:
            self.hub.unfollow(self.following, self)
        self.following = conversation_id
        self.hub.follow(conversation_id, self)

    def _sync_group_soon(self) -> None:
        """:meth:`_sync_group` beside the frames: after a send, the turn runs in this
        process and its frames come directly, so they need not wait for the layer's round
        trip (a Redis ``SUBSCRIBE``); only frames of other workers need the group. It also
        waits for this worker's starting model requests (:meth:`~jxai_app.turns.starts.StartingTurns.after`)."""
        task = asyncio.ensure_future(self._sync_group_later())
        self._group_syncs.add(task)
        task.add_done_callback(self._group_syncs.discard)

    async def _sync_group_later(self) -> None:
        await self.hub.starting.after()
        await self._sync_group()

    async def _sync_group(self) -> None:
        """Make the socket's layer group membership match what it follows (one change at
        a time)."""
        async with self._group_lock:
            wanted = None
            if self.following is not None and self.hub.fanout:
                wanted = names.conversation_group(self.following)
            if wanted == self._group:
                return
            if self._group is not None:
                await self._leave(self._group)
            self._group = wanted
            if wanted is not None:
                await self._join(wanted)

    async def _switch(self, conversation_id: uuid.UUID | None) -> None:
        if conversation_id is None:
            if self.following is not None:
                self.hub.unfollow(self.following, self)
            self.following = None
        else:
            self._follow_local(conversation_id)
        await self._sync_group()

    def _remember(self, turn_id: str, last_seq: int) -> None:
        self._seqs[turn_id] = last_seq
        self._seqs.move_to_end(turn_id)
        while len(self._seqs) > _KNOWN_TURNS:
            self._seqs.popitem(last=False)

    # ------------------------------------------------------------------ routing
    def _route(self, kind: str, frame: dict[str, Any]) -> None:
        ftype = frame.get("type")
        cid = frame.get("conversationId")
        if cid is None and isinstance(frame.get("conversation"), dict):
            cid = frame["conversation"].get("id")
        following = None if self.following is None else str(self.following)
        if ftype in ("conversation", "conversation_deleted"):
            if kind == "user" and cid == following:
                return  # this socket gets it on the conversation's own path
            self._emit(frame)
            if ftype == "conversation_deleted" and cid == following:
                self._queue.put_nowait(("job", (None, None, self._forget)))
            return
        if ftype == "error":
            self._emit(frame)
            return
        if cid != following:
            return
        if ftype == "events":
            self._sequence(kind, frame)
        elif ftype == "snapshot":
            turn = frame.get("turn")
            if isinstance(turn, dict):
                self._remember(str(turn["turnId"]), int(turn["lastSeq"]))
            self._emit(frame)
        else:
            self._emit(frame)

    def _sequence(self, kind: str, frame: dict[str, Any]) -> None:
        turn_id = str(frame["turnId"])
        items = frame.get("items") or []
        if not items:
            return
        last = self._seqs.get(turn_id)
        if last is None:
            if items[0]["seq"] != 1:
                self._remember(turn_id, _ENDED)
                self._want_snapshot()
                return
            last = 0
            if kind == "remote":
                self._announce()
        fresh: list[dict[str, Any]] = []
        for item in items:
            seq = item["seq"]
            if seq <= last:
                continue
            if seq != last + 1:
                self._want_recovery(turn_id)
                break
            fresh.append(item)
            last = seq
        self._remember(turn_id, last)
        if fresh:
            self._emit({**frame, "items": fresh})

    def _want_snapshot(self) -> None:
        if not self._resnapshot and self.following is not None:
            self._resnapshot = True
            cid = self.following
            self._queue.put_nowait(("job", (None, str(cid), lambda: self._snapshot(cid))))

    def _want_recovery(self, turn_id: str) -> None:
        if turn_id in self._recovering or self.following is None:
            return
        self._recovering.add(turn_id)
        cid = self.following
        self._queue.put_nowait(("job", (None, str(cid), lambda: self._recover(cid, turn_id))))

    def _announce(self) -> None:
        """Tell a runner on another worker this socket follows it (only needed for
        ``JXAI_CANCEL_ON_DISCONNECT``)."""
        cid = self.following
        if cid is None or cid in self._announced or not conf.cancel_on_disconnect():
            return
        self._announced.add(cid)

        async def tell() -> None:
            await self.hub.tell_runner(cid, {"type": names.FOLLOW, "follower": self.id})

        self._queue.put_nowait(("job", (None, None, tell)))

    async def _forget(self) -> None:
        await self._switch(None)

    async def _recover(self, conversation_id: uuid.UUID, turn_id: str) -> None:
        """Fill a gap of ``turn_id`` from the runner's log, or take a fresh snapshot."""
        try:
            if self.following != conversation_id:
                return
            after = self._seqs.get(turn_id, 0)
            state = await self.hub.turn_state(conversation_id, after_seq=after)
            if state is None or state.turn_id != turn_id:
                await self._snapshot(conversation_id)
                return
            after = self._seqs.get(turn_id, after)
            fresh = [item for item in state.items if item["seq"] > after]
            if fresh:
                self._emit({"type": "events", "conversationId": str(conversation_id), "turnId": turn_id,
                            "items": fresh})
                self._remember(turn_id, fresh[-1]["seq"])
        finally:
            self._recovering.discard(turn_id)

    # ------------------------------------------------------------------ snapshot
    async def _snapshot(self, conversation_id: uuid.UUID | str) -> None:
        """Follow the conversation and send a ``snapshot`` consistent with the live frames
        that follow it (see the module docstring for the rule).

        Raises:
            ProblemError: ``not-found`` (checked before following anything).
        """
        self._resnapshot = False
        conversation_id = await database_sync_to_async(_owned)(self.user, conversation_id)
        await self._switch(conversation_id)
        frame: dict[str, Any] | None = None
        for attempt in range(_SNAPSHOT_ATTEMPTS):
            data, messages, running = await database_sync_to_async(_load)(self.user, conversation_id)
            frame = {"type": "snapshot", "conversationId": str(conversation_id), "conversation": data,
                     "messages": messages, "turn": None}
            if running is None:
                break
            state = await self.hub.turn_state(conversation_id)
            if state is not None and state.turn_id == running:
                ids = [m["id"] for m in messages]
                if state.user_message_id in ids:
                    frame["messages"] = messages[: ids.index(state.user_message_id) + 1]
                    frame["turn"] = {"turnId": state.turn_id, "lastSeq": state.last_seq, "items": state.items}
                    self._remember(state.turn_id, state.last_seq)
                    break
            if attempt + 1 < _SNAPSHOT_ATTEMPTS:
                await asyncio.sleep(0.05 * (attempt + 1))
        assert frame is not None
        if frame["turn"] is None and frame["conversation"]["status"] != "streaming":
            for turn_id in list(self._seqs):
                self._seqs[turn_id] = _ENDED  # anything still queued of older turns is in the snapshot
        self._emit(frame)

    # ------------------------------------------------------------------ requests
    async def subscribe(self, conversation_id: str) -> None:
        """``subscribe``: follow the conversation; answered with a ``snapshot``."""
        await self._snapshot(conversation_id)

    async def resync(self, conversation_id: str, turn_id: str, after_seq: int) -> None:
        """``resync``: the events of ``turn_id`` after ``after_seq`` as a ``replay``; a
        ``snapshot`` when the turn no longer runs anywhere.

        Raises:
            ProblemError: ``not-found`` unless the socket follows that conversation.
        """
        cid = self.following
        if cid is None or str(cid) != conversation_id:
            await self._snapshot(conversation_id)
            return
        state = await self.hub.turn_state(cid, after_seq=after_seq)
        if state is None or state.turn_id != turn_id:
            await self._snapshot(cid)
            return
        self._emit({"type": "replay", "conversationId": str(cid), "turnId": turn_id, "items": state.items})
        if state.items:
            self._remember(turn_id, max(self._seqs.get(turn_id, 0), state.items[-1]["seq"]))

    async def send_message(self, conversation_id: str | None, text: str, model: str | None) -> None:
        """``send``: start a turn (a new conversation when ``conversation_id`` is None)."""
        await asyncio.shield(control.start_turn(user=self.user, conversation_id=conversation_id, text=text,
                                                model_alias=model, origin=self, hub=self.hub))

    async def retry(self, conversation_id: str) -> None:
        """``retry``: drop the last exchange and send its text again."""
        await asyncio.shield(control.retry_turn(user=self.user, conversation_id=conversation_id, origin=self,
                                                hub=self.hub))

    async def rename(self, conversation_id: str, title: str) -> None:
        """``rename``: every tab gets a ``conversation`` frame."""
        await control.conversation_retitle(user=self.user, conversation_id=conversation_id, title=title, hub=self.hub)

    async def delete(self, conversation_id: str) -> None:
        """``delete``: every tab gets ``conversation_deleted``."""
        await control.conversation_remove(user=self.user, conversation_id=conversation_id, hub=self.hub)

    async def list(self, before: str | None = None) -> None:
        """``list``: a ``conversations`` frame, most recent first, one page after the cursor
        ``before`` (the previous page's ``next``; ``None``: the first page).

        Raises:
            ProblemError: ``invalid-request`` for a cursor that is not one.
        """
        self._emit(await database_sync_to_async(_page)(self.user, before))
