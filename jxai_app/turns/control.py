"""Stopping and retrying turns, and the conversation changes every tab must hear about
(starting one is :mod:`jxai_app.turns.launch`; ``start_turn`` is re-exported here).

The websocket consumer (and any other caller) uses these; they hold the rules, the
consumer only translates frames. All database work runs in private sync functions behind
``database_sync_to_async``. Every function that takes a conversation id checks that the
user owns it and answers a missing, malformed or foreign id alike (``not-found``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from channels.db import database_sync_to_async
from django.db import transaction

from jxai_app import store

from jxai_app.policy import ratelimit
from jxai_app.models import ConversationStatus
from jxai_app.core.problems import problem_error
from jxai_app.store.serializers import conversation_dict
from jxai_app.store.common import get_owned, parse_id
from jxai_app.turns import names
from jxai_app.turns.hub import TurnHub, get_hub
from jxai_app.turns.launch import Origin, TurnInfo, start_turn, start_turn_unmetered, tool_view

__all__ = [
    "Origin", "TurnInfo", "cancel_turn", "conversation_remove", "conversation_retitle", "retry_turn",
    "start_turn", "tool_view",
]

logger = logging.getLogger("jxai_app.turns")


def _running_turn(user: Any, conversation_id: Any) -> tuple[uuid.UUID, str | None]:
    conversation = get_owned(user, conversation_id)
    running = conversation.turn_id if conversation.status == ConversationStatus.STREAMING else None
    return conversation.pk, None if running is None else str(running)


def _snapshot_frame(user: Any, conversation_id: uuid.UUID) -> dict[str, Any]:
    conversation, messages = store.message_list(user=user, conversation_id=conversation_id)
    from jxai_app.store.serializers import message_dicts

    return {"type": "snapshot", "conversationId": str(conversation.pk), "conversation": conversation_dict(conversation),
            "messages": message_dicts(messages), "turn": None}


async def cancel_turn(*, user: Any, conversation_id: uuid.UUID | str, hub: TurnHub | None = None) -> bool:
    """Stop the conversation's running turn, wherever it runs (any tab, any worker).

    The runner (here, or on another worker through the control group) sets its Stop signal:
    the turn ends ``cancelled`` within about a second and drops its partial message. When no
    runner answers (its worker died), the database ends the turn (store ``turn_cancel``) and
    the followers get a fresh ``snapshot``.

    Returns:
        True when a turn was running and is being stopped; False when none ran (no-op).

    Raises:
        ProblemError: ``not-found``.
    """
    hub = hub or get_hub()
    cid, running = await database_sync_to_async(_running_turn)(user, conversation_id)
    runner = hub.runner(cid)
    if runner is not None and (running is None or runner.turn_id == running):
        runner.cancel()
        return running is not None or not runner.ended
    if running is None:
        return False
    answer = await hub.ask_runner(cid, {"type": names.CANCEL})
    if answer is not None:
        return True
    stopped = await database_sync_to_async(store.turn_cancel)(user=user, conversation_id=cid)
    if stopped is not None:
        frame = await database_sync_to_async(_snapshot_frame)(user, cid)
        await hub.notify(cid, frame)
        await hub.notify_user(cid, {"type": "conversation", "conversation": frame["conversation"]},
                              user_pk=getattr(user, "pk", None))
    return True


async def retry_turn(*, user: Any, conversation_id: uuid.UUID | str, origin: Origin | None = None,
                     hub: TurnHub | None = None) -> TurnInfo:
    """Drop the last exchange (after an error) and send its user text again as a new turn.

    Every follower first gets a ``snapshot`` without the dropped exchange.

    Raises:
        ProblemError: ``not-found``; ``conflict`` while a turn runs; ``invalid-request``
            when there is nothing to retry; ``quota-exceeded`` / ``rate-limited`` (the
            exchange is kept, nothing changes).
    """
    hub = hub or get_hub()
    text = await database_sync_to_async(_retry_begin)(user, conversation_id)
    cid = parse_id(conversation_id)
    assert cid is not None  # message_retry accepted it
    await hub.notify(cid, await database_sync_to_async(_snapshot_frame)(user, cid))
    return await start_turn_unmetered(user=user, conversation_id=cid, text=text, origin=origin, hub=hub)


def _retry_begin(user: Any, conversation_id: Any) -> str:
    """Drop the last exchange and admit the new turn, in one transaction (a refusal keeps
    the exchange). Returns the text to send again."""
    with transaction.atomic():
        text = store.message_retry(user=user, conversation_id=conversation_id)
        if text is None:
            raise problem_error("invalid-request", "There is no message to retry in this conversation.")
        ratelimit.check_turn_allowed(user)
    return str(text)


def _rename(user: Any, conversation_id: Any, title: Any) -> dict[str, Any]:
    return conversation_dict(store.conversation_rename(user=user, conversation_id=conversation_id, title=title))


async def conversation_retitle(*, user: Any, conversation_id: uuid.UUID | str, title: str,
                               hub: TurnHub | None = None) -> dict[str, Any]:
    """Rename a conversation and tell every tab (``conversation`` frame).

    Raises:
        ProblemError: ``not-found``; ``invalid-request`` for an empty or over-long title.
    """
    hub = hub or get_hub()
    data = await database_sync_to_async(_rename)(user, conversation_id, title)
    cid = uuid.UUID(data["id"])
    await hub.notify(cid, {"type": "conversation", "conversation": data}, user_pk=getattr(user, "pk", None))
    return data


async def conversation_remove(*, user: Any, conversation_id: uuid.UUID | str, hub: TurnHub | None = None) -> None:
    """Delete a conversation (its running turn is stopped) and tell every tab
    (``conversation_deleted``).

    Raises:
        ProblemError: ``not-found``.
    """
    hub = hub or get_hub()
    cid, _ = await database_sync_to_async(_running_turn)(user, conversation_id)
    running = await database_sync_to_async(store.conversation_delete)(user=user, conversation_id=cid)
    if running is not None:
        runner = hub.runner(cid)
        if runner is not None:
            runner.cancel()
        else:
            await hub.tell_runner(cid, {"type": names.CANCEL})
    await hub.notify(cid, {"type": "conversation_deleted", "conversationId": str(cid)},
                     user_pk=getattr(user, "pk", None))
