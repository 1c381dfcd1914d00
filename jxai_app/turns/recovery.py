"""Turns whose worker died: recovered, and their tabs told (docs/turns.md "Leases").

Once a second each worker's :class:`LeaseWatch` recovers the turns whose lease lapsed
(:func:`recover_turns`) and publishes each recovered conversation's new state to every
socket following it, on every worker: an unasked ``snapshot`` (``turn`` null, the partial
message gone) and a ``conversation`` frame for the owner's other sockets. A turn paused for
approval holds no lease and is never recovered; the same watch expires its calls after
``JXAI_APPROVAL_TIMEOUT_SECONDS`` and resumes the turn (docs/approval.md "Expiry"). The
renewal of a worker's own leases is its hub's (:class:`jxai_app.turns.hub.TurnHub`).

A worker judges leases only after its own database connection has answered for a whole
lease period: after an outage every runner renews its lease (and retries its pending
writes) within a few seconds of the database coming back, before any watch may take its
turn for dead.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Collection
from typing import Any

from django.db import transaction

from jxai_app import conf, store
from jxai_app.db import DATABASE_ERRORS, db_call
from jxai_app.policy.budget import forfeit
from jxai_app.store.common import parse_id
from jxai_app.turns.control import expire_approvals
from jxai_app.turns.delivery import LocalDelivery
from jxai_app.turns.frames import snapshot_of
from jxai_app.turns.hub import TurnHub

__all__ = ["LeaseWatch", "publish_recovered", "recover_turns"]

logger = logging.getLogger("jxai_app.turns")

WATCH_INTERVAL_SECONDS = 1.0
"""How often a worker looks for lapsed leases."""


def recover_turns(*, lease: float, everything: bool = False,
                  exclude: Collection[uuid.UUID] = ()) -> list[store.Recovered]:
    """Recover every dead turn (:func:`jxai_app.store.turns_lapsed`), each in one transaction
    with its budget forfeited (:func:`jxai_app.policy.budget.forfeit`). Sync.

    Args:
        lease: seconds after which an unrenewed lease has lapsed.
        everything: recover every streaming turn whatever its lease (a single-process start,
            when no turn can be alive: ``recover_partial_messages``).
        exclude: conversations whose turn runs in the caller's own process.

    Returns:
        The turns this call recovered (publish their end to the conversations' tabs).
    """
    out = []
    for cid, tid in store.turns_lapsed(lease=lease, everything=everything, exclude=exclude):
        with transaction.atomic():
            ended = store.turn_abandon(conversation_id=cid, turn_id=tid, interrupted=True,
                                       lease=None if everything else lease)
            if ended is not None:
                forfeit(ended.turn_id, model=ended.model)
        if ended is not None:
            out.append(ended)
    return out


def _recover_and_describe(lease: float, skip: set[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """Recover lapsed turns (not those running here) and return ``(owner, snapshot)`` of each."""
    out = []
    for turn in recover_turns(lease=lease, exclude=skip):
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
    """One worker's watch (module docstring); a hub job (:class:`jxai_app.turns.hub.TurnHub`).

    Args:
        interval: seconds between two looks.
    """

    def __init__(self, interval: float = WATCH_INTERVAL_SECONDS) -> None:
        self.interval = interval

    async def __call__(self, hub: TurnHub) -> None:
        """Look every ``interval`` seconds until cancelled (errors logged, never fatal): dead
        turns (not ``hub``'s own), then tool calls whose approval expired (docs/approval.md
        "Expiry")."""
        loop = asyncio.get_running_loop()
        answering_since: float | None = None
        while True:
            await asyncio.sleep(self.interval)
            lease = conf.get_turn_timing().lease
            try:
                if answering_since is None:
                    await db_call(store.database_ping)
                    answering_since = loop.time()
                await expire_approvals(hub)  # needs no lease judgement: a paused turn holds none
                if loop.time() - answering_since < lease:
                    continue
                skip = {r.conversation_id for r in hub.runners()}
                for owner, frame in await db_call(_recover_and_describe, lease, skip):
                    logger.info("recovered the turn of conversation %s (its lease lapsed)", frame["conversationId"])
                    publish_recovered(hub.delivery, owner, frame)
            except DATABASE_ERRORS as exc:
                if answering_since is not None:
                    logger.warning("lease watch: the database is not answering (%s)", exc)
                answering_since = None
            except Exception:
                logger.exception("lease watch failed; trying again")
