"""Import of conversations: a jxai export and ChatGPT's ``conversations.json`` (docs/data.md "Import").

A file is read in two steps. First the whole file is checked and parsed, and refused whole
(nothing saved) when it is over ``JXAI_IMPORT_MAX_BYTES``, a ZIP that unpacks to more, not
UTF-8 JSON, nested deeper than :data:`MAX_DEPTH`, or neither of the two sources. Then each
conversation is turned into a :class:`Draft` and saved in a transaction of its own; one that
does not make a sound tree (a parent missing or a cycle, a role jxai has not, a text over
:data:`MAX_TEXT_CHARS`, more than :data:`MAX_MESSAGES` messages, a wrong type) is skipped
whole and named in the report with the reason.

Sources (:func:`read_upload`):

- a jxai export ZIP (its ``conversations/*/conversation.json``, and the attachment files
  their messages name), or one ``conversation.json`` (its attachments cannot come: no files);
- ChatGPT's ``conversations.json`` (a list of conversations with a ``mapping`` tree), or
  ChatGPT's export ZIP holding it. Its nodes without a message (the root), hidden system
  messages, tool traffic (code the model ran, browsing, their outputs) and empty messages are
  left out; a kept message's parent is its nearest kept ancestor, so branches survive.

A saved conversation's attachments are restored after its transaction, each through the
checks of an upload (:func:`~jxai_app.store.attachments.attachment_upload`: name, type
sniffing, pixel limit, file cap, the user's storage quota) and the per-message cap; one that
fails is left out and listed in the report (``skipped_attachments``), its message kept.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone as dt_timezone
from typing import Any, Final

from django.db import transaction
from django.utils import timezone

from jxai_app import conf
from jxai_app.core.errors import ProblemError
from jxai_app.core.problems import problem_error
from jxai_app.models import (
    Attachment, Conversation, FeedbackRating, Message, MessageFeedback, MessageRole, ToolCall,
)
from jxai_app.store.attachments import attachment_upload
from jxai_app.store.common import storable
from jxai_app.store.export import CONVERSATION_FORMAT, EXPORT_VERSION

__all__ = ["Draft", "DraftMessage", "ImportReport", "MAX_DEPTH", "MAX_MESSAGES", "MAX_TEXT_CHARS", "data_import",
           "read_upload"]

MAX_DEPTH: Final[int] = 32
"""Deepest nesting of arrays and objects a file may have (both sources need fewer than 10)."""
MAX_TEXT_CHARS: Final[int] = 1_000_000
"""Longest text of one message, call argument or result, in characters."""
MAX_MESSAGES: Final[int] = 20_000
"""Most messages of one conversation."""
MAX_ZIP_MEMBERS: Final[int] = 100_000
"""Most files of an imported ZIP."""
TITLE_CHARS: Final[int] = Conversation._meta.get_field("title").max_length or 200
_ROLES: Final[frozenset[str]] = frozenset(MessageRole.values)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


class _Refused(Exception):
    """One conversation cannot be imported; the message says why."""


@dataclass(slots=True)
class DraftMessage:
    """One message to save; ``key`` and ``parent`` are the source's own ids."""

    key: Any
    parent: Any
    role: str
    content: str
    created_at: datetime
    reasoning_content: str | None = None
    tool_call_id: str = ""
    model: str = ""
    stop_reason: str = ""
    stopped: bool = False
    usage: Any = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    feedback: dict[str, str] | None = None
    attachments: list[Any] = field(default_factory=list)
    """The document's attachment entries as they are (checked when restored)."""


@dataclass(slots=True)
class Draft:
    """One conversation to save: messages parents first, ``active`` the key of the active leaf."""

    title: str
    model: str
    created_at: datetime
    updated_at: datetime
    messages: list[DraftMessage]
    active: Any
    temporary: bool = False  # a jxai temporary chat stays one (docs/data.md "Import")


