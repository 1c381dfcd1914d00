"""History repair: make an OpenAI wire-shape message list safe to send (docs/agent.md "History repair").

Providers refuse a history whose tool calls and tool replies do not pair up: every
``tool_calls`` entry of an assistant message must be answered by a ``tool`` message before
the next non-tool message, and every ``tool`` message must answer such a call. Histories
break that rule in ordinary ways — a turn stopped mid-round, a crash, a trimmed history, a
legacy session that kept a cut-off call — so the agent loop repairs the list before **each**
model request. Repair is a pure function: it never mutates its input, returns the very same
message objects when nothing needed changing and is idempotent.

What it does, in order:

1. **Wire projection.** Entries that are not objects, or have an unknown role, are dropped.
   A message carrying members the OpenAI wire does not define (``id``, ``timestamp``,
   ``model``, a call's ``result`` …) is replaced by a copy with only the wire members
   (restored transcripts carry such members). Assistant ``tool_calls``
   that are not a list, entries that are not objects, calls with an empty id (never
   sealed, never answerable — we also keep them off the wire) and a second call with an
   id already made in the same message (one call) are removed from the copy.
2. **Empty assistants** — no ``tool_calls`` and no text, reasoning-only included — are
   dropped: they are never sent.
3. **Pairing, per request**: a ``tool`` reply belongs to the nearest earlier
   assistant request that made its id and has not had it answered yet. Replies that are
   orphans, have no or an empty call id, duplicate an answered call, or answer an id no
   request made are dropped. A reply that does not sit in its request's run of
   ``tool`` messages is moved back there. A ``tool`` message answers exactly
   one call, its ``tool_call_id``.
4. **Seals.** Each call left unanswered gets a failed result:
   ``{"success":false,"error":<sentence>}``; the sentence says the response was cut off
   when the call's argument text is non-empty and does not parse, and otherwise that the
   session was reloaded or the history trimmed. After each request come its seals in call
   order, then the replies it owns in their original order.

Seal ids (``sealed_<callId>_<n>``, made unique) are reported in :class:`Seal` so a
host that persists seals can use them as message ids; a wire ``tool`` message has no id of
its own, so a seal on the wire is exactly ``{"role","tool_call_id","content"}`` (no
timestamp or meta — the wire has neither).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

__all__ = [
    "SEAL_CUT_OFF",
    "SEAL_RELOADED",
    "Dropped",
    "Moved",
    "Normalised",
    "RepairResult",
    "Seal",
    "is_empty_assistant",
    "is_seal_content",
    "repair_history",
    "seal_content",
]

SEAL_CUT_OFF: Final[str] = "This tool call was never completed — the response was cut off before it finished."
"""Seal sentence for a call whose argument text is non-empty and does not parse (docs/agent.md "History repair", seals)."""

SEAL_RELOADED: Final[str] = (
    "This tool call was never completed — the session was reloaded or the history was trimmed."
)
"""Seal sentence for every other unanswered call (docs/agent.md "History repair", seals)."""

DropReason: TypeAlias = Literal[
    "not_a_message", "unknown_role", "empty_assistant", "no_call_id", "empty_call_id",
    "orphan", "duplicate", "unknown_id",
]
NormaliseReason: TypeAlias = Literal[
    "foreign_fields", "bad_tool_calls", "empty_call_id", "duplicate_call_id",
]

_ROLES_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "system": ("role", "content", "name"),
    "developer": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "reasoning_content", "tool_calls", "name"),
    "tool": ("role", "tool_call_id", "content"),
}
_ROLE_KEYSETS: Final[dict[str, frozenset[str]]] = {role: frozenset(keys) for role, keys in _ROLES_KEYS.items()}
_CALL_KEYS: Final[frozenset[str]] = frozenset({"id", "type", "function"})
_FUNCTION_KEYS: Final[frozenset[str]] = frozenset({"name", "arguments"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Seal:
    """A failed result the repair inserted for an unanswered call (docs/agent.md "History repair", seals and seal ids)."""

    seal_id: str
    """``sealed_<callId>_<n>`` (n = position among the request's unanswered calls), with
    ``_1``, ``_2`` … appended until unique against every id in the transcript and every
    seal already minted."""
    call_id: str
    """The call the seal answers."""
    request_index: int
    """Index, in the input list, of the assistant message that made the call."""
    message: dict[str, Any]
    """The ``tool`` wire message inserted: ``{"role","tool_call_id","content"}``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Dropped:
    """An input entry left out of the repaired list (docs/agent.md "History repair")."""

    index: int
    """Its index in the input list."""
    reason: DropReason
    """Why: ``not_a_message``, ``unknown_role``, ``empty_assistant``, ``no_call_id``,
    ``empty_call_id``, ``orphan`` (only a later request made the id), ``duplicate`` (every
    earlier request making the id is already answered), ``unknown_id`` (no request made it)."""
    message: Any
    """The entry itself."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Moved:
    """A reply moved back directly after the request it answers (docs/agent.md "History repair", pairing)."""

    index: int
    """Its index in the input list."""
    call_id: str
    """The call it answers."""
    request_index: int
    """Index, in the input list, of the request it now follows."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Normalised:
    """An input message replaced by a wire-clean copy."""

    index: int
    """Its index in the input list."""
    reasons: tuple[NormaliseReason, ...]
    """What was cleaned: ``foreign_fields``, ``bad_tool_calls`` (not a list, a non-object
    entry, an empty list), ``empty_call_id``, ``duplicate_call_id``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RepairResult:
    """The repaired list and what changed; every report tuple is in transcript order."""

    messages: list[dict[str, Any]]
    """A new list, safe to send; unchanged entries are the input's own objects."""
    sealed: tuple[Seal, ...] = ()
    dropped: tuple[Dropped, ...] = ()
    moved: tuple[Moved, ...] = ()
    normalised: tuple[Normalised, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether anything was sealed, dropped, moved or normalised."""
        return bool(self.sealed or self.dropped or self.moved or self.normalised)


def seal_content(arguments: Any) -> str:
    """The content of a seal for a call with this argument text (docs/agent.md "History repair", seals).

    Returns:
        Compact JSON ``{"success":false,"error":<sentence>}`` (keys in that order, raw UTF-8):
        :data:`SEAL_CUT_OFF` when ``arguments`` is a non-empty string that does not parse
        as JSON, else :data:`SEAL_RELOADED` (empty text, or JSON that is not an object).
    """
    sentence = SEAL_RELOADED
    if isinstance(arguments, str) and arguments:
        try:
            json.loads(arguments)
        except ValueError:
            sentence = SEAL_CUT_OFF
    return json.dumps({"success": False, "error": sentence}, separators=(",", ":"), ensure_ascii=False)


_SEAL_CONTENTS: Final[frozenset[str]] = frozenset({seal_content("{"), seal_content("")})


def is_seal_content(text: Any) -> bool:
    """True only for the two exact seal contents, byte for byte."""
    return isinstance(text, str) and text in _SEAL_CONTENTS


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # the ABC check is slow; dicts are the rule


def _has_text(content: Any) -> bool:
    if isinstance(content, str):
        return content != ""
    return isinstance(content, list) and len(content) > 0  # content parts


def is_empty_assistant(message: Any) -> bool:
    """True for an assistant message with no tool call and no text (docs/agent.md "History repair", empty assistants).

    Reasoning-only, empty-text and ``tool_calls: []`` messages are empty; other roles never are.
    """
    if not _is_mapping(message) or message.get("role") != "assistant":
        return False
    calls = message.get("tool_calls")
    if isinstance(calls, list) and any(_is_mapping(c) and _call_id(c) for c in calls):
        return False
    return not _has_text(message.get("content"))


def _call_id(call: Mapping[str, Any]) -> str:
    value = call.get("id")
    return value if isinstance(value, str) else ""


def _clean_call(call: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """The call itself when it is wire-clean, else a clean copy; and whether it differed."""
    fn = call.get("function")
    fn = fn if isinstance(fn, Mapping) else {}
    name, args, cid = fn.get("name"), fn.get("arguments"), call.get("id")
    if (isinstance(cid, str) and isinstance(name, str) and isinstance(args, str) and call.get("type") == "function"
            and call.keys() == _CALL_KEYS and fn.keys() == _FUNCTION_KEYS):
        return call, False
    clean = {
        "id": cid if isinstance(cid, str) else "",
        "type": "function",
        "function": {"name": name if isinstance(name, str) else "",
                     "arguments": args if isinstance(args, str) else ""},
    }
    return clean, True


def _project(message: Any) -> tuple[dict[str, Any] | None, DropReason | None, tuple[NormaliseReason, ...]]:
    """The wire form of one entry: (message or None, drop reason, normalisation reasons)."""
    if not _is_mapping(message):
        return None, "not_a_message", ()
    role = message.get("role")
    keys = _ROLES_KEYS.get(role) if isinstance(role, str) else None
    if keys is None:
        return None, "unknown_role", ()
    reasons: list[NormaliseReason] = []
    if not message.keys() <= _ROLE_KEYSETS[role]:
        reasons.append("foreign_fields")
    calls_out: list[Mapping[str, Any]] | None = None
    if role == "assistant":
        if "reasoning_content" in message and not isinstance(message["reasoning_content"], str):
            reasons.append("foreign_fields")  # non-string reasoning is absent
        raw = message.get("tool_calls", None)
        if "tool_calls" in message:
            calls_out = []
            if not isinstance(raw, list) or not raw:
                reasons.append("bad_tool_calls")
                raw = raw if isinstance(raw, list) else []
            seen: set[str] = set()
            for call in raw:
                if not isinstance(call, Mapping):
                    reasons.append("bad_tool_calls")
                    continue
                clean, differs = _clean_call(call)
                cid = clean["id"]
                if not cid:
                    reasons.append("empty_call_id")
                    continue
                if cid in seen:
                    reasons.append("duplicate_call_id")
                    continue
                seen.add(cid)
                if differs:
                    reasons.append("foreign_fields")
                calls_out.append(clean)
    if not reasons:
        return _same(message), None, ()
    copy: dict[str, Any] = {}
    for key in keys:
        if key == "content" and role == "assistant" and key not in message:
            copy[key] = None
            continue
        if key not in message:
            continue
        if key == "tool_calls":
            if calls_out:
                copy[key] = calls_out
            continue
        if key == "reasoning_content" and not isinstance(message[key], str):
            continue
        copy[key] = message[key]
    return copy, None, tuple(dict.fromkeys(reasons))


def _same(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message itself when it is a dict (identity kept), else a dict copy."""
    return message if isinstance(message, dict) else dict(message)


@dataclass
class _Request:
    pos: int
    index: int
    calls: list[str]
    arguments: dict[str, str]
    answered: set[str] = field(default_factory=set)
    owned: list[int] = field(default_factory=list)


def _ids_in(messages: Sequence[Any], items: list[tuple[int, dict[str, Any]]], calls: set[str]) -> set[str]:
    """Every id a seal id must not collide with: call ids, reply ids, message ids."""
    taken = set(calls)
    for _, wire in items:
        if isinstance(wire.get("tool_call_id"), str):
            taken.add(wire["tool_call_id"])
    for raw in messages:  # ids the projection stripped (e.g. a store's message id) stay taken
        if isinstance(raw, Mapping) and isinstance(raw.get("id"), str):
            taken.add(raw["id"])
    return taken


def repair_history(messages: Sequence[Any]) -> RepairResult:
    """Repair an OpenAI wire-shape history so that it can be sent (see the module docstring).

    Args:
        messages: the history, oldest first: ``{"role": "system"|"user"|"assistant"|"tool", …}``
            dicts in OpenAI chat-completions shape. Anything else is tolerated and dropped.

    Returns:
        A :class:`RepairResult`; ``result.messages`` is a new list (the input is never mutated)
        whose tool calls and tool replies pair up, with no empty assistant message in it.
        Never raises for any list content.
    """
    dropped: list[Dropped] = []
    normalised: list[Normalised] = []
    items: list[tuple[int, dict[str, Any]]] = []  # (input index, wire message)
    for index, raw in enumerate(messages):
        wire, drop, reasons = _project(raw)
        if wire is None:
            dropped.append(Dropped(index=index, reason=drop or "not_a_message", message=raw))
            continue
        if is_empty_assistant(wire):
            dropped.append(Dropped(index=index, reason="empty_assistant", message=raw))
            continue
        if reasons:
            normalised.append(Normalised(index=index, reasons=reasons))
        items.append((index, wire))

    made_anywhere = {call["id"] for _, wire in items for call in wire.get("tool_calls") or ()}
    requests: list[_Request] = []
    moved: list[Moved] = []
    last_other = -1  # position of the latest non-tool message
    for pos, (index, wire) in enumerate(items):
        role = wire["role"]
        if role != "tool":
            last_other = pos
            if role == "assistant" and wire.get("tool_calls"):
                calls = [c["id"] for c in wire["tool_calls"]]
                args = {c["id"]: c["function"]["arguments"] for c in wire["tool_calls"]}
                requests.append(_Request(pos=pos, index=index, calls=calls, arguments=args))
            continue
        cid = wire.get("tool_call_id")
        reason: DropReason | None = None
        owner: _Request | None = None
        if not isinstance(cid, str):
            reason = "no_call_id"
        elif not cid:
            reason = "empty_call_id"
        else:
            for req in reversed(requests):
                if cid in req.calls and cid not in req.answered:
                    owner = req
                    break
            if owner is None:
                if any(cid in req.calls for req in requests):
                    reason = "duplicate"
                elif cid in made_anywhere:
                    reason = "orphan"
                else:
                    reason = "unknown_id"
        if owner is None:
            dropped.append(Dropped(index=index, reason=reason or "unknown_id", message=messages[index]))
            continue
        owner.answered.add(cid)  # type: ignore[arg-type]
        owner.owned.append(pos)
        if last_other != owner.pos:
            moved.append(Moved(index=index, call_id=cid, request_index=owner.index))  # type: ignore[arg-type]

    sealed: list[Seal] = []
    taken: set[str] | None = None
    out: list[dict[str, Any]] = []
    by_pos = {req.pos: req for req in requests}
    for pos, (_, wire) in enumerate(items):
        if wire["role"] == "tool":
            continue  # emitted after its request
        out.append(wire)
        request = by_pos.get(pos)
        if request is None:
            continue
        unanswered = [cid for cid in request.calls if cid not in request.answered]
        if unanswered and taken is None:
            taken = _ids_in(messages, items, made_anywhere)
        for n, cid in enumerate(unanswered):
            assert taken is not None
            seal_id = base = f"sealed_{cid}_{n}"
            k = 0
            while seal_id in taken:
                k += 1
                seal_id = f"{base}_{k}"
            taken.add(seal_id)
            message = {"role": "tool", "tool_call_id": cid, "content": seal_content(request.arguments[cid])}
            sealed.append(Seal(seal_id=seal_id, call_id=cid, request_index=request.index, message=message))
            out.append(message)
        out.extend(items[p][1] for p in request.owned)

    dropped.sort(key=lambda d: d.index)
    return RepairResult(messages=out, sealed=tuple(sealed), dropped=tuple(dropped),
                        moved=tuple(moved), normalised=tuple(normalised))
