"""Every worker's leases: its own turns' renewed, and turns whose worker died recovered and
their tabs told (docs/turns.md "Leases").

Every third of the lease each worker renews the leases of all the turns it runs in one
statement (:func:`jxai_app.store.leases_renew`); a runner whose turn is gone stops. Once a
second each worker recovers the turns whose lease lapsed
(:func:`jxai_app.store.turns_recover`) and publishes each recovered conversation's new state
to every socket following it, on every worker: an unasked ``snapshot`` (``turn`` null, the
partial message gone) and a ``conversation`` frame for the owner's other sockets. A turn
paused for approval holds no lease and is never recovered; the same watch expires its calls
after ``JXAI_APPROVAL_TIMEOUT_SECONDS`` and resumes the turn (docs/approval.md "Expiry").

A worker judges leases only after its own database connection has answered for a whole
lease period: after an outage every runner renews its lease (and retries its pending
writes) within a few seconds of the database coming back, before any watch may take its
turn for dead.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from django.db import InterfaceError, OperationalError

from jxai_app import conf, store
from jxai_app.store.common import parse_id
from jxai_app.store.dbsync import db_thread_call
from jxai_app.store.serializers import conversation_dict, message_dicts

if TYPE_CHECKING:
    from jxai_app.turns.delivery import LocalDelivery
    from jxai_app.turns.hub import TurnHub

__all__ = ["LeaseWatch", "publish_recovered", "snapshot_of"]

logger = logging.getLogger("jxai_app.turns")

WATCH_INTERVAL_SECONDS = 1.0
"""How often a worker looks for lapsed leases."""


def snapshot_of(conversation_id: Any) -> dict[str, Any] | None:
    """A ``snapshot`` frame of a conversation with no running turn (sync; reads the database),
    or ``None`` when it is gone. Ownership is the caller's to check."""
    conversation = store.conversation_by_id(conversation_id)
    if conversation is None:
        return None
    _, messages = store.message_list(user=conversation.owner, conversation_id=conversation.pk)
    return {"type": "snapshot", "conversationId": str(conversation.pk), "conversation": conversation_dict(conversation),
            "messages": message_dicts(messages), "turn": None}


def _recover_and_describe(lease: float, skip: set[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """Recover lapsed turns (not those running here) and return ``(owner, snapshot)`` of each."""
    recovered = store.turns_recover(lease=lease, exclude=skip)
    out = []
    for turn in recovered:
        frame = snapshot_of(turn.conversation_id)
        if frame is not None:
            out.append((turn.owner_id, frame))
    return out


def publish_recovered(delivery: LocalDelivery, owner_id: Any, frame: dict[str, Any]) -> None:
    """Tell every tab of a recovered conversation, as a turn's end does: the ``snapshot`` and
    then the ``conversation`` (its new status) to its followers, the ``conversation`` to the
    owner's other sockets."""
    cid = parse_id(frame["conversationId"])
    assert cid is not None
    notice = {"type": "conversation", "conversation": frame["conversation"]}
    delivery.publish(cid, frame)
    delivery.publish(cid, notice)
    delivery.publish_user(owner_id, cid, notice)


class LeaseWatch:
    """One worker's watch (module docstring).

    Args:
        hub: the worker's hub (its runners are skipped; its delivery publishes).
        interval: seconds between two looks.
    """

    def __init__(self, hub: TurnHub, interval: float = WATCH_INTERVAL_SECONDS) -> None:
        self.hub, self.interval = hub, interval

    async def renew(self) -> None:
        """Renew this worker's leases every third of the lease until cancelled; a renewal the
        database does not take is logged and tried again next time."""
        while True:
            await asyncio.sleep(conf.get_turn_timing().lease / 3)
            runners = {runner.turn.turn_id: runner for runner in self.hub.runners()}
            if not runners:
                continue
            try:
                live = await db_thread_call(store.leases_renew)(list(runners))
            except (OperationalError, InterfaceError) as exc:
                logger.warning("leases: the database did not take this worker's renewal (%s)", exc)
                continue
            for turn_id, runner in runners.items():
                if turn_id not in live and not runner.ended:
                    runner.lease_lost()

    async def run(self) -> None:
        """Look every ``interval`` seconds until cancelled (errors logged, never fatal): dead
        turns, then tool calls whose approval expired (docs/approval.md "Expiry")."""
        from jxai_app.turns.control import expire_approvals  # control imports this module

        loop = asyncio.get_running_loop()
        answering_since: float | None = None
        while True:
            await asyncio.sleep(self.interval)
            lease = conf.get_turn_timing().lease
            try:
                if answering_since is None:
                    await db_thread_call(store.database_ping)()
                    answering_since = loop.time()
                await expire_approvals(self.hub)  # needs no lease judgement: a paused turn holds none
                if loop.time() - answering_since < lease:
                    continue
                skip = {r.conversation_id for r in self.hub.runners()}
                for owner, frame in await db_thread_call(_recover_and_describe)(lease, skip):
                    logger.info("recovered the turn of conversation %s (its lease lapsed)", frame["conversationId"])
                    publish_recovered(self.hub.delivery, owner, frame)
            except (OperationalError, InterfaceError) as exc:
                if answering_since is not None:
                    logger.warning("lease watch: the database is not answering (%s)", exc)
                answering_since = None
            except Exception:
                logger.exception("lease watch failed; trying again")
