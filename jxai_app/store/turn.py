"""Turn services: send, cancel, retry, tool results (docs/store.md "Sending", "What error
and Stop remove", "Retry", "Tool results").

One turn per conversation, across worker processes, enforced by the database: a send locks
the conversation's row, then claims it with one conditional ``UPDATE … WHERE NOT
status='streaming'`` that sets a fresh ``turn_id``; the loser of two simultaneous sends
updates no row and gets ``conflict``. Every later write of the turn is guarded by that
``turn_id`` (:mod:`jxai_app.store.recorder`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from jxai_app.core.agent import Decision
from jxai_app.models import (
    Attachment,
    Conversation,
    ConversationStatus,
    Message,
    MessageRole,
    MessageStatus,
    ToolCall,
)
from jxai_app.store.attachments import attachments_claim
from jxai_app.store.conversation import conversation_create
from jxai_app.store.branches import ONLY_CHILD, Siblings, Tree, path_messages
from jxai_app.store.common import LEASE_SECONDS, conflict, get_owned, invalid, message_not_found, title_from
from jxai_app.store.recovery import Recovered, lease_lapsed, turn_abandon
from jxai_app.store.usage import estimate_tokens
from jxai_app.store.wire import messages_to_wire, takes_files


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnStart:
    """What a successful send saved and read: hand it to the turn's runner and recorder."""

    conversation: Conversation
    """The conversation as the send left it (status streaming, the new turn, title, model)."""
    turn_id: uuid.UUID
    """The new turn's id (``Conversation.turn_id``)."""
    user_message: Message
    """The turn's question: the saved user message (for a regenerate, the existing one)."""
    user_siblings: Siblings
    """The user message among its siblings (an edit makes it one of several)."""
    assistant_message_id: int | None
    """Primary key of the assistant placeholder (status ``streaming``); ``None`` for a resumed
    turn, whose first round opens its own after the decided calls' results."""
    assistant_position: int
    """The position of the turn's first assistant message (a send's placeholder): the turn's
    messages are the conversation's newest, from here on."""
    history: list[dict[str, Any]]
    """OpenAI wire messages (:mod:`jxai_app.store.wire`), ending with the user message (a
    resumed turn: with the paused round and the results it has)."""
    created: bool
    """True when the send created the conversation."""
    placeholder: Message | None = None
    """The assistant placeholder as inserted (``None`` for a resumed turn): the turn's first
    round completes it, and its ``message_saved`` is built from it (no read-back)."""
    placeholder_siblings: Siblings = ONLY_CHILD
    """The placeholder among its siblings (a regenerate's is the newest of its question's answers)."""
    prompt_tokens: int = 0
    """The estimated tokens of ``history`` (:func:`jxai_app.core.tokens.estimate_tokens`): the
    first request's size beside its system prompt, for the turn's budget."""
    abandoned: Recovered | None = None
    """A dead turn the send recovered first (its budget is forfeited in the same transaction)."""
    resumed_after: int | None = None
    """A turn resumed after an approval (docs/approval.md): the last message saved before it
    (a snapshot shows the saved messages up to it, then the turn's events); ``None`` for a send."""
    resumed_after_position: int = 0
    """A resumed turn: the position of ``resumed_after`` (the turn's next message goes after it)."""
    decisions: tuple[Decision, ...] = ()
    """A resumed turn: the decisions on the paused round's calls, in call order."""
    prior_calls: Mapping[str, int] = field(default_factory=dict)
    """A resumed turn: calls the turn ran before it paused, by tool name (the per-turn caps)."""

    @property
    def anchor_message_id(self) -> int:
        """The last saved message before the turn's own events (the user message of a send)."""
        return self.user_message.pk if self.resumed_after is None else self.resumed_after

    @property
    def conversation_id(self) -> uuid.UUID:
        """The conversation the turn runs in."""
        return self.conversation.pk

    @property
    def model(self) -> str:
        """The model alias the turn uses."""
        return self.conversation.model


def _lock_for_turn(user: Any, conversation_id: uuid.UUID | str | None, *, model: str | None,
                   lease: float, temporary: bool = False) -> tuple[Conversation, bool, Q, Recovered | None]:
    """Steps 1–2 of :func:`message_send` (inside its transaction): the conversation (created
    or locked), a dead turn recovered. Returns the conversation, whether it was created, the
    condition the claim must meet and the recovered turn. A conversation whose turn waits
    for an approval is a ``conflict`` (code ``approval_pending``; docs/approval.md)."""
    created = conversation_id is None
    if created:
        conversation = conversation_create(user=user, model=model or "", temporary=temporary)
    else:
        conversation = get_owned(user, conversation_id, for_update=True)
    claimable = ~Q(status__in=[ConversationStatus.STREAMING, ConversationStatus.AWAITING_APPROVAL])
    abandoned = None
    if conversation.status == ConversationStatus.AWAITING_APPROVAL:
        raise conflict(conversation)
    if conversation.status == ConversationStatus.STREAMING:
        if not lease_lapsed(conversation, lease=lease):
            raise conflict()
        abandoned = turn_abandon(conversation_id=conversation.pk, turn_id=conversation.turn_id, interrupted=True)
        claimable = Q()  # recovered just now, under the lock
    return conversation, created, claimable, abandoned


