"""The Anthropic Messages API streaming client (docs/streaming.md "Anthropic client";
docs/providers.md "Anthropic").

``POST {base_url}/messages`` with ``x-api-key`` and ``anthropic-version: 2023-06-01``. The
OpenAI-shape history is converted (:func:`convert_messages`, :func:`convert_tools`) and the
answer's events are normalised by :class:`AnthropicNormaliser`:

=========================  ============================================================
Anthropic event            normalised
=========================  ============================================================
``message_start``          remembers input usage and a set ``stop_reason``; blocks already
                           in ``content`` count as complete blocks; a repeat with the
                           open message's id is ignored, one of another message while
                           one is open is an ``invalid_stream`` error
``content_block_start``    ``tool_use`` → ``tool_call_start``; text/thinking: their text if
                           any; tools the provider runs itself (``server_tool_use``,
                           ``mcp_tool_use``) and their ``*_tool_result`` blocks: nothing,
                           nor for their deltas
``content_block_delta``    ``text_delta`` → ``delta``; ``input_json_delta`` →
                           ``tool_call_delta``; ``thinking_delta`` → ``reasoning``
``content_block_stop``     of a ``tool_use`` block → ``tool_call_end``
``message_delta``          stop reason (``end_turn``/``stop_sequence``/``pause_turn`` → stop,
                           ``tool_use`` → tool_calls, ``max_tokens`` and
                           ``model_context_window_exceeded`` → length, ``refusal`` →
                           content_filter); output usage
``message_stop``           ``usage`` + ``done``; anything after is ignored
``ping``                   ignored
``error``                  ``error`` with ``code`` = the error's ``type``
=========================  ============================================================

A body that ends before ``message_stop`` is an ``incomplete_stream`` error.
Reference: https://docs.anthropic.com/en/api/messages-streaming; the rules beyond it, and why
provider-run tools are dropped rather than reported, are in docs/providers.md "Anthropic".
"""

from __future__ import annotations

import json
from typing import Any, Final, Mapping, Sequence

import httpx
from httpx_sse import ServerSentEvent

from jxai_app.core.streaming.base import BaseChatClient, ClientTimeouts, Guard, Normaliser, PreparedRequest, event_object
from jxai_app.core.streaming.events import (
    DeltaEvent,
    DoneEvent,
    ReasoningEvent,
    StopReason,
    StreamEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UsageEvent,
)
from jxai_app.core.streaming.fault import UpstreamFault, provider_error_fault
from jxai_app.core.streaming.openai import text_of
from jxai_app.core.streaming.pool import ConnectionPool
from jxai_app.core.tokens import token_count

ANTHROPIC_VERSION: Final[str] = "2023-06-01"