@dataclass(slots=True)
class ImportReport:
    """What an import did: ``imported`` ``[{"id", "title", "messages", "attachments"}]``,
    ``skipped`` ``[{"index", "title", "reason"}]`` (``index``: 0-based place in the file) and
    ``skipped_attachments`` ``[{"conversation": <new id>, "message": <the source's message id>,
    "name", "reason"}]``."""

    imported: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    skipped_attachments: list[dict[str, Any]] = field(default_factory=list)


def _too_large(limit: int) -> ProblemError:
    return problem_error("payload-too-large", f"An import file may be at most {limit} bytes (unpacked); "
                         "nothing was imported.")


def _unreadable(detail: str) -> ProblemError:
    return problem_error("invalid-request", f"{detail} Nothing was imported.")


def _depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text ``data`` (strings skipped)."""
    deepest = depth = 0
    for bracket in _BRACKETS.findall(_STRING.sub(b'""', data)):
        if bracket in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _parse_json(data: bytes, what: str) -> Any:
    """``data`` as JSON after the depth check.

    Raises:
        ProblemError: ``invalid-request`` (not UTF-8 JSON, or nested deeper than :data:`MAX_DEPTH`).
    """
    if _depth(data) > MAX_DEPTH:
        raise _unreadable(f"{what} is nested more than {MAX_DEPTH} levels deep.")
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _unreadable(f"{what} is not valid UTF-8 JSON.") from None


def _zip_documents(data: bytes, limit: int) -> list[tuple[str, Any]]:
    """``[(member name, parsed document)]`` of the ZIP's conversation files."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError):
        raise _unreadable("The file is not a readable ZIP archive.") from None
    if len(members) > MAX_ZIP_MEMBERS or sum(m.file_size for m in members) > limit:
        raise _too_large(limit)
    wanted = [m for m in members if m.filename.endswith("/conversation.json") or m.filename == "conversations.json"
              or m.filename.endswith("/conversations.json")]
    if not wanted:
        raise _unreadable("The ZIP archive holds no conversation.json (jxai) or conversations.json (ChatGPT).")
    try:
        return [(m.filename, _parse_json(archive.read(m), m.filename)) for m in wanted]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError):
        raise _unreadable("The ZIP archive is damaged.") from None


def read_upload(data: bytes) -> list[tuple[str, Any, str | None]]:
    """Check and parse an uploaded file (module docstring): ``[(source, conversation document,
    folder)]`` with ``source`` ``"jxai"`` or ``"chatgpt"``, in file order; ``folder`` is the
    ZIP folder of a jxai document (``conversations/<id>/``, where its attachments' paths
    start), else ``None``.

    Raises:
        ProblemError: ``payload-too-large`` over ``JXAI_IMPORT_MAX_BYTES`` (file or unpacked
            ZIP); ``invalid-request`` for a file that cannot be read or is neither source.
    """
    limit = conf.import_max_bytes()
    if len(data) > limit:
        raise _too_large(limit)
    zipped = data[:4] == b"PK\x03\x04"
    documents = _zip_documents(data, limit) if zipped else [("the file", _parse_json(data, "The file"))]
    out: list[tuple[str, Any, str | None]] = []
    for name, document in documents:
        if isinstance(document, dict) and document.get("format") == CONVERSATION_FORMAT:
            out.append(("jxai", document, name.removesuffix("conversation.json") if zipped else None))
        elif isinstance(document, list) and all(isinstance(c, dict) and "mapping" in c for c in document):
            out += [("chatgpt", c, None) for c in document]
        else:
            raise _unreadable("This is neither a jxai export nor ChatGPT's conversations.json.")
    return out


def _text(value: Any, what: str, *, optional: bool = False) -> str:
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise _Refused(f"{what} is not text")
    if len(value) > MAX_TEXT_CHARS:
        raise _Refused(f"{what} is longer than {MAX_TEXT_CHARS} characters")
    return storable(value)


