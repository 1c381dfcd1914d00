"""Turn services: send, cancel, retry, tool results (CS-2, CS-3, CS-10 … CS-16, CS-19, CS-21).

One turn per conversation, across worker processes, enforced by the database: a send is a
conditional ``UPDATE … WHERE NOT status='streaming'`` that sets a fresh ``turn_id``; the
loser of two simultaneous sends updates no row and gets ``conflict``. Every later write of
the turn is guarded by that ``turn_id`` (see :mod:`jxai_app.store.recorder`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from jxai_app.models import (
    Conversation,
    ConversationStatus,
    Message,
    MessageRole,
    MessageStatus,
    ToolCall,
)
from jxai_app.core.problems import problem_error
from jxai_app.store import sql
from jxai_app.store.common import (
    STALE_AFTER_SECONDS,
    get_owned,
    invalid,
    lock_owned,
    next_position,
    title_from,
)
from jxai_app.store.recovery import turn_abandon, turn_is_stale
from jxai_app.store.wire import messages_to_wire


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnStart:
    """What a successful send created; hand it to ``TurnRecorder``."""

    conversation_id: uuid.UUID
    """The conversation the turn runs in."""
    turn_id: uuid.UUID
    """The new turn's id (``Conversation.turn_id``)."""
    user_message_id: int
    """Primary key of the saved user message."""
    assistant_message_id: int
    """Primary key of the assistant placeholder (status ``streaming``)."""
    model: str
    """The model alias the turn uses."""


def _conflict() -> Exception:
    return problem_error("conflict", "A turn is already running in this conversation; wait for it or press Stop.")


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnOpened:
    """What :func:`turn_open` saved and read, so the caller needs no second read."""

    turn: TurnStart
    """Hand it to ``TurnRecorder``."""
    conversation: Conversation
    """The conversation as the send saved it (status streaming, the new turn, its title,
    model and ``updated_at``), updated in memory rather than read again."""
    user_message: Message
    """The saved user message."""
    history: list[dict[str, Any]]
    """OpenAI wire messages (:mod:`jxai_app.store.wire`), ending with the user message."""


@sql.statement
def _messages_of() -> str:
    return (f"SELECT {sql.columns(Message)} FROM {sql.table(Message)} WHERE {sql.column(Message, 'conversation')} = %s "
            f"ORDER BY {sql.column(Message, 'position')}")


@sql.statement
def _calls_of() -> str:
    return (f"SELECT {sql.columns(ToolCall)} FROM {sql.table(ToolCall)} WHERE {sql.column(ToolCall, 'message')} IN "
            f"(SELECT {sql.column(Message, 'id')} FROM {sql.table(Message)} "
            f"WHERE {sql.column(Message, 'conversation')} = %s) "
            f"ORDER BY {sql.column(ToolCall, 'message')}, {sql.column(ToolCall, 'position')}")


@dataclass(frozen=True, slots=True)
class History:
    """A conversation's saved messages in position order and their tool calls (by message
    pk, in call order): what the next request's wire history is built from."""

    messages: list[Message]
    calls: dict[int, list[ToolCall]]

    @property
    def next_position(self) -> int:
        """The position after the last message (0 for none)."""
        return self.messages[-1].position + 1 if self.messages else 0


def history_queries(conversation_id: uuid.UUID) -> list[tuple[str, list[Any]]]:
    """The two hand-written statements that read a conversation's history (its messages,
    its calls), to send with others (:func:`jxai_app.store.sql.fetch_together`); read
    their rows with :func:`history_from`."""
    cid = sql.value(Conversation, "id", conversation_id)
    return [(_messages_of(), [cid]), (_calls_of(), [cid])]


def history_from(results: list[list[tuple[Any, ...]]]) -> History:
    """The :class:`History` of :func:`history_queries`' rows."""
    messages_rows, calls_rows = results
    calls: dict[int, list[ToolCall]] = {}
    for call in sql.rows_to_instances(ToolCall, calls_rows):
        calls.setdefault(call.message_id, []).append(call)
    return History(messages=sql.rows_to_instances(Message, messages_rows), calls=calls)


