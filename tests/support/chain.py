"""Hand-made transcripts for tests that set up a conversation without running turns: the rows
form one branch, each the child of the one before, the last the active leaf (docs/store.md
"Branches"), as a sequence of sends would leave them."""

from __future__ import annotations

from typing import Any

from jxai_app.models import Conversation, Message


def messages_chain(conversation: Conversation, *rows: dict[str, Any]) -> list[Message]:
    """Insert ``rows`` (``Message`` fields: role, content, …) in order as one branch of
    ``conversation`` and make the last one its active leaf. Returns the saved messages."""
    saved: list[Message] = []
    for position, fields in enumerate(rows):
        saved.append(Message.objects.create(conversation=conversation, position=position,
                                            parent=saved[-1] if saved else None, **fields))
    if saved:
        Conversation.objects.filter(pk=conversation.pk).update(active_leaf=saved[-1])
    return saved
