"""The ``snapshot`` a socket asks for: built once per worker in one go, and shared by the
user's sockets waiting for the same one (docs/websocket.md "Limits", "Snapshots").

A snapshot of a long conversation is megabytes: its rows loaded into dicts, then its JSON
text, then that text cut into ``chunk`` frames (:func:`~jxai_app.turns.framing.wire_texts`).
So a build does all three inside the worker's one **big-work slot** (:func:`big_work_slot`,
per event loop, shared with the encoding of other large frames), loading in a database
thread and encoding in a thread, and keeps only the wire texts: however many sockets ask,
the worker holds one snapshot's dicts at a time, and the event loop keeps serving everyone
else.

**Shared while waiting.** A request for a conversation whose snapshot is already waiting for
the slot on behalf of the same user joins that build instead of queueing another: every
socket waiting gets the same texts (one copy in memory). Only a build that has not started
loading is joined; each joiner followed the conversation before asking, so what the build
loads is at least as new as what the joiner's live frames start from, and the sequencer
(:mod:`jxai_app.turns.session`) drops what the snapshot already holds. A build goes on when
one of its waiters leaves, and is cancelled when all of them left before it started.

**Snapshot rule**: when a turn runs, ``messages`` ends with the turn's user message and the
turn's own rounds (even completed ones) are given only as ``turn.items``; without a running
turn ``messages`` is the whole saved transcript.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from jxai_app import store
from jxai_app.db import db_request
from jxai_app.models import ConversationStatus
from jxai_app.store.serializers import conversation_dict, message_dicts
from jxai_app.turns.framing import Encoded, wire_texts
from jxai_app.turns.hub import TurnHub

__all__ = ["Snapshot", "big_work_slot", "snapshot_for"]

_ATTEMPTS = 3
"""Loads of a conversation whose running turn the runner does not (yet) report as running."""

_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
_WAITING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, uuid.UUID], _Build]] = (
    weakref.WeakKeyDictionary())


def big_work_slot() -> asyncio.Semaphore:
    """The worker's one slot for building a snapshot or encoding a large frame (one per
    event loop): one socket's megabytes at a time, however many sockets ask."""
    return _SLOTS.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(1))


@dataclass(frozen=True)
class Snapshot:
    """A built ``snapshot`` frame.

    Attributes:
        frame: the frame's websocket messages (one text, or its ``chunk`` frames).
        turn_id, last_seq: the running turn the frame includes (``turn_id`` ``None``: none).
        idle: the conversation was not streaming: every older turn's events are in it.
    """

    frame: Encoded
    turn_id: str | None
    last_seq: int
    idle: bool


class _Build:
    """One snapshot build and the sockets waiting for it."""

    def __init__(self, waiting: dict[tuple[Any, uuid.UUID], _Build], hub: TurnHub, user: Any,
                 conversation_id: uuid.UUID) -> None:
        self.waiters = 0
        self.started = False
        self._waiting, self._key = waiting, (user.pk, conversation_id)
        waiting[self._key] = self
        self.task: asyncio.Future[Snapshot] = asyncio.ensure_future(self._run(hub, user, conversation_id))
        self.task.add_done_callback(lambda task: task.cancelled() or task.exception())  # waiters may all be gone

    def _unlist(self) -> None:
        """From now on a request for the same snapshot builds anew."""
        if self._waiting.get(self._key) is self:
            del self._waiting[self._key]

    async def _run(self, hub: TurnHub, user: Any, conversation_id: uuid.UUID) -> Snapshot:
        for attempt in range(_ATTEMPTS):
            async with big_work_slot():
                self.started = True
                self._unlist()
                built = await _build(hub, user, conversation_id, last_attempt=attempt + 1 == _ATTEMPTS)
            if built is not None:
                return built
            await asyncio.sleep(0.05 * (attempt + 1))
        raise AssertionError("the last attempt always builds")

    async def wait(self) -> Snapshot:
        self.waiters += 1
        try:
            return await asyncio.shield(self.task)
        finally:
            self.waiters -= 1
            if not self.waiters and not self.started:
                self._unlist()
                self.task.cancel()


async def snapshot_for(hub: TurnHub, user: Any, conversation_id: uuid.UUID) -> Snapshot:
    """The ``snapshot`` of ``user``'s conversation ``conversation_id`` (ownership already
    checked; the caller follows it already), built or joined as the module docstring says.

    Returns:
        a :class:`Snapshot`: ``{"type": "snapshot", "conversationId", "conversation",
        "messages", "turn": null | {"turnId", "lastSeq", "items"}}`` as wire texts.

    Raises:
        NotFound: the conversation was deleted meanwhile (as ``store.message_list``).
    """
    waiting = _WAITING.setdefault(asyncio.get_running_loop(), {})
    build = waiting.get((user.pk, conversation_id)) or _Build(waiting, hub, user, conversation_id)
    return await build.wait()


async def _build(hub: TurnHub, user: Any, conversation_id: uuid.UUID, *, last_attempt: bool) -> Snapshot | None:
    """Load and encode the snapshot (in the slot); ``None`` when a turn runs that its runner
    does not report yet, unless this is the last attempt (then the saved messages are sent
    without the turn, and the turn's frames that follow bring the socket up to date)."""
    data, messages, running = await db_request(_load, user, conversation_id)
    frame: dict[str, Any] = {"type": "snapshot", "conversationId": str(conversation_id), "conversation": data,
                             "messages": messages, "turn": None}
    turn_id, last_seq = None, 0
    if running is not None:
        state = await hub.turn_state(conversation_id)
        ids = [m["id"] for m in messages]
        if state is not None and state.turn_id == running and state.user_message_id in ids:
            frame["messages"] = messages[: ids.index(state.user_message_id) + 1]
            frame["turn"] = {"turnId": state.turn_id, "lastSeq": state.last_seq, "items": state.items}
            turn_id, last_seq = state.turn_id, state.last_seq
        elif not last_attempt:
            return None
    texts = await asyncio.to_thread(wire_texts, frame)
    return Snapshot(frame=Encoded("snapshot", str(conversation_id), tuple(texts)), turn_id=turn_id,
                    last_seq=last_seq, idle=turn_id is None and data["status"] != "streaming")


def _load(user: Any, conversation_id: uuid.UUID) -> tuple[dict[str, Any], list[dict[str, Any]], str | None]:
    """The conversation, its messages, and the id of its running turn (``None``: idle)."""
    conversation, path = store.message_list(user=user, conversation_id=conversation_id)
    running = conversation.turn_id if conversation.status == ConversationStatus.STREAMING else None
    return (conversation_dict(conversation), message_dicts(path.messages, path.siblings),
            None if running is None else str(running))
