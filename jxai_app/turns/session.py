"""One socket's side of the protocol: what it follows and the order of what it sends
(docs/websocket.md, docs/turns.md).

A :class:`Session` belongs to one websocket consumer. Everything the socket sends goes
through the session's queue and its one task, in order:

- frames the worker's delivery pushes (this worker's turns and notices, and those of other
  workers through the channel layer; unbounded, lossless, in publish order);
- the answers to the client's requests (``snapshot``, ``replay``, ``conversations`` …),
  run as jobs one at a time, so a snapshot and the live events after it never cross.

The **sequencer** guarantees each socket gets every event of a turn once and in order:
``seq <= lastSeq`` is dropped (a copy), ``seq > lastSeq + 1`` is a gap (a layer message was
lost) and is filled from the runner's replay log (here or on another worker) before the
live events go on; a turn first seen after its seq 1 (the socket joined late) triggers a
fresh snapshot. When no runner answers (its worker died) the database is the fallback.
Consecutive events of one turn waiting in the queue go out as one ``events`` frame while it
stays within :data:`~jxai_app.turns.framing.MAX_FRAME_BYTES`; a larger frame goes out as
``chunk`` frames (:mod:`jxai_app.turns.framing`). A frame that cannot be sent is logged and
answered with an ``error`` frame and a fresh snapshot of the followed conversation; when
even that cannot be sent the socket is closed with :data:`UNSENDABLE_CLOSE_CODE`, never left
open and silent.

Expensive requests (docs/websocket.md "Limits"): ``subscribe``, ``switch_branch``,
``search``, ``instructions`` and ``feedback`` each cost a database read of a conversation or
more and a large frame; a socket may make ``JXAI_WS_EXPENSIVE_BURST`` of them at once and
``JXAI_WS_EXPENSIVE_RATE`` a second on average (a token bucket), and one past it is answered
with a ``rate-limited`` error frame naming the request, the socket staying open. A
``subscribe`` to a conversation whose snapshot is still queued on this socket is coalesced
with it (the queued one answers both, and costs one token). Snapshots are built off the
event loop, one at a time per worker, and shared by the user's sockets waiting for the same
one (:mod:`jxai_app.turns.snapshots`, which also states the snapshot rule); replays are
encoded in the same slot. A socket whose client is gone (or was closed for not reading)
runs none of its queued requests, and one whose client has not taken what it was sent (the
server's write buffer is full: ``jxai_app.web.wsbuffer``) answers its next request only once
it has.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections import OrderedDict
from typing import Any, Awaitable, Callable

from jxai_app import conf, store
from jxai_app.core.errors import ProblemError
from jxai_app.core.problems import problem
from jxai_app.store.common import get_owned
from jxai_app.store.serializers import conversation_dicts
from jxai_app.db import db_request
from jxai_app.turns import control, start
from jxai_app.turns.framing import Encoded, Frame, Outbox, wire_texts
from jxai_app.turns.hub import TurnHub
from jxai_app.turns.plan import TurnPlan
from jxai_app.turns.snapshots import big_work_slot, snapshot_for

__all__ = ["Session", "SocketGone", "UNSENDABLE_CLOSE_CODE", "error_frame"]

logger = logging.getLogger("jxai_app.turns")

class SocketGone(Exception):
    """Raised by a session's ``send`` when the peer already closed the socket: nothing more
    is sent, and the socket's own close follows."""


Send = Callable[[str], Awaitable[None]]
"""Sends one websocket text message (a frame's JSON text)."""
Close = Callable[[int], Awaitable[None]]

_KNOWN_TURNS = 8
"""Turns whose last seq a session remembers (the current one and a few before)."""
_ENDED = 1 << 62
"""Last seq recorded for a turn that must be ignored from now on."""
EXPENSIVE_REQUESTS = frozenset({"subscribe", "switch_branch", "search", "instructions", "feedback"})
"""Request types under the per-socket rate (module docstring)."""
_ENCODED_IN_A_THREAD = frozenset({"snapshot", "replay"})
"""Frame types that may be megabytes of JSON: encoded off the event loop."""
UNSENDABLE_CLOSE_CODE = 4500
"""Close code when not even an ``error`` frame can be sent on the socket (reconnect); daphne
lets an application close only with 1000 or 3000–4999, so RFC 6455's 1011 is not available."""