def _key(value: Any, what: str) -> Any:
    """A message id (or a reference to one) as the source gives it: text, a whole number or
    ``None``; anything else is a value of the wrong type (docs/data.md "Import")."""
    if value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _Refused(f"{what} is neither text nor a whole number")


def _storable_json(value: Any) -> Any:
    """A JSON value with every string in it (keys too) made storable (:func:`storable`:
    PostgreSQL's ``jsonb`` refuses ``\\u0000``). Depth is bounded by the file's check."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, list):
        return [_storable_json(v) for v in value]
    if isinstance(value, dict):
        return {storable(str(k)): _storable_json(v) for k, v in value.items()}
    return value


def _instant(value: Any, fallback: datetime) -> datetime:
    """An ISO 8601 string or Unix seconds as an aware datetime; ``fallback`` for ``None``."""
    if value is None:
        return fallback
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return datetime.fromtimestamp(float(value), tz=dt_timezone.utc)
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt_timezone.utc)
    except (ValueError, OverflowError, OSError):
        pass
    raise _Refused(f"the time {str(value)[:40]!r} cannot be read")


def _ordered(messages: list[DraftMessage]) -> list[DraftMessage]:
    """``messages`` parents first (creation order among siblings).

    Raises:
        _Refused: a parent that is not in the conversation, a repeated id, or a cycle.
    """
    keys = {m.key for m in messages}
    if len(keys) != len(messages):
        raise _Refused("two messages have the same id")
    children: dict[Any, list[DraftMessage]] = {}
    for message in messages:
        if message.parent is not None and message.parent not in keys:
            raise _Refused(f"message {str(message.key)[:40]!r} follows a message that is not in the conversation")
        children.setdefault(message.parent, []).append(message)
    out: list[DraftMessage] = []
    stack = list(reversed(sorted(children.get(None, []), key=lambda m: m.created_at)))
    while stack:
        message = stack.pop()
        out.append(message)
        stack += reversed(sorted(children.get(message.key, []), key=lambda m: m.created_at))
    if len(out) != len(messages):
        raise _Refused("its messages form a cycle")
    return out


def _check_size(messages: list[Any]) -> None:
    if len(messages) > MAX_MESSAGES:
        raise _Refused(f"it has more than {MAX_MESSAGES} messages")


_DECIDED: Final[frozenset[str]] = frozenset({"approved", "denied", "expired"})


def _moment(value: Any) -> datetime | None:
    return None if value is None else _instant(value, timezone.now())


def _jxai_call(call: Any) -> dict[str, Any]:
    """A tool call of a ``conversation.json`` as :class:`~jxai_app.models.ToolCall` fields. A call
    still waiting for approval in the source is imported as one that needed none (nothing waits here)."""
    if not isinstance(call, dict):
        raise _Refused("a tool call is not an object")
    result = call.get("result")
    if len(json.dumps(result)) > MAX_TEXT_CHARS:
        raise _Refused(f"a tool result is longer than {MAX_TEXT_CHARS} characters")
    success, state = call.get("success"), call.get("approval_state")
    return {"call_id": _text(call.get("call_id"), "a tool call's id")[:200],
            "name": _text(call.get("name"), "a tool name", optional=True)[:200],
            "arguments": _text(call.get("arguments"), "a tool call's arguments", optional=True),
            "result": _storable_json(result),
            "success": success if isinstance(success, bool) else None,
            "started_at": _moment(call.get("started_at")), "finished_at": _moment(call.get("finished_at")),
            "approval_state": state if isinstance(state, str) and state in _DECIDED else "", "decided_at": _moment(call.get("decided_at")),
            "decision_reason": _text(call.get("decision_reason"), "a decision's reason", optional=True)}


def _jxai_draft(document: Mapping[str, Any]) -> Draft:
    """A ``conversation.json`` (docs/data.md "Export format") as a :class:`Draft`."""
    version = document.get("version")
    if not isinstance(version, int) or version > EXPORT_VERSION:
        raise _Refused(f"export format version {version!r} is newer than this server reads ({EXPORT_VERSION})")
    rows = document.get("messages")
    if not isinstance(rows, list):
        raise _Refused("'messages' is not a list")
    _check_size(rows)
    created = _instant(document.get("created_at"), timezone.now())
    messages = []
    for row in rows:
        if not isinstance(row, dict):
            raise _Refused("a message is not an object")
        role = row.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise _Refused(f"role {str(role)[:20]!r} is not one jxai knows")
        reasoning = row.get("reasoning_content")
        calls = row.get("tool_calls") or []
        attachments = row.get("attachments") or []
        feedback = row.get("feedback")
        if not isinstance(calls, list):
            raise _Refused("'tool_calls' is not a list")
        if not isinstance(attachments, list):
            raise _Refused("'attachments' is not a list")
        if feedback is not None and (not isinstance(feedback, dict) or feedback.get("rating") not in FeedbackRating.values):
            raise _Refused("a feedback is neither up nor down")
        messages.append(DraftMessage(
            key=_key(row.get("id"), "a message's id"), parent=_key(row.get("parent"), "a message's parent"), role=role, content=_text(row.get("content"), "a message",
                                                                                  optional=True),
            created_at=_instant(row.get("created_at"), created),
            reasoning_content=None if reasoning is None else _text(reasoning, "a message's reasoning"),
            tool_call_id=_text(row.get("tool_call_id"), "a tool reply's call id", optional=True),
            model=_text(row.get("model"), "a model name", optional=True)[:100],
            stop_reason=_text(row.get("stop_reason"), "a stop reason", optional=True)[:32],
            stopped=row.get("stopped") is True, usage=_storable_json(row["usage"]) if isinstance(row.get("usage"), dict) else None,
            calls=[_jxai_call(c) for c in calls], attachments=attachments,
            feedback=None if feedback is None else {"rating": feedback["rating"],
                                                    "comment": _text(feedback.get("comment"), "a feedback comment",
                                                                     optional=True)}))
    return Draft(title=_text(document.get("title"), "the title", optional=True)[:TITLE_CHARS],
                 model=_text(document.get("model"), "the model", optional=True)[:100], created_at=created,
                 updated_at=_instant(document.get("updated_at"), created), messages=_ordered(messages),
                 active=_key(document.get("active_leaf"), "'active_leaf'"), temporary=document.get("temporary") is True)


def _chatgpt_text(message: Mapping[str, Any]) -> str | None:
    """The readable text of a ChatGPT message, or ``None`` for one that is not kept."""
    author = message.get("author") or {}
    role = author.get("role") if isinstance(author, dict) else None
    metadata = message.get("metadata") or {}
    if role not in ("user", "assistant", "system") or message.get("recipient", "all") != "all":
        return None  # tool traffic: code the model ran, browsing, their outputs
    if isinstance(metadata, dict) and metadata.get("is_visually_hidden_from_conversation"):
        return None
    content = message.get("content") or {}
    if not isinstance(content, dict) or content.get("content_type") not in ("text", "multimodal_text"):
        return None
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise _Refused("a message's 'parts' is not a list")
    texts = [_text(p, "a message") if isinstance(p, str) else "[attachment not imported]" for p in parts]
    text = "\n".join(t for t in texts if t)
    return text or None


def _chatgpt_draft(document: Mapping[str, Any]) -> Draft:
    """One conversation of ChatGPT's ``conversations.json`` as a :class:`Draft` (module docstring)."""
    mapping = document.get("mapping")
    if not isinstance(mapping, dict):
        raise _Refused("'mapping' is not an object")
    _check_size(list(mapping))
    created = _instant(document.get("create_time"), timezone.now())
    nodes = {key: node for key, node in mapping.items() if isinstance(node, dict)}
    if len(nodes) != len(mapping):
        raise _Refused("a node of 'mapping' is not an object")
    kept: dict[str, DraftMessage] = {}
    for key, node in nodes.items():
        message = node.get("message")
        text = _chatgpt_text(message) if isinstance(message, dict) else None
        if text is None or not isinstance(message, dict):
            continue
        metadata = message.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        role = message["author"]["role"]
        kept[key] = DraftMessage(key=key, parent=None, role=role, content=text,
                                 created_at=_instant(message.get("create_time"), created),
                                 model=str(metadata.get("model_slug") or "")[:100] if role == "assistant" else "")

    def kept_ancestor(key: Any) -> Any:
        seen = 0
        parent = _key(nodes.get(key, {}).get("parent"), "a node's parent")
        while parent is not None and parent not in kept:
            seen += 1
            if parent not in nodes or seen > len(nodes):
                raise _Refused("its 'mapping' is not a tree")
            parent = _key(nodes[parent].get("parent"), "a node's parent")
        return parent

    for key, message in kept.items():
        message.parent = kept_ancestor(key)
    active = _key(document.get("current_node"), "'current_node'")
    if active is not None and active not in kept:
        active = kept_ancestor(active) if active in nodes else None
    return Draft(title=_text(document.get("title"), "the title", optional=True)[:TITLE_CHARS],
                 model=str(document.get("default_model_slug") or "")[:100], created_at=created,
                 updated_at=_instant(document.get("update_time"), created), messages=_ordered(list(kept.values())),
                 active=active)