_STOP: Final[dict[str, StopReason]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


class AnthropicNormaliser:
    """Messages API stream events → normalised events, for one response."""

    __slots__ = ("_open", "_id", "_tools", "_stop", "_input", "_cached", "_output")

    def __init__(self) -> None:
        self._open = False  # a message_start was seen
        self._id: str | None = None  # the open message's id, when it gave one
        self._tools: dict[int, str] = {}  # block index → tool_use id, while open
        self._stop: StopReason | None = None
        self._input: int | None = None
        self._cached: int | None = None
        self._output: int | None = None

    def on_event(self, sse: ServerSentEvent, out: list[StreamEvent]) -> None:
        """One SSE event (its JSON ``type`` decides; the SSE event name is only a fallback)."""
        payload = event_object(sse)
        if payload is not None:
            out.extend(self._handle(payload, payload.get("type") or sse.event))

    def _handle(self, payload: dict[str, Any], kind: object) -> Sequence[StreamEvent]:
        if kind == "error":
            raise provider_error_fault(payload.get("error") or payload)
        if kind == "content_block_delta":
            return self._delta(payload)
        if kind == "content_block_start":
            return self._block_start(payload)
        if kind == "content_block_stop":
            call_id = self._tools.pop(payload.get("index"), None)  # type: ignore[arg-type]
            return (ToolCallEndEvent(id=call_id),) if call_id is not None else ()
        if kind == "message_start":
            return self._message_start(payload.get("message"))
        if kind == "message_delta":
            delta = payload.get("delta")
            self._stop_reason(delta.get("stop_reason") if type(delta) is dict else None)
            self._usage(payload.get("usage"))
            return ()
        if kind == "message_stop":
            return self._end()
        return ()  # ping and anything unknown

    def _message_start(self, message: Any) -> Sequence[StreamEvent]:
        """The message opens: input usage, and whatever it already holds (docs/providers.md
        "Anthropic"): blocks in ``content`` count as complete blocks, a set ``stop_reason``
        counts as if a ``message_delta`` had said it.

        A repeat of the open message's ``message_start`` (the same ``id``) is ignored.

        Raises:
            UpstreamFault: ``invalid_stream`` when another message starts while one is open
                (two streams spliced together); the open tool calls are never closed.
        """
        given = message.get("id") if type(message) is dict else None
        message_id = given if type(given) is str and given else None
        if self._open:
            if message_id is not None and message_id == self._id:
                return ()
            raise UpstreamFault("invalid_stream", "The provider started a second message before ending the first.")
        self._open = True
        self._id = message_id
        if type(message) is not dict:
            return ()
        self._usage(message.get("usage"))
        self._stop_reason(message.get("stop_reason"))
        content = message.get("content")
        return self._blocks(content) if type(content) is list else ()

    def _blocks(self, content: list[Any]) -> list[StreamEvent]:
        """Complete content blocks (a whole message's, or ``message_start``'s) → events."""
        out: list[StreamEvent] = []
        for index, block in enumerate(content):
            if type(block) is not dict:
                continue
            out += self._block_start({"index": index, "content_block": block})
            call_id = self._tools.pop(index, None)
            if call_id is not None:
                out.append(ToolCallEndEvent(id=call_id))
        return out

    def _stop_reason(self, reason: Any) -> None:
        """Remember the first known stop reason."""
        if type(reason) is str and reason in _STOP and self._stop is None:
            self._stop = _STOP[reason]

    def _delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        delta = payload.get("delta")
        if type(delta) is not dict:
            return ()
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            return (DeltaEvent(content=text),) if type(text) is str and text else ()
        if kind == "input_json_delta":
            call_id = self._tools.get(payload.get("index"))  # type: ignore[arg-type]
            part = delta.get("partial_json")
            if call_id is None or type(part) is not str or not part:
                return ()
            return (ToolCallDeltaEvent(id=call_id, args=part),)
        if kind == "thinking_delta":
            text = delta.get("thinking")
            return (ReasoningEvent(content=text),) if type(text) is str and text else ()
        return ()

    def _block_start(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        block = payload.get("content_block")
        if type(block) is not dict:
            return ()
        kind = block.get("type")
        if kind == "tool_use":  # only client tools: server_tool_use, mcp_tool_use, *_tool_result are dropped
            index = payload.get("index")
            given_id, given_name = block.get("id"), block.get("name")
            call_id = given_id if isinstance(given_id, str) and given_id else f"toolu_{index}"
            self._tools[index] = call_id  # type: ignore[index]
            name = given_name if isinstance(given_name, str) else ""
            out: list[StreamEvent] = [ToolCallStartEvent(id=call_id, name=name)]
            given = block.get("input")
            if type(given) is dict and given:  # input normally streams as input_json_delta
                out.append(ToolCallDeltaEvent(id=call_id, args=json.dumps(given, separators=(",", ":"))))
            return out
        if kind == "text" and type(block.get("text")) is str and block["text"]:
            return (DeltaEvent(content=block["text"]),)
        if kind == "thinking" and type(block.get("thinking")) is str and block["thinking"]:
            return (ReasoningEvent(content=block["thinking"]),)
        return ()

    def _usage(self, usage: Any) -> None:
        if type(usage) is not dict:
            return
        fresh = token_count(usage.get("input_tokens"))
        read = token_count(usage.get("cache_read_input_tokens"))
        written = token_count(usage.get("cache_creation_input_tokens"))
        if fresh is not None:
            self._input = fresh + (read or 0) + (written or 0)  # total prompt tokens, as OpenAI counts them
        if read is not None:
            self._cached = read
        output = token_count(usage.get("output_tokens"))
        if output is not None:
            self._output = output

    def _end(self) -> list[StreamEvent]:
        out: list[StreamEvent] = [ToolCallEndEvent(id=call_id) for call_id in self._tools.values()]
        self._tools.clear()
        if self._input is not None or self._output is not None:
            out.append(UsageEvent(input_tokens=self._input or 0, output_tokens=self._output or 0,
                                  cached_input_tokens=self._cached))
        out.append(DoneEvent(stop_reason=self._stop or "stop"))
        return out

    def on_eof(self) -> Sequence[StreamEvent]:
        """The body ended before ``message_stop``."""
        raise UpstreamFault("incomplete_stream", "The provider's stream ended before the answer was complete.")

    def on_json(self, body: Any) -> Sequence[StreamEvent]:
        """A whole (non-streamed) Messages API response → the events a stream would give."""
        if type(body) is not dict:
            raise UpstreamFault("unexpected_response", "The provider answered with JSON that is not a message.")
        if body.get("type") == "error" or body.get("error"):
            raise provider_error_fault(body.get("error") or body)
        content = body.get("content")
        if type(content) is not list:
            raise UpstreamFault("unexpected_response", "The provider answered with JSON that is not a message.")
        out = self._blocks(content)
        self._usage(body.get("usage"))
        self._stop_reason(body.get("stop_reason"))
        return out + self._end()


def _user_blocks(content: Any) -> Any:
    if type(content) is not list:
        return text_of(content)
    blocks: list[dict[str, Any]] = []
    for part in content:
        if type(part) is not dict:
            continue
        if part.get("type") == "text" and type(part.get("text")) is str:
            blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            url = part.get("image_url", {}).get("url", "") if type(part.get("image_url")) is dict else ""
            if url.startswith("data:") and ";base64," in url:
                media, data = url[5:].split(";base64,", 1)
                blocks.append({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
            elif url:
                blocks.append({"type": "image", "source": {"type": "url", "url": url}})
        elif part.get("type") == "file":
            data_url = part.get("file", {}).get("file_data", "") if type(part.get("file")) is dict else ""
            if type(data_url) is str and data_url.startswith("data:") and ";base64," in data_url:
                media, data = data_url[5:].split(";base64,", 1)
                blocks.append({"type": "document", "source": {"type": "base64", "media_type": media, "data": data}})
    return blocks


def _tool_input(arguments: Any) -> dict[str, Any]:
    if type(arguments) is dict:
        return arguments
    try:
        value = json.loads(arguments) if type(arguments) is str and arguments.strip() else {}
    except ValueError:
        value = None
    return value if type(value) is dict else {}


def convert_messages(messages: Sequence[Mapping[str, Any]], system_prompt: str) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI-shape history → Anthropic ``(system, messages)`` (docs/streaming.md "Anthropic client").

    System messages join the system prompt; assistant ``tool_calls`` become ``tool_use``
    blocks (arguments parsed, ``{}`` when unparseable); consecutive ``tool`` messages become
    one user message of ``tool_result`` blocks; empty assistant turns are left out. A user
    message's ``image_url`` parts become ``image`` blocks, its ``file`` parts (a base64 data
    URL) ``document`` blocks (docs/attachments.md "What the model gets").
    """
    system_parts = [system_prompt] if system_prompt else []
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "tool":
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            results.append({"type": "tool_result", "tool_use_id": str(message.get("tool_call_id") or ""),
                            "content": text_of(content)})
            continue
        results = None
        if role in ("system", "developer"):
            if text_of(content):
                system_parts.append(text_of(content))
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if text_of(content):
                blocks.append({"type": "text", "text": text_of(content)})
            for call in message.get("tool_calls") or ():
                function = call.get("function") if type(call) is dict else None
                if type(function) is dict:
                    blocks.append({"type": "tool_use", "id": str(call.get("id") or ""),
                                   "name": str(function.get("name") or ""),
                                   "input": _tool_input(function.get("arguments"))})
            if blocks:
                out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": "user", "content": _user_blocks(content)})
    return "\n\n".join(system_parts), out


def convert_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function tools → Anthropic ``{name, description, input_schema}``."""
    out = []
    for tool in tools:
        function = tool.get("function") if tool.get("type", "function") == "function" else None
        if type(function) is not dict or not function.get("name"):
            continue
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        entry: dict[str, Any] = {"name": function["name"], "input_schema": schema}
        if function.get("description"):
            entry["description"] = function["description"]
        out.append(entry)
    return out


class AnthropicChatClient(BaseChatClient):
    """Streaming client for the Anthropic Messages API.

    Args:
        base_url: the API root (``/messages`` is appended).
        model: the model id, e.g. ``claude-sonnet-4-5``.
        api_key: sent as ``x-api-key`` when set.
        max_tokens: the required output limit (``max_tokens``).
        temperature: sent only when set.
        extra_headers: added to every request (e.g. ``anthropic-beta``).
        timeouts: connect / first-byte / idle limits in seconds.
        transport: an ``httpx`` transport instead of the network (tests).
        pool: shared kept-alive connections (:class:`~jxai_app.core.streaming.pool.ConnectionPool`).
        unreachable_message: what the ``error`` says when no connection can be made
            (:class:`~.base.BaseChatClient`).
    """

    def __init__(self, *, base_url: str = "https://api.anthropic.com/v1", model: str, api_key: str | None = None,
                 max_tokens: int = 4096, temperature: float | None = None,
                 extra_headers: Mapping[str, str] | None = None, timeouts: ClientTimeouts | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, pool: ConnectionPool | None = None,
                 unreachable_message: str | None = None) -> None:
        super().__init__(timeouts=timeouts, transport=transport, extra_headers=extra_headers, pool=pool,
                         unreachable_message=unreachable_message)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.max_tokens = max_tokens
        self.temperature = temperature

    async def _prepare(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                       system_prompt: str, guard: Guard) -> PreparedRequest:
        headers = self._headers({"anthropic-version": ANTHROPIC_VERSION, "x-api-key": self.api_key})
        system, converted = convert_messages(messages, system_prompt)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        if system:
            body["system"] = system
        body["messages"] = converted
        if tools:
            body["tools"] = convert_tools(tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body["stream"] = True
        return PreparedRequest(self.base_url + "/messages", headers, body)

    def _normaliser(self) -> Normaliser:
        return AnthropicNormaliser()
