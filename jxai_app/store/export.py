"""A user's data as a ZIP archive, streamed (docs/data.md "Export format").

::

    manifest.json                          {"format": "jxai-export", "version": 2, "exported_at", "user",
                                            "conversations": [{"id", "title", "path"}]}
    conversations/<id>/conversation.json   the whole branch tree (:func:`conversation_tree`)
    conversations/<id>/openai.json         the active path as OpenAI wire messages (store/wire.py)
    conversations/<id>/transcript.md       the active path as Markdown (:func:`transcript_markdown`)
    conversations/<id>/attachments/<attachment id>-<safe name>   each message's files, as stored
    feedback.json                          every rating the user gave, with its conversation
    settings.json                          {"custom_instructions"}
    notes.json                             [{"id", "text", "created_at"}]

The archive is written file by file into a sink that hands out the bytes written so far
(:func:`export_zip`): one conversation's files are in memory at a time, never the archive;
an attachment is copied from the storage in pieces (:func:`attachment_chunks`), not whole.
``zipfile`` writes to a stream it cannot seek with data descriptors, which every unzip reads.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Generator, Iterator, Sequence
from datetime import datetime
from typing import Any, Final

from django.utils import timezone

from jxai_app.models import Attachment, Conversation, Message, MessageStatus, Note, ToolCall
from jxai_app.store.attachments import attachment_chunks
from jxai_app.store.branches import Tree
from jxai_app.store.common import with_tool_calls
from jxai_app.store.feedback import feedback_export, feedback_of
from jxai_app.store.instructions import instructions_get
from jxai_app.store.wire import messages_to_wire

__all__ = ["CONVERSATION_FORMAT", "EXPORT_FORMAT", "EXPORT_VERSION", "conversation_tree", "export_filename",
           "export_zip", "transcript_markdown"]

EXPORT_FORMAT: Final[str] = "jxai-export"
"""``format`` of ``manifest.json``."""
CONVERSATION_FORMAT: Final[str] = "jxai-conversation"
"""``format`` of a ``conversation.json``."""
EXPORT_VERSION: Final[int] = 2
"""The format's version (docs/data.md "Export format": what a new version may change)."""


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _call_document(call: ToolCall) -> dict[str, Any]:
    return {"call_id": call.call_id, "name": call.name, "arguments": call.arguments, "result": call.result,
            "success": call.success, "started_at": _iso(call.started_at), "finished_at": _iso(call.finished_at),
            "approval_state": call.approval_state, "decided_at": _iso(call.decided_at),
            "decision_reason": call.decision_reason}


def _safe(text: str) -> str:
    """``text`` with every character but letters, digits, ``-``, ``_`` and ``.`` as ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _attachment_path(attachment: Attachment) -> str:
    """Where the attachment's bytes are in the archive, under its conversation's folder:
    ``attachments/<attachment id>-<safe name>`` (docs/data.md "Export format")."""
    return f"attachments/{attachment.pk}-{_safe(attachment.name)}"


def _attachment_document(attachment: Attachment) -> dict[str, Any]:
    return {"id": str(attachment.pk), "name": attachment.name, "media_type": attachment.media_type,
            "size": attachment.size, "sha256": attachment.sha256, "width": attachment.width,
            "height": attachment.height, "path": _attachment_path(attachment)}


def _message_document(message: Message) -> dict[str, Any]:
    feedback = feedback_of(message)
    return {
        "id": message.pk, "parent": message.parent_id, "role": message.role, "content": message.content,
        "reasoning_content": message.reasoning_content, "tool_call_id": message.tool_call_id,
        "model": message.model, "stop_reason": message.stop_reason, "stopped": message.stopped,
        "usage": message.usage, "created_at": _iso(message.created_at),
        "tool_calls": [_call_document(call) for call in message.tool_calls.all()],
        "feedback": None if feedback is None else {"rating": feedback.rating, "comment": feedback.comment},
        "attachments": [_attachment_document(a) for a in message.attachments.all()],
    }


def _saved_messages(conversation: Conversation) -> list[Message]:
    """Every saved message (the in-flight placeholder left out), calls, feedback and
    attachments with them (:func:`with_tool_calls`), in position order (parents before
    children): four queries."""
    return list(with_tool_calls(conversation.messages.exclude(status=MessageStatus.STREAMING)
                                .select_related("feedback").order_by("position")))


def conversation_tree(conversation: Conversation, messages: Sequence[Message]) -> dict[str, Any]:
    """The ``conversation.json`` document: the conversation and every saved message of its
    tree (docs/data.md "Export format")::

        {"format": "jxai-conversation", "version": 1, "id", "title", "model", "created_at", "updated_at",
         "temporary": bool, "active_leaf": <message id | null>,
         "messages": [{"id", "parent": <id | null>, "role", "content", "reasoning_content",
                       "tool_call_id", "model", "stop_reason", "stopped", "usage", "created_at",
                       "tool_calls": [{"call_id", "name", "arguments", "result", "success", "started_at",
                                       "finished_at", "approval_state", "decided_at", "decision_reason"}],
                       "feedback": {"rating", "comment"} | null,
                       "attachments": [{"id", "name", "media_type", "size", "sha256", "width", "height",
                                        "path"}]}]}

    Messages come parents first (creation order); ids are the messages' ids in this
    deployment, meaningful only inside the document. ``messages``: :func:`_saved_messages`.
    """
    saved = {m.pk: m for m in messages}
    leaf = conversation.active_leaf_id
    while leaf is not None and leaf not in saved:  # the leaf was the placeholder: end at what is saved
        leaf = Message.objects.filter(pk=leaf).values_list("parent_id", flat=True).first()
    return {
        "format": CONVERSATION_FORMAT, "version": EXPORT_VERSION, "id": str(conversation.pk),
        "title": conversation.title, "model": conversation.model, "created_at": _iso(conversation.created_at),
        "updated_at": _iso(conversation.updated_at), "temporary": conversation.temporary, "active_leaf": leaf,
        "messages": [_message_document(m) for m in messages],
    }


def _active(tree_document: dict[str, Any], messages: Sequence[Message]) -> list[Message]:
    """The active path's rows, root first, out of the already-read ``messages``."""
    by_id = {m.pk: m for m in messages}
    tree = Tree((m.pk, m.parent_id, m.role, m.position, tree_document["active_leaf"]) for m in messages)
    return [by_id[pk] for pk in tree.active]


