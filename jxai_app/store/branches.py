"""Branches: a conversation is a tree of messages (docs/store.md "Branches").

Every message has a parent (``None`` for a first message). Messages with the same parent are
**siblings**, in creation order (``position``): an edited question is a sibling of the
question it replaces, a regenerated answer a sibling of the answer. The conversation's
``active_leaf`` ends the **active path**: that message and its ancestors, root first. The
active path is the transcript: what the page shows, what a request carries
(:func:`~jxai_app.store.wire.to_messages`), admin's transcript and export.

Reading the active path costs three queries whatever its length or the number of branches:
the tree's shape (id, parent, role, position of every message; no content), the path's
rows, their calls. The shape also gives each message's siblings (``‹ 2 / 3 ›`` on the page).

The rules that move the leaf (docs/store.md "Branches"): a send appends to the leaf and
the turn's messages become the leaf one by one; an edit or a regenerate starts a new
branch and makes it the leaf; choosing a sibling moves the leaf to the newest message below
it; when a turn's partial message is dropped the leaf goes back to the last message the
turn kept (on Stop, to the newest path below it: a stopped regenerate shows the newest
earlier answer again).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from django.db import transaction

from jxai_app.models import Conversation, ConversationStatus, Message, MessageRole
from jxai_app.store.common import conflict, get_owned, message_not_found, with_tool_calls

__all__ = ["ActivePath", "ONLY_CHILD", "Siblings", "Tree", "active_path", "branch_switch", "leaf_after_drop",
           "path_messages", "siblings_of"]


@dataclass(frozen=True, slots=True)
class Siblings:
    """Where a message sits among its parent's children (creation order)."""

    index: int
    """0-based place among the siblings."""
    count: int
    """How many siblings, itself included (1: no branch here)."""
    prev: int | None
    """The previous sibling's id, ``None`` for the first."""
    next: int | None
    """The next sibling's id, ``None`` for the last."""

    def as_dict(self) -> dict[str, Any]:
        """``{"index", "count", "prev", "next"}`` (docs/websocket.md "Branches")."""
        return {"index": self.index, "count": self.count, "prev": self.prev, "next": self.next}


ONLY_CHILD: Final[Siblings] = Siblings(0, 1, None, None)


def _siblings(pk: int, row: Sequence[int]) -> Siblings:
    at = row.index(pk)
    return Siblings(at, len(row), row[at - 1] if at else None, row[at + 1] if at + 1 < len(row) else None)


class Tree:
    """The shape of one conversation: parents, children in creation order, roles, and the
    active leaf as the database has it now.

    Args:
        rows: ``(id, parent id, role, position, the conversation's active leaf)`` of every
            message, in position order.
    """

    def __init__(self, rows: Iterable[tuple[int, int | None, str, int, int | None]]) -> None:
        self.parent: dict[int, int | None] = {}
        self.role: dict[int, str] = {}
        self.children: dict[int | None, list[int]] = {}
        self.next_position = 0
        """The position a new message takes (after the newest)."""
        leaf: int | None = None
        for pk, parent, role, position, leaf in rows:
            self.parent[pk], self.role[pk] = parent, role
            self.children.setdefault(parent, []).append(pk)
            self.next_position = position + 1
        self.leaf = leaf if leaf in self.parent else None
        """Where the active path ends; ``None``: the path is empty (a new message starts a new root)."""

    @classmethod
    def of(cls, conversation_id: uuid.UUID) -> Tree:
        """The conversation's tree (one query, no content)."""
        return cls(Message.objects.filter(conversation_id=conversation_id).order_by("position")
                   .values_list("pk", "parent_id", "role", "position", "conversation__active_leaf_id"))

    @property
    def active(self) -> list[int]:
        """The active path's ids, root first."""
        return self.path(self.leaf)

    def path(self, leaf_id: int | None) -> list[int]:
        """Ids from the root down to ``leaf_id`` (empty for ``None``)."""
        out: list[int] = []
        node = leaf_id
        while node is not None and node in self.parent and len(out) <= len(self.parent):  # hand-made rows cannot hang it
            out.append(node)
            node = self.parent[node]
        out.reverse()
        return out

    def siblings(self, pk: int) -> Siblings:
        """``pk`` among its parent's children."""
        return _siblings(pk, self.children[self.parent[pk]])

    def tip(self, pk: int) -> int:
        """The newest path below ``pk``: its newest child, that one's newest child … down to a
        message without children (``pk`` itself when it has none)."""
        while self.children.get(pk):
            pk = self.children[pk][-1]
        return pk

    def question_of(self, pk: int) -> int | None:
        """The nearest user message at or above ``pk`` (the question a turn answers)."""
        node: int | None = pk
        while node is not None and self.role[node] != MessageRole.USER:
            node = self.parent[node]
        return node


