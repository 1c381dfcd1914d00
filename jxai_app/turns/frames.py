"""Frames read from the database: what a tab is sent about saved state (docs/websocket.md).

Each function but :func:`saved_frame` is sync and reads the database (call it in a database
thread, in the hop that wrote the state); none checks ownership: the caller did.
"""

from __future__ import annotations

import uuid
from typing import Any

from jxai_app import store
from jxai_app.store.recorder import Saved
from jxai_app.store.serializers import conversation_dict, message_dict, message_dicts

__all__ = ["conversation_frame", "message_frame", "saved_frame", "snapshot_of"]


def snapshot_of(conversation_id: Any) -> dict[str, Any] | None:
    """A ``snapshot`` frame of a conversation with no running turn, or ``None`` when it is
    gone: ``{type, conversationId, conversation, messages (the active path), turn: null}``."""
    conversation = store.conversation_by_id(conversation_id)
    if conversation is None:
        return None
    _, path = store.message_list(user=conversation.owner, conversation_id=conversation.pk)
    return {"type": "snapshot", "conversationId": str(conversation.pk), "conversation": conversation_dict(conversation),
            "messages": message_dicts(path.messages, path.siblings), "turn": None}


def message_frame(conversation_id: uuid.UUID, message_id: int | None) -> dict[str, Any] | None:
    """The ``message_saved`` frame of saved message ``message_id`` with its place among its
    siblings (docs/websocket.md "Branches"); ``None`` when there is none or it is gone."""
    message = None if message_id is None else store.message_by_id(message_id)
    if message is None:
        return None
    return {"type": "message_saved", "conversationId": str(conversation_id),
            "message": message_dict(message, store.siblings_of(message))}


def saved_frame(conversation_id: uuid.UUID, saved: Saved | None) -> dict[str, Any] | None:
    """The ``message_saved`` frame of a message the turn's recorder just wrote, from the row
    as written (no query; ``None``: nothing was written)."""
    if saved is None:
        return None
    return {"type": "message_saved", "conversationId": str(conversation_id),
            "message": message_dict(saved.message, saved.siblings, written=saved.calls)}


def conversation_frame(conversation_id: uuid.UUID) -> dict[str, Any] | None:
    """The ``conversation`` frame of a conversation (its list entry and status), or ``None``
    when it is gone."""
    conversation = store.conversation_by_id(conversation_id)
    return None if conversation is None else {"type": "conversation", "conversation": conversation_dict(conversation)}