def _fenced(text: str, info: str = "") -> str:
    """``text`` in a code fence longer than any run of backticks inside it."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{info}\n{text}\n{fence}"


def transcript_markdown(conversation: Conversation, path: Sequence[Message]) -> str:
    """The active path as a Markdown document: the title, then each message under a heading
    naming its role (and an answer's model), its text as written (it is Markdown already),
    reasoning and tool calls (arguments and result) in code fences."""
    lines = [f"# {conversation.title or 'Conversation'}", "",
             f"Created {_iso(conversation.created_at)}, last active {_iso(conversation.updated_at)}.", ""]
    for message in path:
        heading = message.role.capitalize() + (f" ({message.model})" if message.model else "")
        lines += [f"## {heading}", ""]
        if message.reasoning_content:
            lines += ["Reasoning:", "", _fenced(message.reasoning_content), ""]
        if message.content:
            lines += [message.content, ""]
        for call in message.tool_calls.all():
            lines += [f"Tool call `{call.name or '?'}` ({call.call_id}):", "", _fenced(call.arguments, "json"), ""]
            if call.finished_at is not None:
                lines += ["Result:", "", _fenced(json.dumps(call.result, ensure_ascii=False, indent=2), "json"), ""]
        feedback = feedback_of(message)
        if feedback is not None:
            lines += [f"Feedback: {feedback.get_rating_display()}" + (f": {feedback.comment}" if feedback.comment
                                                                    else ""), ""]
    return "\n".join(lines)


def _json(document: Any) -> bytes:
    return json.dumps(document, ensure_ascii=False, indent=2).encode("utf-8")


def _files(user: Any) -> Iterator[tuple[str, bytes | Attachment]]:
    """``(name in the archive, bytes)`` of every file, one conversation at a time (a few queries
    each); an attachment's file as its row (:func:`export_zip` copies it from the storage)."""
    ids = list(Conversation.objects.filter(owner_id=user.pk).order_by("created_at", "pk")
               .values_list("pk", "title"))
    feedback: list[dict[str, Any]] = []
    for pk, _title in ids:
        conversation = Conversation.objects.filter(pk=pk).first()
        if conversation is None:  # deleted while the export ran
            continue
        messages = _saved_messages(conversation)
        tree = conversation_tree(conversation, messages)
        path = _active(tree, messages)
        folder = f"conversations/{pk}/"
        yield folder + "conversation.json", _json(tree)
        yield folder + "openai.json", _json(messages_to_wire(path))
        yield folder + "transcript.md", transcript_markdown(conversation, path).encode("utf-8")
        for message in messages:
            for attachment in message.attachments.all():
                yield folder + _attachment_path(attachment), attachment
        feedback += [{"conversation": str(pk), **entry} for entry in feedback_export(conversation)]
    yield "feedback.json", _json(feedback)
    yield "settings.json", _json({"custom_instructions": instructions_get(user=user)})
    yield "notes.json", _json([{"id": n.pk, "text": n.text, "created_at": _iso(n.created_at)}
                               for n in Note.objects.filter(owner_id=user.pk).order_by("created_at")])
    yield "manifest.json", _json({
        "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "exported_at": _iso(timezone.now()),
        "user": user.get_username(),
        "conversations": [{"id": str(pk), "title": title, "path": f"conversations/{pk}/"} for pk, title in ids]})


class _Sink(io.RawIOBase):
    """A write-only stream that keeps what was written until :meth:`take` hands it out."""

    def __init__(self) -> None:
        super().__init__()
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


def export_zip(user: Any) -> Generator[bytes, None, None]:
    """``user``'s data as ZIP bytes, in pieces: one piece per file of the archive (module
    docstring; an attachment's in a piece per 64 KiB read), then the central directory. Sync and querying: advance it from a database
    thread (:func:`jxai_app.db.db_call`); each step runs its queries to the end, so steps may
    run in different threads."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in _files(user):
            if isinstance(data, Attachment):
                with archive.open(name, "w") as member:
                    for chunk in attachment_chunks(data):
                        member.write(chunk)
                        yield sink.take()
            else:
                archive.writestr(name, data)
            yield sink.take()
    yield sink.take()


def export_filename(user: Any) -> str:
    """``jxai-<username>-<UTC stamp>.zip`` (the username's unsafe characters as ``_``)."""
    return f"jxai-{_safe(user.get_username())}-{timezone.now().strftime('%Y%m%dT%H%M%SZ')}.zip"