def _owned(user: Any, conversation_id: Any) -> uuid.UUID:
    return get_owned(user, conversation_id).pk


def _page(user: Any, before: str | None = None) -> dict[str, Any]:
    """A ``conversations`` frame: one page (``JXAI_CONVERSATIONS_PAGE_SIZE``) after ``before``."""
    rows, cursor = store.conversation_page(user=user, size=conf.get_limits().conversations_page_size, before=before)
    frame: dict[str, Any] = {"type": "conversations", "items": conversation_dicts(rows)}
    if cursor is not None:
        frame["next"] = cursor
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
        send: sends one text message on the socket (a frame's JSON, at most
            :data:`~jxai_app.turns.framing.MAX_FRAME_BYTES` bytes).
        close: closes the socket with a code (the drain's end; a socket that takes no frame).
        writable: returns once the socket's client takes more (``None``: always at once);
            awaited before each request is answered, so a client that stops reading gets no
            further snapshots built for it.
    """

    def __init__(self, *, hub: TurnHub, user: Any, send: Send, close: Close,
                 writable: Callable[[], Awaitable[None]] | None = None) -> None:
        self.hub = hub
        self.user = user
        self.following: uuid.UUID | None = None
        self._send = send
        self._close = close
        self._writable = writable
        self._seqs: OrderedDict[str, int] = OrderedDict()
        self._recovering: set[str] = set()
        self._resnapshot = False
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._out = Outbox()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._peer_gone = False
        limits = conf.get_limits()
        self._rate, self._burst = limits.ws_expensive_rate, float(limits.ws_expensive_burst)
        self._tokens, self._refilled = self._burst, time.monotonic()
        self._pending_snapshots: set[str] = set()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the session's task and register for the user's list notices."""
        self.hub.add_socket(self, self.user.pk, self._close)
        self._task = asyncio.ensure_future(self._loop())

    async def close(self) -> None:
        """The socket closed: send nothing more, stop the task, stop following (a running
        turn goes on unless ``JXAI_CANCEL_ON_DISCONNECT`` and this was its last follower).

        The hub forgets the session before anything is awaited, so an interrupted close
        never leaves it registered (nor frames piling up in its queue)."""
        if self._closed:
            return
        self._closed = True
        self._idle.set()
        self.hub.remove_socket(self, self.user.pk)
        following, self.following = self.following, None
        if following is not None:
            self.hub.delivery.unfollow(following, self)
        while not self._queue.empty():
            self._queue.get_nowait()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if following is not None and conf.cancel_on_disconnect():  # a hub task: outlives this socket's close
            self.hub.spawn(self._cancel_if_unfollowed(following), name="jxai-cancel-on-disconnect")

    async def _cancel_if_unfollowed(self, conversation_id: uuid.UUID) -> None:
        """``JXAI_CANCEL_ON_DISCONNECT``: Stop the turn when no socket follows it any more,
        on any worker."""
        if self.hub.delivery.follower_count(conversation_id):
            return
        if await self.hub.ask_runner(conversation_id, "followers") is not None:
            return
        runner = self.hub.runner(conversation_id)
        if runner is not None:
            logger.info("turn %s: last follower left, cancelling (JXAI_CANCEL_ON_DISCONNECT)", runner.turn_id)
            runner.cancel()
        else:
            await self.hub.ask_runner(conversation_id, "cancel")

    async def flushed(self) -> None:
        """Return once everything queued so far was sent (the drain waits for it)."""
        if not self._closed:
            await self._idle.wait()

    # ------------------------------------------------------------------ input
    def deliver(self, frame: dict[str, Any]) -> None:
        """A frame from the worker's delivery. Never blocks, never drops."""
        self._put("frame", frame)

    def _put(self, kind: str, payload: Any) -> None:
        if not self._closed:
            self._idle.clear()
            self._queue.put_nowait((kind, payload))

    def refresh(self) -> None:
        """Frames may have been lost (the channel layer was down): take a fresh snapshot of
        the followed conversation."""
        self._put("refresh", None)

    def submit(self, request: str | None, conversation_id: str | None,
               job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job`` in the session's task after what is queued; a ``ProblemError`` it
        raises becomes an ``error`` frame answering ``request``. An expensive ``request``
        over the socket's rate is refused with ``rate-limited`` instead, and a ``subscribe``
        whose conversation's snapshot is still queued is coalesced with it (module docstring)."""
        coalesce = request == "subscribe" and conversation_id is not None
        if self._peer_gone or (coalesce and conversation_id in self._pending_snapshots):
            return
        if request in EXPENSIVE_REQUESTS:
            wait = self._take_token()
            if wait:
                self.refuse(problem("rate-limited", f"Too many {request} requests on this connection; "
                                    f"retry in {wait} s.", retry_after=wait),
                            request=request, conversation_id=conversation_id)
                return
        if coalesce:
            assert conversation_id is not None
            self._pending_snapshots.add(conversation_id)
            job = self._started_snapshot(conversation_id, job)
        self._put("job", (request, conversation_id, job))

    def _take_token(self) -> int:
        """Take one token of the expensive requests' bucket: 0 when there was one, else the
        whole seconds until there is."""
        if self._rate <= 0:
            return 0
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._refilled) * self._rate)
        self._refilled = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0
        return max(1, math.ceil((1 - self._tokens) / self._rate))

    def _started_snapshot(self, conversation_id: str,
                          job: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """``job``, which from its start no longer coalesces later subscribes of ``conversation_id``."""
        async def run() -> None:
            self._pending_snapshots.discard(conversation_id)
            await job()

        return run

    async def run_now(self, request: str, conversation_id: str | None, job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job`` at once, beside the queued requests (``cancel``); a ``ProblemError`` it
        raises becomes an ``error`` frame answering ``request``, queued like any frame."""
        try:
            await job()
        except ProblemError as exc:
            self.refuse(exc.problem, request=request, conversation_id=conversation_id)
        except Exception:
            logger.exception("websocket request %s failed", request)
            self.refuse(problem("internal-error", f"The {request} request failed unexpectedly."), request=request,
                        conversation_id=conversation_id)

    def refuse(self, doc: dict[str, Any], *, request: str | None = None, conversation_id: str | None = None) -> None:
        """Queue an ``error`` frame (the socket stays open)."""
        self.deliver(error_frame(doc, request=request, conversation_id=conversation_id))

    async def _start(self, plan: Awaitable[TurnPlan | None]) -> None:
        """Follow the planned turn's conversation, expecting its events from seq 1, then
        launch it (:mod:`jxai_app.turns.start`): the socket misses nothing. Shielded: once
        the start is saved, a closing socket never leaves it without its runner."""
        async def follow_and_launch() -> None:
            prepared = await plan
            if prepared is None:
                return
            self._follow(prepared.conversation_id)
            self._remember(prepared.turn_id, 0)
            start.launch(self.hub, prepared)

        await asyncio.shield(follow_and_launch())

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
                elif kind == "refresh":
                    self._want_snapshot()
                else:
                    try:
                        self._route(payload)
                    except Exception:  # a malformed frame from the layer must not end the socket
                        logger.exception("dropping a frame that cannot be routed: %.200r", payload)
            await self._flush()
            if self._queue.empty():
                self._idle.set()

    async def _flush(self) -> None:
        for frame in self._out.take():
            if self._closed or self._peer_gone:
                return
            try:
                if isinstance(frame, Encoded):
                    texts: tuple[str, ...] | list[str] = frame.texts
                elif frame.get("type") in _ENCODED_IN_A_THREAD:
                    async with big_work_slot():
                        texts = await asyncio.to_thread(wire_texts, frame)
                else:
                    texts = wire_texts(frame)
                for text in texts:
                    await self._send(text)
            except asyncio.CancelledError:
                raise
            except SocketGone:
                self._peer_gone = True  # the peer left: its disconnect releases the session
                return
            except Exception:
                logger.exception("websocket: cannot send a %s frame to user %s",
                                 frame.type if isinstance(frame, Encoded) else frame.get("type"),
                                 getattr(self.user, "pk", None))
                await self._unsent(frame)

    async def _unsent(self, frame: Frame) -> None:
        """``frame`` could not be sent: tell the tab (``error``, ``internal-error``) and queue a
        fresh snapshot of what it follows (not after a snapshot: that would repeat); close
        with :data:`UNSENDABLE_CLOSE_CODE` when the ``error`` frame cannot be sent either."""
        ftype, cid = ((frame.type, frame.conversation_id) if isinstance(frame, Encoded)
                      else (frame.get("type"), frame.get("conversationId")))
        notice = error_frame(problem("internal-error", f"A {ftype} frame could not be sent; "
                                     "the conversation is reloaded."), conversation_id=cid)
        try:
            await self._send(wire_texts(notice)[0])
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("websocket: cannot send an error frame either; closing the socket")
            await self._close(UNSENDABLE_CLOSE_CODE)
            return
        if ftype != "snapshot":
            self._want_snapshot()

    def _emit(self, frame: Frame) -> None:
        self._out.add(frame)

    async def _run_job(self, request: str | None, conversation_id: str | None,
                       job: Callable[[], Awaitable[None]]) -> None:
        if self._writable is not None:
            await self._writable()
        if self._peer_gone:  # nobody would read the answer: its disconnect follows
            return
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
    def _follow(self, conversation_id: uuid.UUID | None) -> None:
        if self.following == conversation_id:
            return
        if self.following is not None:
            self.hub.delivery.unfollow(self.following, self)
        self.following = conversation_id
        if conversation_id is not None:
            self.hub.delivery.follow(conversation_id, self)

    def _remember(self, turn_id: str, last_seq: int) -> None:
        self._seqs[turn_id] = last_seq
        self._seqs.move_to_end(turn_id)
        while len(self._seqs) > _KNOWN_TURNS:
            self._seqs.popitem(last=False)

    # ------------------------------------------------------------------ routing
    def _route(self, frame: dict[str, Any]) -> None:
        ftype = frame.get("type")
        cid = frame.get("conversationId")
        if cid is None and isinstance(frame.get("conversation"), dict):
            cid = frame["conversation"].get("id")
        following = None if self.following is None else str(self.following)
        if ftype in ("conversation", "conversation_deleted"):
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
            self._sequence(frame)
        elif ftype == "snapshot":
            turn = frame.get("turn")
            if isinstance(turn, dict):
                self._remember(str(turn["turnId"]), int(turn["lastSeq"]))
            self._emit(frame)
        else:
            self._emit(frame)

    def _sequence(self, frame: dict[str, Any]) -> None:
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

    async def _forget(self) -> None:
        self._follow(None)

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
        that follow it (the rule: :mod:`jxai_app.turns.snapshots`).

        Raises:
            ProblemError: ``not-found`` (checked before following anything).
        """
        self._resnapshot = False
        conversation_id = await db_request(_owned, self.user, conversation_id)
        self._follow(conversation_id)
        built = await snapshot_for(self.hub, self.user, conversation_id)
        if built.turn_id is not None:
            self._remember(built.turn_id, built.last_seq)
        elif built.idle:
            for turn_id in list(self._seqs):
                self._seqs[turn_id] = _ENDED  # anything still queued of older turns is in the snapshot
        self._emit(built.frame)

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

    async def send_message(self, conversation_id: str | None, text: str, model: str | None,
                           temporary: bool = False, attachments: list[str] | None = None) -> None:
        """``send``: start a turn (a new conversation when ``conversation_id`` is None, a
        temporary chat with ``temporary``) with the uploads ``attachments`` names."""
        await self._start(start.send(self.hub, user=self.user, conversation_id=conversation_id, text=text,
                                     model_alias=model, temporary=temporary, attachments=attachments))

    async def edit(self, conversation_id: str, message_id: int, text: str, model: str | None,
                   attachments: list[str] | None = None) -> None:
        """``edit``: a new branch beside user message ``message_id`` with ``text`` (and the
        edited message's attachments, or ``attachments`` when given), and its turn."""
        await self._start(start.edit(self.hub, user=self.user, conversation_id=conversation_id,
                                     message_id=message_id, text=text, model_alias=model, attachments=attachments))

    async def regenerate(self, conversation_id: str, message_id: int, model: str | None) -> None:
        """``regenerate``: a new answer beside assistant message ``message_id``."""
        await self._start(start.regenerate(self.hub, user=self.user, conversation_id=conversation_id,
                                           message_id=message_id, model_alias=model))

    async def switch_branch(self, conversation_id: str, message_id: int) -> None:
        """``switch_branch``: show the branch through ``message_id``; every tab gets a ``snapshot``."""
        await control.branch_switch(self.hub, user=self.user, conversation_id=conversation_id, message_id=message_id)

    async def retry(self, conversation_id: str) -> None:
        """``retry``: drop the last exchange and send its text again."""
        await self._start(start.retry(self.hub, user=self.user, conversation_id=conversation_id))

    async def decide(self, conversation_id: str, call_id: str, approved: bool, reason: str) -> None:
        """``approve`` / ``deny``: decide a waiting tool call (docs/approval.md); every tab gets
        the call's ``message_saved``, and the resumed turn's frames follow on this socket."""
        await self._start(control.decide_approval(self.hub, user=self.user, conversation_id=conversation_id,
                                                  call_id=call_id, approved=approved, reason=reason))

    async def cancel(self, conversation_id: str) -> None:
        """``cancel``: Stop the conversation's turn, wherever it runs."""
        await control.cancel_turn(self.hub, user=self.user, conversation_id=conversation_id)

    async def rename(self, conversation_id: str, title: str) -> None:
        """``rename``: every tab gets a ``conversation`` frame."""
        await control.conversation_retitle(self.hub, user=self.user, conversation_id=conversation_id, title=title)

    async def delete(self, conversation_id: str) -> None:
        """``delete``: every tab gets ``conversation_deleted``."""
        await control.conversation_remove(self.hub, user=self.user, conversation_id=conversation_id)

    async def list(self, before: str | None = None) -> None:
        """``list``: a ``conversations`` frame, most recent first, one page after the cursor
        ``before`` (the previous page's ``next``; ``None``: the first page).

        Raises:
            ProblemError: ``invalid-request`` for a cursor that is not one.
        """
        self._emit(await db_request(_page, self.user, before))

    # ------------------------------------------------------------------ search, feedback, settings
    async def search(self, query: str) -> None:
        """``search``: the user's own titles and messages matching ``query``, answered with
        ``search_results`` (docs/websocket.md "Search, feedback and custom instructions").

        Raises:
            ProblemError: ``invalid-request`` for a query over the length limit.
        """
        limit = conf.get_page_limits().search_results
        items = await db_request(_search, self.user, query, limit)
        self._emit({"type": "search_results", "query": query, "items": items})

    async def feedback(self, message_id: int, rating: str | None, comment: str) -> None:
        """``feedback``: save the user's rating of one of their assistant messages; every tab
        following its conversation gets a ``feedback`` frame.

        Raises:
            ProblemError: ``not-found`` (a missing or foreign message), ``invalid-request``.
        """
        cid, saved = await db_request(_feedback, self.user, message_id, rating, comment)
        self.hub.notify(cid, {"type": "feedback", "conversationId": str(cid), "messageId": message_id,
                              "feedback": saved})

    async def instructions(self, text: str | None) -> None:
        """``instructions``: save the user's custom instructions (``text`` given) or read them
        (no ``text``); answered with an ``instructions`` frame.

        Raises:
            ProblemError: ``invalid-request`` for text over the length limit.
        """
        saved = await db_request(_instructions, self.user, text)
        self._emit({"type": "instructions", "text": saved,
                    "maxChars": conf.get_page_limits().custom_instructions_max_chars})


def _search(user: Any, query: str, limit: int) -> list[dict[str, Any]]:
    return store.message_search(owner=user, query=query, limit=limit)


def _feedback(user: Any, message_id: int, rating: str | None, comment: str) -> tuple[uuid.UUID, Any]:
    return store.feedback_set(user=user, message_id=message_id, rating=rating, comment=comment)


def _instructions(user: Any, text: str | None) -> str:
    return store.instructions_get(user=user) if text is None else store.instructions_set(user=user, text=text)
