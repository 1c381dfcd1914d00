"""Saved transcript → OpenAI Chat Completions wire messages (docs/store.md "The OpenAI wire export").

::

    user / system  {"role", "content"}
                   a user message with attachments: content is a list of OpenAI content
                   parts (text, image_url data URLs, documents as text, or a PDF as a
                   file part for a model that takes files; docs/attachments.md)
    assistant      {"role", "content"[, "reasoning_content"][, "tool_calls"]}
                   content is null when it wrote nothing but made calls
                   tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}]
    tool           {"role": "tool", "tool_call_id", "content"}

Left out: the in-flight placeholder (status ``streaming``) and every
assistant turn with no call and no text, reasoning-only turns included. ``reasoning_content``
goes only on the turn that streamed it. Call results, ids, timestamps, usage and
models never reach the wire. Building the wire never writes to the database.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from jxai_app import conf
from jxai_app.core.errors import UnknownModelError
from jxai_app.models import Conversation, Message, MessageRole, MessageStatus, ToolCall
from jxai_app.store.attachments import content_parts
from jxai_app.store.branches import active_path
from jxai_app.store.common import with_tool_calls
from jxai_app.store.feedback import feedback_export

__all__ = ["approvals_audit", "conversations_export", "message_to_wire", "messages_to_wire", "takes_files",
           "to_messages", "with_tool_calls"]


def takes_files(alias: str) -> bool:
    """Whether the registry's model ``alias`` takes provider file parts (its ``input`` holds
    ``"file"``; docs/attachments.md "Model input"); ``False`` for an unknown alias."""
    try:
        return conf.get_model_registry().resolve(alias).takes("file")
    except UnknownModelError:
        return False


def message_to_wire(message: Message, calls: Sequence[ToolCall] | None = None, *,
                    files: bool = False) -> dict[str, Any] | None:
    """One saved message in wire shape, or ``None`` when it is left out (see module doc).

    ``calls``: the message's tool calls in call order when already read (default: its
    ``tool_calls``, prefetched or not). A user message's attachments are read from its
    ``attachments`` (prefetch them: :func:`with_tool_calls`), their images from storage;
    ``files``: PDFs go as file parts, not as their text (:func:`takes_files`)."""
    if message.status == MessageStatus.STREAMING:
        return None
    role = message.role
    if role == MessageRole.TOOL:
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if role == MessageRole.USER:
        attached = list(message.attachments.all())
        content = content_parts(message.content, attached, files=files) if attached else message.content
        return {"role": role, "content": content}
    if role != MessageRole.ASSISTANT:
        return {"role": role, "content": message.content}
    calls = list(message.tool_calls.all()) if calls is None else list(calls)
    text = message.content
    if not calls and not text:
        return None
    entry: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if message.reasoning_content is not None:
        entry["reasoning_content"] = message.reasoning_content
    if calls:
        entry["tool_calls"] = [
            {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in calls
        ]
    return entry


def messages_to_wire(messages: Iterable[Message], calls: Mapping[int, Sequence[ToolCall]] | None = None, *,
                     files: bool = False) -> list[dict[str, Any]]:
    """Wire list for already-loaded messages in position order (prefetch their calls, or
    pass them: ``calls`` maps a message's pk to its calls in call order; ``files``: as for
    :func:`message_to_wire`)."""
    if calls is None:
        entries = (message_to_wire(message, files=files) for message in messages)
    else:
        entries = (message_to_wire(message, calls.get(message.pk, ()), files=files) for message in messages)
    return [entry for entry in entries if entry is not None]


def to_messages(conversation: Conversation, *, files: bool = False) -> list[dict[str, Any]]:
    """The conversation's active path as OpenAI wire messages, ready for the next request
    (docs/store.md "Branches": other branches are never sent; ``files``: as for
    :func:`message_to_wire`).

    The caller has already checked ownership (get the conversation through
    :func:`~jxai_app.store.conversation_get`). Three queries, no writes.
    """
    return messages_to_wire(active_path(conversation).messages, files=files)


def approvals_audit(conversation: Conversation) -> list[dict[str, Any]]:
    """The approval record of every call that needed one (docs/approval.md "Audit"), in
    transcript order: ``[{"call_id", "name", "state", "approver", "requested_at", "decided_by",
    "decided_at", "reason"}]`` (users by username; ``decided_by`` ``None`` for an expiry)."""
    calls = (ToolCall.objects.filter(message__conversation=conversation).exclude(approval_state="")
             .select_related("approver", "decided_by").order_by("message__position", "position"))

    def name(user: Any) -> str | None:
        return None if user is None else str(user.get_username())

    def iso(value: Any) -> str | None:
        return None if value is None else str(value.isoformat())

    return [{"call_id": c.call_id, "name": c.name, "state": c.approval_state, "approver": name(c.approver),
             "requested_at": iso(c.approval_requested_at), "decided_by": name(c.decided_by),
             "decided_at": iso(c.decided_at), "reason": c.decision_reason} for c in calls]


def conversations_export(conversations: Iterable[Conversation]) -> list[dict[str, Any]]:
    """Export documents for admin: ``[{"id", "title", "owner", "model", "created_at",
    "updated_at", "messages": <wire list>, "approvals": <approvals_audit>, "feedback": <the owner's
    ratings>}]`` in the given order (``feedback``: :func:`jxai_app.store.feedback.feedback_export`)."""
    return [
        {
            "id": str(conversation.pk),
            "title": conversation.title,
            "owner": conversation.owner.get_username(),
            "model": conversation.model,
            "created_at": conversation.created_at.isoformat(),
            "updated_at": conversation.updated_at.isoformat(),
            "messages": to_messages(conversation),
            "approvals": approvals_audit(conversation),
            "feedback": feedback_export(conversation),
        }
        for conversation in conversations
    ]
