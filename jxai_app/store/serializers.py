"""Saved rows → the protocol's plain dicts (docs/websocket.md: the ``conversation``
and ``message`` objects).

Shared by the websocket consumer, the turn runner and the page's views: plain functions,
no framework beyond the models. Shapes::

    conversation  {"id", "title", "model", "status": "idle"|"streaming"|"error",
                   "tokenCount", "contextWindow": int|None, "contextWarning",
                   "lastError": None|{"message", "code", "problem"}, "updatedAt", "temporary"}
    message       {"id", "role", "content", "reasoning": str|None, "toolCallId": str|None,
                   "toolCalls": [{"id", "name", "arguments", "result", "success", "approval"}],
                   "usage": dict|None, "stopReason", "status": "complete"|"streaming",
                   "createdAt", "feedback": None|{"rating": "up"|"down", "comment"}, "parentId": int|None,
                   "branch": {"index", "count", "prev", "next"}, "stopped": bool,
                   "attachments": [{"id", "name", "mediaType", "size", "width", "height", "url"}]}

``approval`` is ``None`` for a call that needed none, else ``{"state": "awaiting_approval" |
"approved" | "denied" | "expired", "decidedBy": username | None, "decidedAt", "reason"}``
(docs/approval.md). Dates are ISO 8601 strings. ``status`` of a message is ``streaming`` only for a live
turn's placeholder (content as of its last flush), which appears only in a snapshot taken
from the database when no runner answered (see :mod:`jxai_app.turns.session`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

from jxai_app import conf
from jxai_app.core.errors import JxaiError
from jxai_app.models import Conversation, Message, MessageRole, ToolCall
from jxai_app.store.attachments import attachment_dict
from jxai_app.store.branches import ONLY_CHILD, Siblings
from jxai_app.store.feedback import feedback_dict, feedback_of


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _context_window(alias: str) -> int | None:
    """The model's context window in tokens, or ``None`` when the alias is not configured."""
    try:
        return conf.get_model_registry().get(alias).context_window
    except JxaiError:
        return None


def last_error_dict(conversation: Conversation) -> dict[str, Any] | None:
    """``{"message", "code", "problem"}`` of the last failed turn, or ``None``.

    ``code`` is the failed event's ``code`` when the runner kept it in the problem document
    (extension member ``code``), else the problem's slug, else ``None``.
    """
    if not conversation.last_error and conversation.last_problem is None:
        return None
    problem = conversation.last_problem if isinstance(conversation.last_problem, dict) else None
    code: str | None = None
    if problem is not None:
        raw = problem.get("code")
        if isinstance(raw, str) and raw:
            code = raw
        elif isinstance(problem.get("type"), str):
            code = problem["type"].rstrip("/").rsplit("/", 1)[-1] or None
    return {"message": conversation.last_error, "code": code, "problem": problem}


def conversation_dict(conversation: Conversation) -> dict[str, Any]:
    """A conversation in protocol shape (see the module docstring)."""
    return {
        "id": str(conversation.pk),
        "title": conversation.title,
        "model": conversation.model,
        "status": conversation.status,
        "tokenCount": conversation.token_count,
        "contextWindow": _context_window(conversation.model),
        "contextWarning": conversation.context_warning,
        "lastError": last_error_dict(conversation),
        "updatedAt": _iso(conversation.updated_at),
        "temporary": conversation.temporary,
    }


def approval_dict(call: ToolCall) -> dict[str, Any] | None:
    """A call's approval in protocol shape (module docstring), ``None`` when it needed none.
    Read the call with ``decided_by`` selected when serialising many."""
    if not call.approval_state:
        return None
    decider = call.decided_by
    return {"state": call.approval_state, "decidedBy": None if decider is None else decider.get_username(),
            "decidedAt": _iso(call.decided_at), "reason": call.decision_reason}


def message_dict(message: Message, siblings: Siblings | None = None, *,
                 written: Sequence[ToolCall] | None = None) -> dict[str, Any]:
    """A saved message in protocol shape. Prefetch ``tool_calls`` (ordered by position)
    when serialising many, and select ``feedback`` (``jxai_app.store.message_list`` does).
    ``feedback`` is the owner's on an assistant message (docs/store.md "Feedback"), else ``None``.
    ``siblings``: where it sits among its parent's children (docs/websocket.md "Branches";
    default: no branch). ``written``: the message was just written and these are its calls as
    the writer holds them (the row as written, no query: a new message has no feedback)."""
    calls = []
    if message.role == MessageRole.ASSISTANT:
        held = written if written is not None else message.tool_calls.all()
        calls = [
            {"id": c.call_id, "name": c.name, "arguments": c.arguments, "result": c.result, "success": c.success,
             "approval": approval_dict(c)}
            for c in sorted(held, key=lambda c: c.position)
        ]
    rated = message.role == MessageRole.ASSISTANT and written is None
    return {
        "id": message.pk,
        "role": message.role,
        "content": message.content,
        "reasoning": message.reasoning_content,
        "toolCallId": message.tool_call_id or None,
        "toolCalls": calls,
        "usage": message.usage,
        "stopReason": message.stop_reason,
        "status": message.status,
        "createdAt": _iso(message.created_at),
        "feedback": feedback_dict(feedback_of(message)) if rated else None,
        "parentId": message.parent_id,
        "branch": (siblings or ONLY_CHILD).as_dict(),
        "stopped": message.stopped,
        "attachments": [attachment_dict(a) for a in message.attachments.all()]
        if message.role == MessageRole.USER else [],
    }


def message_dicts(messages: Iterable[Message], siblings: Mapping[int, Siblings] | None = None) -> list[dict[str, Any]]:
    """Many messages, in the order given (system messages left out: the page never shows
    them), each with its siblings from ``siblings`` (by id; an active path's)."""
    known = siblings or {}
    return [message_dict(m, known.get(m.pk)) for m in messages if m.role != MessageRole.SYSTEM]


def conversation_dicts(conversations: Iterable[Conversation]) -> list[dict[str, Any]]:
    """Many conversations, in the order given."""
    return [conversation_dict(c) for c in conversations]