def _claim(conversation: Conversation, claimable: Q, placeholder: Message, text: str, model: str | None,
           turn_id: uuid.UUID) -> None:
    """The claim: one conditional UPDATE that starts the turn and makes ``placeholder`` the
    active leaf (docs/store.md "One turn per conversation"). Raises ``conflict`` when lost."""
    now = timezone.now()
    changes: dict[str, Any] = {
        "status": ConversationStatus.STREAMING, "turn_id": turn_id, "turn_heartbeat": now,
        "last_error": "", "last_problem": None, "updated_at": now, "title": conversation.title or title_from(text),
        "model": model or conversation.model, "active_leaf_id": placeholder.pk,
    }
    if not Conversation.objects.filter(claimable, pk=conversation.pk).update(**changes):
        raise conflict()
    for name, value in changes.items():
        setattr(conversation, name, value)


def _newest(earlier: list[int]) -> Siblings:
    """The place of a message just added after its parent's ``earlier`` children (the newest)."""
    return Siblings(len(earlier), len(earlier) + 1, earlier[-1] if earlier else None, None)


def _insert(message: Message) -> Message:
    """One INSERT (the send's writes go through ``bulk_create``, one row each)."""
    return Message.objects.bulk_create([message])[0]


def _placeholder(conversation: Conversation, parent: Message, position: int, model: str | None) -> Message:
    return _insert(Message(conversation=conversation, parent=parent, position=position, role=MessageRole.ASSISTANT,
                           model=model or conversation.model, status=MessageStatus.STREAMING))


def message_send(
    *, user: Any, conversation_id: uuid.UUID | str | None, text: str, model: str | None = None,
    lease: float = LEASE_SECONDS, replaces: int | None = None, temporary: bool = False,
    attachments: Sequence[Any] | None = None, keep: Sequence[Attachment] = (),
) -> TurnStart:
    """Save the user's message and an empty assistant placeholder and start a turn (docs/store.md "Sending"):
    the one send service, in one short transaction (the caller's, when it opened one: the
    turn's budget is admitted in it, so a refusal saves nothing; docs/turns.md "Starting").

    1. The conversation: created (owned by ``user``, model ``model``) when
       ``conversation_id`` is ``None``, else its row, locked (``select_for_update``; on
       SQLite the ``IMMEDIATE`` transaction holds the write lock), looked up by id and owner
       at once so a foreign id costs what a missing one does.
    2. A running turn whose lease lapsed is recovered first (:mod:`jxai_app.store.recovery`);
       a live one is a ``conflict``.
    3. The tree's shape and the path the new message follows (docs/store.md "Branches"): the
       active path, or for an edit (``replaces``) the path to the replaced message's parent.
    4. One INSERT each of the user message (a child of the path's end) and the placeholder,
       then the claim (one conditional UPDATE, which also makes the placeholder the active leaf).

    Args:
        user: the requesting user (must own the conversation).
        conversation_id: the conversation, or ``None`` for a new one.
        text: the user's message (not blank; length limits are the caller's).
        model: a model alias: the new conversation's, or one to switch to (``None``: keep).
        lease: the turn lease in seconds (``JXAI_TURN_LEASE_SECONDS``).
        replaces: an edit: the id of a user message of the conversation; the new message
            becomes its sibling (a new branch) and the old one stays as it was.
        temporary: a new conversation is a temporary chat (docs/data.md "Temporary chats");
            ignored for an existing one.
        attachments: ids of the message's attachments (docs/attachments.md "Sending"): the
            user's unclaimed uploads, or attachments of ``keep``; ``None``: all of ``keep``.
        keep: attachments the new message may keep (copies naming the same files); an edit
            adds the replaced message's.

    Raises:
        ProblemError: ``not-found`` (missing or foreign id; ``replaces`` not a message of
            it), ``invalid-request`` (blank text; ``replaces`` not a user message),
            ``conflict`` while a live turn runs; an attachment refused
            (:func:`~jxai_app.store.attachments.attachments_claim`).
        django.db.DatabaseError: the database failed (nothing saved).
    """
    if not isinstance(text, str) or not text.strip():
        raise invalid("The message is empty.")
    if replaces is not None and conversation_id is None:
        raise message_not_found()
    with transaction.atomic(savepoint=False):
        conversation, created, claimable, abandoned = _lock_for_turn(user, conversation_id, model=model, lease=lease,
                                                                     temporary=temporary)
        tree = Tree(()) if created else Tree.of(conversation.pk)
        if replaces is None:
            parent_id = tree.leaf
        elif replaces not in tree.parent:
            raise message_not_found()
        elif tree.role[replaces] != MessageRole.USER:
            raise invalid("Only a user message can be edited.")
        else:
            parent_id = tree.parent[replaces]
        earlier = path_messages(tree.path(parent_id))
        turn_id = uuid.uuid4()
        position = tree.next_position
        user_message = _insert(Message(conversation=conversation, parent_id=parent_id, position=position,
                                       role=MessageRole.USER, content=text))
        kept = [*keep, *(Attachment.objects.filter(message_id=replaces) if replaces is not None else ())]
        attachments_claim(user=user, message=user_message, keep=kept,
                          ids=[a.pk for a in kept] if attachments is None else attachments)
        placeholder = _placeholder(conversation, user_message, position + 1, model)
        _claim(conversation, claimable, placeholder, text, model, turn_id)
    history = messages_to_wire([*earlier, user_message], files=takes_files(conversation.model))
    return TurnStart(conversation=conversation, turn_id=turn_id, user_message=user_message,
                     user_siblings=_newest(tree.children.get(parent_id, [])),
                     assistant_message_id=placeholder.pk, assistant_position=placeholder.position,
                     history=history, created=created, placeholder=placeholder,
                     prompt_tokens=estimate_tokens(history), abandoned=abandoned)


