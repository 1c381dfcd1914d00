"""The normalised stream events: jxai's wire contract (docs/streaming.md "Events").

Every streaming client, the agent loop, the websocket consumer and the SSE endpoint speak
these eight events. Each is a frozen, keyword-only dataclass with a literal ``type``
discriminator, snake_case attributes, and a ``to_dict()`` giving the camelCase wire form with
members in the contract's order. :func:`event_from_dict` is the inverse and refuses anything
unknown or malformed with :class:`~jxai_app.core.errors.InvalidEventError`.

Wire form (compact JSON, ``ensure_ascii=False``; see :func:`encode_event`)::

    {"type":"delta","content":"Hel"}
    {"type":"reasoning","content":"thinking…"}
    {"type":"tool_call_start","id":"call_1","name":"get_weather"}
    {"type":"tool_call_delta","id":"call_1","args":"{\\"city\\":"}
    {"type":"tool_call_end","id":"call_1"}
    {"type":"usage","inputTokens":12,"outputTokens":7[,"cachedInputTokens":0][,"reasoningTokens":3]}
    {"type":"done","stopReason":"stop"|"tool_calls"|"length"|"content_filter"|"cancelled"}
    {"type":"error","message":"…"[,"code":"429"][,"problem":{RFC 9457 document}]}

A client that knows only the six core types can ignore ``reasoning`` and ``usage``.
Every stream ends with exactly one ``done`` or one ``error``; cancellation is ``done``
with ``stopReason: "cancelled"``, never an ``error``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Mapping, TypeAlias, get_args

from jxai_app.core.errors import InvalidEventError

StopReason: TypeAlias = Literal["stop", "tool_calls", "length", "content_filter", "cancelled", "approval_required"]
"""``approval_required`` ends a jxai ``/ai/chat`` conversation stream whose turn waits for a
person's approval (docs/api.md "Conversation mode"); providers never send it."""
STOP_REASONS: Final[frozenset[str]] = frozenset(get_args(StopReason))


