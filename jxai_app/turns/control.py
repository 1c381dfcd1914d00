"""The conversation changes every tab must hear about: Stop, approval decisions and their
expiry, branch switches, renames, deletions (docs/turns.md).

The websocket session (and the other callers) use these; they hold the rules, the socket
only translates frames. Starting a turn is :mod:`jxai_app.turns.start`'s. Database work runs
in the worker's database threads (:func:`jxai_app.db.db_request`). Every function that takes
a conversation id checks that the user owns it and answers a missing, malformed or foreign
id alike (``not-found``).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from jxai_app import conf, store
from jxai_app.core.problems import problem_error
from jxai_app.db import db_call, db_request
from jxai_app.models import ConversationStatus
from jxai_app.policy.budget import forfeit
from jxai_app.store.common import get_owned
from jxai_app.store.serializers import conversation_dict
from jxai_app.turns import start
from jxai_app.turns.frames import message_frame, snapshot_of
from jxai_app.turns.hub import TurnHub
from jxai_app.turns.plan import TurnPlan

__all__ = [
    "branch_switch", "cancel_turn", "conversation_remove", "conversation_retitle", "decide_approval",
    "expire_approvals",
]


def _decide(user: Any, conversation_id: Any, call_id: str, approved: bool,
            reason: str) -> tuple[store.Decided, dict[str, Any] | None]:
    decided = store.approval_decide(user=user, conversation_id=conversation_id, call_id=call_id, approved=approved,
                                    reason=reason, timeout=conf.approval_timeout())
    return decided, message_frame(decided.conversation_id, decided.message_id)


async def decide_approval(hub: TurnHub, *, user: Any, conversation_id: uuid.UUID | str, call_id: str,
                          approved: bool, reason: str = "") -> TurnPlan | None:
    """Approve or deny a waiting tool call (any tab, any worker; docs/approval.md "Deciding"):
    the decision is saved (the first one wins), every tab of the conversation gets the call's
    message again (``message_saved``: the card shows the decision), and when it was the
    round's last waiting call the turn is to resume here.

    Returns:
        The resumed turn's plan (follow it, then :func:`jxai_app.turns.start.launch` it), or
        ``None`` while other calls of the round still wait.

    Raises:
        ProblemError: ``not-found`` (a foreign or missing conversation or call), ``conflict``
            (decided already), ``service-unavailable`` (draining, or the database is down).
    """
    await hub.ensure_started()
    if hub.draining:
        raise problem_error("service-unavailable", "This server is shutting down; answer again to reach another one.",
                            retry_after=1)
    decided, frame = await db_request(_decide, user, conversation_id, call_id, approved, reason)
    if frame is not None:
        hub.notify(decided.conversation_id, frame)
    if decided.resumed is None:
        return None
    return await start.resume(hub, user=user, turn=decided.resumed)


def _expire(timeout: float) -> list[tuple[store.Decided, Any, dict[str, Any] | None]]:
    return [(d, None if d.resumed is None else d.resumed.conversation.owner,
             message_frame(d.conversation_id, d.message_id)) for d in store.approvals_expire(timeout=timeout)]


async def expire_approvals(hub: TurnHub) -> int:
    """Expire the calls that waited longer than ``JXAI_APPROVAL_TIMEOUT_SECONDS`` and resume
    their turns on this worker (every worker's lease watch calls it once a second; the
    conditional updates let one worker take each). Returns how many conversations changed.

    Raises:
        django.db.OperationalError, InterfaceError: the database is unreachable (the watch
            waits a lease period of answers again before it judges leases).
    """
    if hub.draining:  # a resumed turn would have no worker to run on: the next worker's watch takes it
        return 0
    changed = await db_call(_expire, conf.approval_timeout())  # the watch handles an unreachable database
    for decided, owner, frame in changed:
        if frame is not None:
            hub.notify(decided.conversation_id, frame)
        if decided.resumed is not None:
            start.launch(hub, await start.resume(hub, user=owner, turn=decided.resumed))
    return len(changed)


def _running_turn(user: Any, conversation_id: Any) -> tuple[uuid.UUID, str | None]:
    conversation = get_owned(user, conversation_id)
    running = conversation.turn_id if conversation.status == ConversationStatus.STREAMING else None
    return conversation.pk, None if running is None else str(running)


def _stop_paused(user: Any, conversation_id: uuid.UUID) -> dict[str, Any] | None:
    """Stop a turn paused for approval (docs/approval.md "Stop"); its snapshot, or ``None``
    when the conversation was not paused."""
    if not store.approvals_stop(user=user, conversation_id=conversation_id):
        return None
    return snapshot_of(conversation_id)


def _stop_unowned(user: Any, conversation_id: uuid.UUID) -> dict[str, Any] | None:
    """End a turn no runner answered for in the database, its budget forfeited in the same
    transaction; its snapshot, or ``None`` when there was nothing to stop."""
    with transaction.atomic():
        stopped = store.turn_cancel(user=user, conversation_id=conversation_id)
        if stopped is None:
            return None
        forfeit(stopped.turn_id, model=stopped.model)
    return snapshot_of(conversation_id)


async def cancel_turn(hub: TurnHub, *, user: Any, conversation_id: uuid.UUID | str) -> bool:
    """Stop the conversation's running turn, wherever it runs (any tab, any worker).

    The runner (here, or on another worker through the layer) sets its Stop signal: the turn
    ends ``cancelled`` within about a second and drops its partial message. When no runner
    answers (the layer is down, or its worker died), the database ends the turn (store
    ``turn_cancel``; a runner still alive notices at its next lease renewal and stops) and
    the followers get a fresh ``snapshot``.

    Returns:
        True when a turn was running and is being stopped; False when none ran (no-op).

    Raises:
        ProblemError: ``not-found``; ``service-unavailable`` when the database is down.
    """
    cid, running = await db_request(_running_turn, user, conversation_id)
    if running is None and (paused := await db_request(_stop_paused, user, cid)) is not None:
        _tell_stopped(hub, user, cid, paused)
        return True
    runner = hub.runner(cid)
    if runner is not None and (running is None or runner.turn_id == running):
        runner.cancel()
        return running is not None or not runner.ended
    if running is None:
        return False
    if await hub.ask_runner(cid, "cancel") is not None:
        return True
    frame = await db_request(_stop_unowned, user, cid)
    if frame is not None:
        _tell_stopped(hub, user, cid, frame)
    return True


def _tell_stopped(hub: TurnHub, user: Any, conversation_id: uuid.UUID, snapshot: dict[str, Any]) -> None:
    """A turn ended in the database: its followers get the ``snapshot``, the owner's sockets
    the ``conversation``."""
    hub.notify(conversation_id, snapshot)
    hub.notify(conversation_id, {"type": "conversation", "conversation": snapshot["conversation"]}, user_pk=user.pk)


def _switch(user: Any, conversation_id: Any, message_id: int) -> dict[str, Any] | None:
    conversation = store.branch_switch(user=user, conversation_id=conversation_id, message_id=message_id)
    return snapshot_of(conversation.pk)


async def branch_switch(hub: TurnHub, *, user: Any, conversation_id: uuid.UUID | str, message_id: int) -> None:
    """Show the branch through ``message_id`` (docs/store.md "Branches"): every follower gets an
    unasked ``snapshot`` of the new active path, the user's other sockets a ``conversation``.

    Raises:
        ProblemError: ``not-found`` (conversation or message); ``conflict`` while a turn runs.
    """
    frame = await db_request(_switch, user, conversation_id, message_id)
    if frame is not None:
        cid = uuid.UUID(frame["conversationId"])
        hub.notify(cid, frame)
        hub.notify(cid, {"type": "conversation", "conversation": frame["conversation"]}, user_pk=user.pk)


def _rename(user: Any, conversation_id: Any, title: Any) -> dict[str, Any]:
    return conversation_dict(store.conversation_rename(user=user, conversation_id=conversation_id, title=title))


async def conversation_retitle(hub: TurnHub, *, user: Any, conversation_id: uuid.UUID | str,
                               title: str) -> dict[str, Any]:
    """Rename a conversation and tell every tab (``conversation`` frame).

    Raises:
        ProblemError: ``not-found``; ``invalid-request`` for an empty or over-long title.
    """
    data = await db_request(_rename, user, conversation_id, title)
    hub.notify(uuid.UUID(data["id"]), {"type": "conversation", "conversation": data}, user_pk=user.pk)
    return data


async def conversation_remove(hub: TurnHub, *, user: Any, conversation_id: uuid.UUID | str) -> None:
    """Delete a conversation (its running turn is stopped) and tell every tab
    (``conversation_deleted``).

    Raises:
        ProblemError: ``not-found``.
    """
    cid, _ = await db_request(_running_turn, user, conversation_id)
    running = await db_request(lambda: store.conversation_delete(user=user, conversation_id=cid))
    if running is not None:
        runner = hub.runner(cid)
        if runner is not None:
            runner.cancel()
        else:
            await hub.ask_runner(cid, "cancel")
    hub.notify(cid, {"type": "conversation_deleted", "conversationId": str(cid)}, user_pk=user.pk)