def answer_regenerate(
    *, user: Any, conversation_id: uuid.UUID | str, message_id: int, model: str | None = None,
    lease: float = LEASE_SECONDS,
) -> TurnStart:
    """Start a turn that answers the question of assistant message ``message_id`` again: a
    new placeholder beside the answer's first message (a sibling: a new branch, made the
    active leaf), in one transaction like :func:`message_send` (steps 1–3 the same; no user
    message is inserted; docs/store.md "Branches").

    Args:
        model: the model alias to answer with (``None``: the conversation's).

    Raises:
        ProblemError: ``not-found`` (conversation, or a message not in it),
            ``invalid-request`` (not an assistant message), ``conflict`` while a live turn
            runs.
    """
    with transaction.atomic(savepoint=False):
        conversation, _, claimable, abandoned = _lock_for_turn(user, conversation_id, model=model, lease=lease)
        tree = Tree.of(conversation.pk)
        if message_id not in tree.parent:
            raise message_not_found()
        question_id = tree.question_of(message_id)
        if tree.role[message_id] != MessageRole.ASSISTANT or question_id is None:
            raise invalid("Only an assistant answer can be regenerated.")
        earlier = path_messages(tree.path(question_id))
        question = earlier[-1]
        turn_id = uuid.uuid4()
        placeholder = _placeholder(conversation, question, tree.next_position, model)
        _claim(conversation, claimable, placeholder, question.content, model, turn_id)
        history = messages_to_wire(earlier, files=takes_files(conversation.model))
    return TurnStart(conversation=conversation, turn_id=turn_id, user_message=question,
                     user_siblings=tree.siblings(question_id), assistant_message_id=placeholder.pk,
                     assistant_position=placeholder.position, history=history, created=False,
                     placeholder=placeholder, placeholder_siblings=_newest(tree.children.get(question_id, [])),
                     prompt_tokens=estimate_tokens(history), abandoned=abandoned)


def turn_cancel(*, user: Any, conversation_id: uuid.UUID | str) -> Recovered | None:
    """Stop the running turn from anywhere (any tab, any worker): delete the partial
    assistant message and its calls, keep completed rounds, return to idle (docs/store.md "What error and Stop remove").

    The turn's own recorder then finds its placeholder gone and writes nothing more. Safe
    without a running turn (no-op).

    Returns:
        The turn that was stopped (forfeit its budget in the same transaction), or ``None``
        when none ran.

    Raises:
        ProblemError: ``not-found``.
    """
    conversation = get_owned(user, conversation_id)
    if conversation.status != ConversationStatus.STREAMING:
        return None
    return turn_abandon(conversation_id=conversation.pk, turn_id=conversation.turn_id, interrupted=False)