@dataclass(frozen=True, kw_only=True, slots=True)
class DeltaEvent:
    """A fragment of the answer text."""

    content: str
    """The text fragment, never empty when produced by a client."""
    type: Literal["delta"] = field(default="delta", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"delta","content":…}``."""
        return {"type": self.type, "content": self.content}


@dataclass(frozen=True, kw_only=True, slots=True)
class ReasoningEvent:
    """A fragment of the model's thinking text, shown apart from the answer (docs/streaming.md "Events")."""

    content: str
    """The reasoning fragment; replayed later as ``reasoning_content`` (docs/store.md
    "The OpenAI wire export")."""
    type: Literal["reasoning"] = field(default="reasoning", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"reasoning","content":…}``."""
        return {"type": self.type, "content": self.content}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallStartEvent:
    """A tool call opens: its id and function name are known."""

    id: str
    """The call id (provider's, or ``call_<index>_<random>`` when it sent none)."""
    name: str
    """The function name; ``""`` for a call that ended without one."""
    type: Literal["tool_call_start"] = field(default="tool_call_start", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"tool_call_start","id":…,"name":…}``."""
        return {"type": self.type, "id": self.id, "name": self.name}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallDeltaEvent:
    """A raw fragment of a tool call's argument JSON text."""

    id: str
    """The id of the call this fragment belongs to."""
    args: str
    """The fragment, as sent; concatenating all fragments gives the argument JSON."""
    type: Literal["tool_call_delta"] = field(default="tool_call_delta", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"tool_call_delta","id":…,"args":…}``."""
        return {"type": self.type, "id": self.id, "args": self.args}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallEndEvent:
    """A tool call is complete; its arguments will not grow any more."""

    id: str
    """The id of the call that closed."""
    type: Literal["tool_call_end"] = field(default="tool_call_end", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"tool_call_end","id":…}``."""
        return {"type": self.type, "id": self.id}


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageEvent:
    """Token counts for the request, sent at most once, right before ``done`` (docs/streaming.md "Events",
    "Usage")."""

    input_tokens: int
    """Prompt tokens (OpenAI ``prompt_tokens``, Anthropic ``input_tokens``)."""
    output_tokens: int
    """Completion tokens (``completion_tokens`` / ``output_tokens``), 0 when not said."""
    cached_input_tokens: int | None = None
    """Prompt tokens served from the provider's cache; ``None`` when the provider did not say."""
    reasoning_tokens: int | None = None
    """Completion tokens spent thinking; ``None`` when the provider did not say."""
    type: Literal["usage"] = field(default="usage", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form; the two optional counts appear only when known."""
        out: dict[str, Any] = {
            "type": self.type,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
        }
        if self.cached_input_tokens is not None:
            out["cachedInputTokens"] = self.cached_input_tokens
        if self.reasoning_tokens is not None:
            out["reasoningTokens"] = self.reasoning_tokens
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class DoneEvent:
    """The stream ended normally, or was cancelled (``stop_reason="cancelled"``)."""

    stop_reason: StopReason
    """One of ``stop``, ``tool_calls``, ``length``, ``content_filter``, ``cancelled``."""
    type: Literal["done"] = field(default="done", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"done","stopReason":…}``."""
        return {"type": self.type, "stopReason": self.stop_reason}


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorEvent:
    """The stream failed; nothing follows it (docs/streaming.md "Events", "Errors and their
    codes")."""

    message: str
    """A human sentence; provider text only, never a stack trace or key."""
    code: str | None = None
    """A machine code: the HTTP status as text, the provider's code, or one of the clients'
    own codes (``incomplete_stream``, ``invalid_stream``, ``timeout``, …)."""
    problem: Mapping[str, Any] | None = None
    """An RFC 9457 problem document (``{type, title, status, detail, …}``)."""
    type: Literal["error"] = field(default="error", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form; ``code`` and ``problem`` appear only when set."""
        out: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.code is not None:
            out["code"] = self.code
        if self.problem is not None:
            out["problem"] = dict(self.problem)
        return out


StreamEvent: TypeAlias = (
    DeltaEvent
    | ReasoningEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolCallEndEvent
    | UsageEvent
    | DoneEvent
    | ErrorEvent
)
"""Any one of the eight normalised events."""

TerminalEvent: TypeAlias = DoneEvent | ErrorEvent
"""The events that end a stream."""

EVENT_TYPES: Final[tuple[str, ...]] = (
    "delta",
    "reasoning",
    "tool_call_start",
    "tool_call_delta",
    "tool_call_end",
    "usage",
    "done",
    "error",
)
"""The wire ``type`` values, in the order of the table in docs/streaming.md "Events"."""


def _text(data: Mapping[str, Any], key: str, *, allow_empty: bool = True) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise InvalidEventError(f"{data.get('type')} event needs a string '{key}'")
    if not allow_empty and not value:
        raise InvalidEventError(f"{data.get('type')} event needs a non-empty '{key}'")
    return value


def _count(data: Mapping[str, Any], key: str, *, optional: bool) -> int | None:
    value = data.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidEventError(f"usage event needs a non-negative integer '{key}'")
    return value


_ALLOWED_KEYS: Final[dict[str, frozenset[str]]] = {
    "delta": frozenset({"type", "content"}),
    "reasoning": frozenset({"type", "content"}),
    "tool_call_start": frozenset({"type", "id", "name"}),
    "tool_call_delta": frozenset({"type", "id", "args"}),
    "tool_call_end": frozenset({"type", "id"}),
    "usage": frozenset({"type", "inputTokens", "outputTokens", "cachedInputTokens", "reasoningTokens"}),
    "done": frozenset({"type", "stopReason"}),
    "error": frozenset({"type", "message", "code", "problem"}),
}


def event_from_dict(data: Any) -> StreamEvent:
    """Build an event from its wire form (the inverse of ``to_dict()``).

    Args:
        data: a decoded JSON object such as ``{"type": "delta", "content": "hi"}``.

    Returns:
        The matching frozen event.

    Raises:
        InvalidEventError: ``data`` is not an object, its ``type`` is unknown, a member is
            missing or of the wrong type, or it carries members the type does not define.
    """
    if not isinstance(data, Mapping):
        raise InvalidEventError(f"an event must be a JSON object, not {type(data).__name__}")
    kind = data.get("type")
    if not isinstance(kind, str) or kind not in _ALLOWED_KEYS:
        raise InvalidEventError(f"unknown event type {kind!r}")
    extra = set(data) - _ALLOWED_KEYS[kind]
    if extra:
        raise InvalidEventError(f"{kind} event has unknown members: {', '.join(sorted(extra))}")
    if kind == "delta":
        return DeltaEvent(content=_text(data, "content"))
    if kind == "reasoning":
        return ReasoningEvent(content=_text(data, "content"))
    if kind == "tool_call_start":
        return ToolCallStartEvent(id=_text(data, "id", allow_empty=False), name=_text(data, "name"))
    if kind == "tool_call_delta":
        return ToolCallDeltaEvent(id=_text(data, "id", allow_empty=False), args=_text(data, "args"))
    if kind == "tool_call_end":
        return ToolCallEndEvent(id=_text(data, "id", allow_empty=False))
    if kind == "usage":
        return UsageEvent(
            input_tokens=_count(data, "inputTokens", optional=False) or 0,
            output_tokens=_count(data, "outputTokens", optional=False) or 0,
            cached_input_tokens=_count(data, "cachedInputTokens", optional=True),
            reasoning_tokens=_count(data, "reasoningTokens", optional=True),
        )
    if kind == "done":
        reason = data.get("stopReason")
        if reason not in STOP_REASONS:
            raise InvalidEventError(f"done event has unknown stopReason {reason!r}")
        return DoneEvent(stop_reason=reason)
    # error
    code = data.get("code")
    if code is not None and not isinstance(code, (str, int)):
        raise InvalidEventError("error event 'code' must be a string")
    problem = data.get("problem")
    if problem is not None and not isinstance(problem, Mapping):
        raise InvalidEventError("error event 'problem' must be an object")
    return ErrorEvent(
        message=_text(data, "message"),
        code=None if code is None else str(code),
        problem=None if problem is None else dict(problem),
    )


def encode_event(event: StreamEvent) -> str:
    """Serialise an event as compact JSON: one line, raw UTF-8 (docs/streaming.md "Events")."""
    return json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False)


def is_terminal(event: StreamEvent) -> bool:
    """True for ``done`` and ``error``, the events that end a stream."""
    return isinstance(event, (DoneEvent, ErrorEvent))