def _history(conversation_id: uuid.UUID) -> History:
    return history_from(sql.fetch_together(history_queries(conversation_id)))


def _claim_query(conversation_id: uuid.UUID, changes: dict[str, Any], *, returning: bool) -> tuple[str, list[Any]]:
    """The one-turn rule itself: ``UPDATE … SET changes WHERE id = … AND NOT status =
    'streaming'`` (one hand-written statement). It changes no row when another send claimed
    the row first (or it is gone); with ``returning`` it then returns no row either."""
    params = [sql.save_value(Conversation, field, data) for field, data in changes.items()]
    return _claim_row(tuple(changes), returning), [*params, sql.value(Conversation, "id", conversation_id),
                                                   ConversationStatus.STREAMING.value]


@sql.statement
def _claim_row(fields: tuple[str, ...], returning: bool) -> str:
    assignments = ", ".join(f"{sql.column(Conversation, field)} = %s" for field in fields)
    return (f"UPDATE {sql.table(Conversation)} SET {assignments} WHERE {sql.column(Conversation, 'id')} = %s "
            f"AND NOT ({sql.column(Conversation, 'status')} = %s)"
            + (f" RETURNING {sql.column(Conversation, 'id')}" if returning else ""))


def _write_turn(cid: uuid.UUID, changes: dict[str, Any], messages: list[Message],
                also: Sequence[tuple[str, Sequence[Any]]]) -> bool:
    """The claim, the INSERT of ``messages`` and ``also``, in one round trip on PostgreSQL
    (:func:`~jxai_app.store.sql.fetch_together`); False (and the caller rolls back) when the
    claim changed no row."""
    saving = sql.insert_statement(messages)
    if saving is None:  # not one statement here: one after the other
        if sql.execute(*_claim_query(cid, changes, returning=False))[1] != 1:
            return False
        sql.insert(messages)
        sql.fetch_together(also)
        return True
    try:
        claimed, keys, *_ = sql.fetch_together([_claim_query(cid, changes, returning=True), saving, *also])
    except IntegrityError:
        # The INSERT runs even when the claim changed no row; its positions are then taken
        # by the send that won (the caller's lock makes this unreachable today).
        return False
    if claimed:
        sql.set_keys(messages, keys)
    return bool(claimed)


def turn_open(
    *, conversation: Conversation, text: str, model: str | None = None, stale_after: float = STALE_AFTER_SECONDS,
    turn_id: uuid.UUID | None = None, history: History | None = None, also: Sequence[tuple[str, Sequence[Any]]] = (),
) -> TurnOpened:
    """Start a turn in ``conversation``: the send's writes plus the history read, with no
    read after them (CS-2; issue 4 "time to first token").

    The caller has read ``conversation`` **in the current transaction, row-locked**
    (:func:`~jxai_app.store.common.lock_owned`; on SQLite the ``IMMEDIATE`` transaction
    holds the write lock), so the row cannot change before this commits and the returned
    objects are what the database holds. Outside a transaction this opens one of its own.

    Statements on the happy path: one SELECT of the messages and one of their calls (unless
    ``history`` is given), then the conditional UPDATE that claims the conversation (the
    one-turn rule, across processes) and one INSERT of the user message and the placeholder,
    sent together with ``also`` (one round trip on PostgreSQL); all hand-written
    (:mod:`jxai_app.store.sql`).

    Args:
        conversation: the conversation, read as above (it is updated in place).
        text: the user's message (not blank; length limits are the caller's, issue 6).
        model: a model alias to switch the conversation to, or ``None`` to keep its model.
        stale_after: a running turn silent this long is abandoned first (crash recovery).
        turn_id: the new turn's id (default: a fresh ``uuid4``).
        history: the conversation's :class:`History`, read in this transaction after the
            lock (e.g. together with other statements); default: read here.
        also: ``[(sql, params)]`` the caller's own writes for this send (e.g. the rate
            limit's admission), run after the send's writes in the same round trip; their
            rows are not returned.

    Raises:
        ProblemError: ``invalid-request`` (blank text), ``conflict`` while a live turn runs
            (replaces CS-3's silent ignore).
    """
    if not isinstance(text, str) or not text.strip():
        raise invalid("The message is empty.")
    with transaction.atomic(savepoint=False):
        cid = conversation.pk
        if conversation.status == ConversationStatus.STREAMING:
            if not (turn_is_stale(conversation, stale_after=stale_after)
                    and turn_abandon(conversation_id=cid, turn_id=conversation.turn_id, stale_after=stale_after)):
                raise _conflict()
            conversation.refresh_from_db()
            history = None  # the abandoned turn's partial message is gone: read again
        earlier = history if history is not None else _history(cid)
        position = earlier.next_position
        user_message = Message(conversation_id=cid, position=position, role=MessageRole.USER, content=text)
        wire = messages_to_wire([*earlier.messages, user_message], earlier.calls)
        now = timezone.now()
        changes: dict[str, Any] = {
            "status": ConversationStatus.STREAMING, "turn_id": turn_id or uuid.uuid4(), "turn_heartbeat": now,
            "last_error": "", "last_problem": None, "updated_at": now, "title": conversation.title or title_from(text),
        }
        if model:
            changes["model"] = model
        placeholder = Message(conversation_id=cid, position=position + 1, role=MessageRole.ASSISTANT,
                              model=changes.get("model", conversation.model), status=MessageStatus.STREAMING)
        if not _write_turn(cid, changes, [user_message, placeholder], also):
            raise _conflict()
        for name, value in changes.items():
            setattr(conversation, name, value)
    turn = TurnStart(conversation_id=cid, turn_id=changes["turn_id"], user_message_id=user_message.pk,
                     assistant_message_id=placeholder.pk, model=conversation.model)
    return TurnOpened(turn=turn, conversation=conversation, user_message=user_message, history=wire)