def message_resend(*, user: Any, conversation_id: uuid.UUID | str, model: str | None = None,
                   lease: float = LEASE_SECONDS) -> TurnStart | None:
    """A retry's save in one transaction: the last exchange dropped (:func:`_drop_last_exchange`)
    and its question sent again with the same attachments (docs/attachments.md "Sending").
    Returns ``None`` when there is nothing to retry (nothing changed).

    Raises:
        ProblemError: ``not-found``; ``conflict`` while a turn runs or a call awaits
            approval; as :func:`message_send`.
    """
    with transaction.atomic():
        dropped = _drop_last_exchange(user, conversation_id)
        if dropped is None:
            return None
        text, attached = dropped
        return message_send(user=user, conversation_id=conversation_id, text=text, model=model, lease=lease,
                            keep=attached)


def _drop_last_exchange(user: Any, conversation_id: uuid.UUID | str) -> tuple[str, list[Attachment]] | None:
    """Drop the last exchange of the active path so its user text can be sent again
    (docs/store.md "Retry").

    Removes the answer that follows the path's last user message (its messages on the path,
    with what hangs below them) and then that user message, with its branch; earlier turns
    survive. A user message that holds other answers (a regenerate failed beside them) stays
    with them, as a sibling of the message the resend makes. The active leaf becomes the
    removed message's parent (the resend follows it), the conversation idle, its error cleared.

    Returns:
        The user message's text and its attachments as they were (send it again with
        :func:`message_send`, keeping them), or ``None`` when the path has no user message (no-op).

    Raises:
        ProblemError: ``not-found``; ``conflict`` while a turn runs.
    """
    conversation = get_owned(user, conversation_id, for_update=True)
    if conversation.status in (ConversationStatus.STREAMING, ConversationStatus.AWAITING_APPROVAL):
        raise conflict(conversation)
    tree = Tree.of(conversation.pk)
    path = tree.active
    asked = [pk for pk in path if tree.role[pk] == MessageRole.USER]
    if not asked:
        return None
    question = asked[-1]
    answer = path[path.index(question) + 1:]
    text = Message.objects.filter(pk=question).values_list("content", flat=True).get()
    attached = list(Attachment.objects.filter(message_id=question).order_by("position"))
    others = [pk for pk in tree.children.get(question, []) if pk not in answer]
    dropped = answer[:1] if others else [question]
    if dropped:
        Message.objects.filter(pk__in=dropped).delete()  # cascades to the branch below
    Conversation.objects.filter(pk=conversation.pk).update(
        status=ConversationStatus.IDLE, last_error="", last_problem=None, updated_at=timezone.now(),
        active_leaf_id=tree.parent[question],
    )
    return text, attached


def _result_of(content: str) -> tuple[Any, bool]:
    """``(result, success)`` of a tool reply: the parsed JSON (or the raw text when it is not
    JSON) and whether it succeeded: false iff an object with ``success: false`` (docs/store.md "Tool results")."""
    try:
        parsed = json.loads(content)
    except (TypeError, ValueError):
        return content, True
    return parsed, not (isinstance(parsed, dict) and parsed.get("success") is False)


def tool_result_insert(
    *, conversation_id: uuid.UUID, call_id: str, content: str, success: bool | None, now: datetime,
    turn_position: int, parent_id: int, position: int,
) -> Message:
    """Save a tool reply (two writes; call it in a transaction, as ``TurnRecorder.attach_tool_result`` does).

    The call it answers is the one with ``call_id`` on the nearest preceding assistant
    message of the current turn (docs/store.md "Tool results": a reused id attaches to the later
    request; never across the turn's user message). The turn's messages are the
    conversation's newest, from ``turn_position`` (its first placeholder's) on, whatever
    branch they are on. The reply is inserted as a ``tool`` message (a child of ``parent_id``
    at ``position``) and the call gets ``result``, ``success`` and ``finished_at``.

    Raises:
        ProblemError: ``invalid-request`` when no call of the turn has that id (a clear refusal
            loses nothing and corrupts nothing), when that call already has a result, or when ``content`` is not a string.
    """
    if not isinstance(content, str):
        raise invalid("A tool result must be text (the JSON the model will read).")
    call = (ToolCall.objects.filter(
        message__conversation_id=conversation_id, message__role=MessageRole.ASSISTANT,
        message__status=MessageStatus.COMPLETE, message__position__gte=turn_position, call_id=call_id,
    ).order_by("-message__position", "-position").first())
    if call is None:
        raise invalid(f"No tool call with id {call_id!r} in this turn.")
    if call.finished_at is not None:
        raise invalid(f"Tool call {call_id!r} already has a result.")
    result, derived = _result_of(content)
    reply = Message.objects.create(
        conversation_id=conversation_id, parent_id=parent_id, position=position, role=MessageRole.TOOL,
        tool_call_id=call_id, content=content,
    )
    ToolCall.objects.filter(pk=call.pk).update(
        result=result, success=derived if success is None else success, finished_at=now
    )
    return reply