def _save(user: Any, draft: Draft) -> tuple[Conversation, list[Message]]:
    """Save one draft (call inside a transaction): the conversation, its messages in tree order
    with their source times, their calls and feedback, the active leaf (a handful of queries).
    Returns the conversation and the message rows in ``draft.messages`` order."""
    conversation = Conversation.objects.create(owner=user, title=draft.title, model=draft.model,
                                               temporary=draft.temporary)
    rows = Message.objects.bulk_create([
        Message(conversation=conversation, position=i, role=m.role, content=m.content,
                reasoning_content=m.reasoning_content, tool_call_id=m.tool_call_id, usage=m.usage, model=m.model,
                stop_reason=m.stop_reason, stopped=m.stopped)
        for i, m in enumerate(draft.messages)], batch_size=500)
    pk_of = {m.key: row.pk for m, row in zip(draft.messages, rows)}
    for m, row in zip(draft.messages, rows):
        row.parent_id = pk_of.get(m.parent)
        row.created_at = m.created_at  # updated_at stays the import's time: the row's last write
    Message.objects.bulk_update(rows, ["parent", "created_at"], batch_size=500)
    ToolCall.objects.bulk_create([
        ToolCall(message=row, position=i, **call)
        for m, row in zip(draft.messages, rows) for i, call in enumerate(m.calls)], batch_size=500)
    MessageFeedback.objects.bulk_create([
        MessageFeedback(message=row, rating=m.feedback["rating"], comment=m.feedback["comment"])
        for m, row in zip(draft.messages, rows) if m.feedback is not None and m.role == MessageRole.ASSISTANT])
    leaf = pk_of.get(draft.active, rows[-1].pk if rows else None)
    Conversation.objects.filter(pk=conversation.pk).update(
        active_leaf_id=leaf, created_at=draft.created_at, updated_at=draft.updated_at)
    return conversation, rows