@transaction.atomic
def message_send(
    *, user: Any, conversation_id: uuid.UUID | str, text: str, model: str | None = None,
    stale_after: float = STALE_AFTER_SECONDS,
) -> TurnStart:
    """Save the user's message and an empty assistant placeholder and start a turn (CS-2).

    The conversation's row is locked and read, then :func:`turn_open` makes the two writes
    of the happy path: the conversation's conditional UPDATE (status streaming, new turn id,
    error cleared, title from the text when empty, model when given) and one INSERT of both
    messages.

    Args:
        user: the requesting user (must own the conversation).
        conversation_id: the conversation.
        text: the user's message (not blank; length limits are the caller's, issue 6).
        model: a model alias to switch the conversation to, or ``None`` to keep its model.
        stale_after: a running turn silent this long is abandoned first (crash recovery).

    Raises:
        ProblemError: ``not-found`` (missing or foreign id), ``invalid-request`` (blank text),
            ``conflict`` while a live turn runs (replaces CS-3's silent ignore).
    """
    if not isinstance(text, str) or not text.strip():
        raise invalid("The message is empty.")
    conversation = lock_owned(user, conversation_id)
    return turn_open(conversation=conversation, text=text, model=model, stale_after=stale_after).turn


def turn_cancel(*, user: Any, conversation_id: uuid.UUID | str) -> uuid.UUID | None:
    """Stop the running turn from anywhere (any tab, any worker): delete the partial
    assistant message and its calls, keep completed rounds, return to idle (CS-19).

    The turn's own recorder then finds its placeholder gone and writes nothing more. Safe
    without a running turn (no-op).

    Returns:
        The id of the turn that was stopped, or ``None`` when none ran.

    Raises:
        ProblemError: ``not-found``.
    """
    conversation = get_owned(user, conversation_id)
    if conversation.status != ConversationStatus.STREAMING:
        return None
    ended = turn_abandon(conversation_id=conversation.pk, turn_id=conversation.turn_id)
    return conversation.turn_id if ended else None