@dataclass(frozen=True, slots=True)
class ActivePath:
    """The active path's rows (root first, calls prefetched) and each one's siblings."""

    messages: list[Message]
    siblings: dict[int, Siblings]


def path_messages(ids: Sequence[int]) -> list[Message]:
    """The rows of a path (ids root first) with their feedback, calls prefetched in call order:
    two queries."""
    if not ids:
        return []
    return list(with_tool_calls(Message.objects.filter(pk__in=list(ids)).select_related("feedback")
                                .order_by("position")))


def active_path(conversation: Conversation) -> ActivePath:
    """The conversation's active path as saved now (three queries; no ownership check: the
    caller did it)."""
    tree = Tree.of(conversation.pk)
    ids = tree.active
    return ActivePath(messages=path_messages(ids), siblings={pk: tree.siblings(pk) for pk in ids})


def siblings_of(message: Message) -> Siblings:
    """One saved message among its siblings (one query)."""
    row = list(Message.objects.filter(conversation_id=message.conversation_id, parent_id=message.parent_id)
               .order_by("position").values_list("pk", flat=True))
    return _siblings(message.pk, row) if message.pk in row else ONLY_CHILD


def leaf_after_drop(conversation_id: uuid.UUID, parent_id: int | None, *,
                    stopped: bool) -> tuple[int | None, int | None]:
    """Where the active path ends once a turn's partial message, a child of ``parent_id``,
    was deleted (call it in that transaction; docs/store.md "What error and Stop remove").

    An error ends the path at ``parent_id``, the last message the turn kept (Retry works from
    there; no query). A Stop ends it at the newest path below ``parent_id`` (a stopped
    regenerate shows the newest earlier answer again), and when the turn's question is left
    with no answer at all, the question is marked ``stopped`` (two queries, one UPDATE).

    Returns:
        ``(leaf, question)``: the new active leaf, and the question just marked (``None``
        when none was).
    """
    if parent_id is None or not stopped:
        return parent_id, None
    tree = Tree.of(conversation_id)
    if parent_id not in tree.parent:
        return None, None
    question = tree.question_of(parent_id)
    if question is None or tree.children.get(question):
        return tree.tip(parent_id), None
    Message.objects.filter(pk=question).update(stopped=True)
    return tree.tip(parent_id), question


@transaction.atomic
def branch_switch(*, user: Any, conversation_id: uuid.UUID | str, message_id: int) -> Conversation:
    """Show the branch through ``message_id``: the active leaf becomes the newest message
    below it (:meth:`Tree.tip`). The conversation's last error is cleared (its Retry belonged
    to the branch left behind); nothing else changes, and ``updated_at`` stays.

    Raises:
        ProblemError: ``not-found`` (conversation, or a message not in it); ``conflict``
            while a turn runs (docs/store.md "One turn per conversation").
    """
    conversation = get_owned(user, conversation_id, for_update=True)
    if conversation.status in (ConversationStatus.STREAMING, ConversationStatus.AWAITING_APPROVAL):
        raise conflict(conversation)
    tree = Tree.of(conversation.pk)
    if message_id not in tree.parent:
        raise message_not_found()
    leaf = tree.tip(message_id)
    Conversation.objects.filter(pk=conversation.pk).update(
        active_leaf_id=leaf, status=ConversationStatus.IDLE, last_error="", last_problem=None)
    conversation.refresh_from_db()
    return conversation