def _attachment_file(archive: zipfile.ZipFile | None, folder: str | None, entry: Any, max_bytes: int) -> bytes:
    """The bytes of one attachment entry of a ``conversation.json`` (``path`` under its folder).

    Raises:
        _Refused: the entry is not an object naming a file of the archive, or the file is
            larger than ``max_bytes`` (not read then).
    """
    path = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(path, str):
        raise _Refused("the entry names no file ('path')")
    if archive is None or folder is None:
        raise _Refused("only a ZIP export carries the files")
    try:
        member = archive.getinfo(folder + path)
    except KeyError:
        raise _Refused(f"{path[:80]!r} is not in the archive") from None
    if member.file_size > max_bytes:
        raise _Refused(f"a file may be at most {max_bytes} bytes")
    try:
        return archive.read(member)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError):
        raise _Refused(f"{path[:80]!r} is damaged in the archive") from None


def _restore_attachments(user: Any, quota: int | None, conversation: Conversation, draft: Draft,
                         rows: list[Message], files: tuple[zipfile.ZipFile | None, str | None],
                         report: ImportReport) -> int:
    """Upload and claim the attachments of a saved draft's messages (module docstring), each
    in a transaction of its own; one refused goes to ``report.skipped_attachments``. Returns
    how many were restored."""
    limits = conf.get_attachment_limits()
    restored = 0
    for message, row in zip(draft.messages, rows):
        position = 0
        for entry in message.attachments:
            name = entry.get("name") if isinstance(entry, dict) else None
            try:
                if position >= limits.per_message:
                    raise _Refused(f"a message may carry at most {limits.per_message} attachments")
                data = _attachment_file(*files, entry, limits.max_bytes)
                with transaction.atomic():
                    attachment = attachment_upload(user=user, name=name, data=data, quota=quota)
                    Attachment.objects.filter(pk=attachment.pk).update(message=row, position=position)
            except (_Refused, ProblemError) as refused:
                report.skipped_attachments.append({"conversation": str(conversation.pk), "message": message.key,
                                                   "name": name if isinstance(name, str) else "",
                                                   "reason": str(refused)})
                continue
            position += 1
        restored += position
    return restored