@transaction.atomic
def message_retry(*, user: Any, conversation_id: uuid.UUID | str) -> str | None:
    """Drop the last exchange so its user text can be sent again (CS-21).

    Removes the trailing non-user messages and then the last user message (earlier turns
    survive), sets the conversation idle and clears its error.

    Returns:
        The removed user message's text (send it again with :func:`message_send`), or
        ``None`` when there is no user message (no-op).

    Raises:
        ProblemError: ``not-found``; ``conflict`` while a turn runs.
    """
    conversation = get_owned(user, conversation_id, for_update=True)
    if conversation.status == ConversationStatus.STREAMING:
        raise _conflict()
    last_user = (Message.objects.filter(conversation=conversation, role=MessageRole.USER)
                 .order_by("-position").first())
    if last_user is None:
        return None
    Message.objects.filter(conversation=conversation, position__gte=last_user.position).delete()
    Conversation.objects.filter(pk=conversation.pk).update(
        status=ConversationStatus.IDLE, last_error="", last_problem=None, updated_at=timezone.now()
    )
    return last_user.content


def _result_of(content: str) -> tuple[Any, bool]:
    """``(result, success)`` of a tool reply: the parsed JSON (or the raw text when it is not
    JSON) and whether it succeeded: false iff an object with ``success: false`` (MC-6)."""
    try:
        parsed = json.loads(content)
    except (TypeError, ValueError):
        return content, True
    return parsed, not (isinstance(parsed, dict) and parsed.get("success") is False)


def tool_result_insert(
    *, conversation_id: uuid.UUID, call_id: str, content: str, success: bool | None, now: datetime
) -> Message:
    """Save a tool reply (core of the two attach services; two writes, call it in a transaction).

    The call it answers is the one with ``call_id`` on the nearest preceding assistant
    message of the current turn (CS-12, CS-13: a reused id attaches to the later request;
    CS-15: never across the turn's user message). The reply is appended as a ``tool``
    message and the call gets ``result``, ``success`` and ``finished_at``.

    Raises:
        ProblemError: ``invalid-request`` when no call of the turn has that id (CS-11/CS-14
            ignore it silently; a clear refusal loses nothing and corrupts nothing), when that
            call already has a result, or when ``content`` is not a string.
    """
    if not isinstance(content, str):
        raise invalid("A tool result must be text (the JSON the model will read).")
    turn_start = (Message.objects.filter(conversation_id=conversation_id, role=MessageRole.USER)
                  .aggregate(top=Max("position"))["top"])
    call = (ToolCall.objects.filter(
        message__conversation_id=conversation_id, message__role=MessageRole.ASSISTANT,
        message__status=MessageStatus.COMPLETE, message__position__gt=-1 if turn_start is None else turn_start,
        call_id=call_id,
    ).order_by("-message__position", "-position").first())
    if call is None:
        raise invalid(f"No tool call with id {call_id!r} in this turn.")
    if call.finished_at is not None:
        raise invalid(f"Tool call {call_id!r} already has a result.")
    result, derived = _result_of(content)
    reply = Message.objects.create(
        conversation_id=conversation_id, position=next_position(conversation_id), role=MessageRole.TOOL,
        tool_call_id=call_id, content=content,
    )
    ToolCall.objects.filter(pk=call.pk).update(
        result=result, success=derived if success is None else success, finished_at=now
    )
    return reply


@transaction.atomic
def tool_result_attach(
    *, user: Any, conversation_id: uuid.UUID | str, call_id: str, content: str, success: bool | None = None
) -> Message:
    """Attach a tool's result to its call and append the ``tool`` reply (CS-10, CS-12, CS-16),
    whatever the conversation's status (for results that arrive after a turn ended, e.g. an
    answered question). Inside a turn use ``TurnRecorder.attach_tool_result``.

    Args:
        user: the requesting user.
        conversation_id: the conversation.
        call_id: the id of the call answered.
        content: the reply text the model will read (usually ``{"success": …}`` JSON).
        success: overrides the success derived from ``content`` (MC-6).

    Returns:
        The saved ``tool`` message.

    Raises:
        ProblemError: ``not-found``; ``invalid-request`` (see :func:`tool_result_insert`).
    """
    conversation = get_owned(user, conversation_id, for_update=True)
    return tool_result_insert(conversation_id=conversation.pk, call_id=call_id, content=content,
                              success=success, now=timezone.now())