def _drafts(documents: Iterable[tuple[str, Any, str | None]]) -> Iterator[tuple[int, str, Draft | str, str | None]]:
    """``(index, title, draft or the reason it was refused, folder)`` per document."""
    for index, (source, document, folder) in enumerate(documents):
        title = document.get("title") if isinstance(document.get("title"), str) else ""
        try:
            draft: Draft | str = _jxai_draft(document) if source == "jxai" else _chatgpt_draft(document)
        except _Refused as refused:
            draft = str(refused)
        yield index, title[:TITLE_CHARS], draft, folder


def data_import(*, user: Any, data: bytes, quota: int | None) -> ImportReport:
    """Import the conversations of an uploaded file (module docstring) as ``user``'s, each in a
    transaction of its own, with their branches, titles and original times, then their
    attachments (docs/data.md "Import").

    Args:
        user: the importing user (the owner of everything saved).
        data: the uploaded file's bytes.
        quota: the bytes of attachments ``user`` may keep
            (:func:`jxai_app.policy.storage.storage_quota`), ``None`` for no limit.

    Returns:
        The report; ``skipped`` names each conversation left out and why.

    Raises:
        ProblemError: the file is refused whole (:func:`read_upload`), or ``invalid-request``
            with the report's ``skipped`` when not one conversation could be imported.
    """
    report = ImportReport()
    documents = read_upload(data)
    archive = zipfile.ZipFile(io.BytesIO(data)) if any(folder is not None for _, _, folder in documents) else None
    for index, title, draft, folder in _drafts(documents):
        if isinstance(draft, str):
            report.skipped.append({"index": index, "title": title, "reason": draft})
            continue
        with transaction.atomic():
            conversation, rows = _save(user, draft)
        restored = _restore_attachments(user, quota, conversation, draft, rows, (archive, folder), report)
        report.imported.append({"id": str(conversation.pk), "title": conversation.title,
                                "messages": len(draft.messages), "attachments": restored})
    if not report.imported:
        raise problem_error("invalid-request", "No conversation in the file could be imported; nothing was saved.",
                            skipped=report.skipped)
    return report
