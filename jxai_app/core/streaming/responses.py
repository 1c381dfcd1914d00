"""The OpenAI Responses API streaming client (docs/providers.md "OpenAI Responses API").

``POST {base_url}/responses`` with ``stream: true`` and ``store: false``: nothing is kept on
the provider's side, every request carries the whole history, so jxai's database stays the
one record of a conversation. The OpenAI-shape history becomes Responses input items
(:func:`convert_input`), the function tools become flat Responses tools
(:func:`convert_tools`), and the answer's semantic events are normalised by
:class:`ResponsesNormaliser`:

=============================================  =============================================
Responses event                                normalised
=============================================  =============================================
``response.output_text.delta``                 ``delta``
``response.refusal.delta``                     ``delta`` (the refusal is the answer), and the
                                               stream ends ``done: content_filter``
``response.reasoning_summary_text.delta``,     ``reasoning``
``response.reasoning_text.delta``
``response.output_item.added`` (function_call) ``tool_call_start`` (id = the item's ``call_id``)
``response.function_call_arguments.delta``     ``tool_call_delta``
``response.output_item.done`` (function_call)  ``tool_call_end`` (after the item's arguments
                                               when no delta carried them)
``response.completed``                         ``usage`` + ``done``: ``tool_calls`` when a
                                               function call was output, else ``stop``
``response.incomplete``                        ``usage`` + ``done``: ``max_output_tokens`` →
                                               ``length``, ``content_filter`` → content_filter,
                                               any other reason → ``length``
``response.failed``, ``error``                 ``error`` with the provider's code and message
anything else                                  ignored (lifecycle events, provider-run tools)
=============================================  =============================================

The stream has no ``[DONE]``; a body that ends before a terminal event is an
``incomplete_stream`` error. Framing, timeouts, cancellation and error translation live in
:mod:`.base`.
"""

from __future__ import annotations

import json
from typing import Any, Final, Mapping, Sequence

from httpx_sse import ServerSentEvent

from jxai_app.core.streaming.base import Guard, Normaliser, PreparedRequest, event_object
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
from jxai_app.core.streaming.openai import OpenAIChatClient, text_of, tool_choice_for
from jxai_app.core.streaming.usage import usage_from

_INCOMPLETE: Final[dict[str, StopReason]] = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""``incomplete_details.reason`` → stop reason; any other reason means the answer was cut: ``length``."""

_TEXT_DELTAS: Final[frozenset[str]] = frozenset({"response.output_text.delta", "response.refusal.delta"})
_REASONING_DELTAS: Final[frozenset[str]] = frozenset(
    {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})


def map_usage(usage: Any) -> UsageEvent | None:
    """Responses ``usage`` → :class:`UsageEvent`, or ``None`` without a numeric ``input_tokens``.

    ``inputTokens`` ← ``input_tokens``; ``outputTokens`` ← ``output_tokens`` (reasoning included,
    or added when the numbers show it billed on top, docs/providers.md); ``cachedInputTokens`` ←
    ``input_tokens_details.cached_tokens``; ``reasoningTokens`` ←
    ``output_tokens_details.reasoning_tokens`` (:func:`~.usage.usage_from`).
    """
    return usage_from(usage, "input", "output")


def _text(value: Any) -> str | None:
    return value if type(value) is str and value else None


class ResponsesNormaliser:
    """Responses stream events → normalised events, for one response (module docstring)."""

    __slots__ = ("_calls", "_sent_args", "_called", "_refused")

    def __init__(self) -> None:
        self._calls: dict[Any, str] = {}  # output_index and item id → call id, while open
        self._sent_args: set[str] = set()  # calls whose argument text has gone out
        self._called = False  # a function call was output
        self._refused = False  # refusal text was output

    def on_event(self, sse: ServerSentEvent, out: list[StreamEvent]) -> None:
        """One SSE event (its JSON ``type`` decides; the SSE event name is a fallback).

        Raises:
            UpstreamFault: ``response.failed`` or ``error`` (the provider's code), broken data.
        """
        payload = event_object(sse)
        if payload is None:
            return
        kind = payload.get("type") or sse.event
        if kind in _TEXT_DELTAS:
            text = _text(payload.get("delta"))
            if text is not None:
                self._refused = self._refused or kind == "response.refusal.delta"
                out.append(DeltaEvent(content=text))
        elif kind in _REASONING_DELTAS:
            text = _text(payload.get("delta"))
            if text is not None:
                out.append(ReasoningEvent(content=text))
        elif kind == "response.function_call_arguments.delta":
            call_id = self._open_call(payload.get("output_index"), payload.get("item_id"))
            text = _text(payload.get("delta"))
            if call_id is not None and text is not None:
                self._sent_args.add(call_id)
                out.append(ToolCallDeltaEvent(id=call_id, args=text))
        elif kind == "response.output_item.added":
            self._item_added(payload.get("output_index"), payload.get("item"), out)
        elif kind == "response.output_item.done":
            self._item_done(payload.get("output_index"), payload.get("item"), out)
        elif kind in ("response.completed", "response.incomplete"):
            response = payload.get("response")
            out.extend(self._end(response if type(response) is dict else {}, incomplete=kind == "response.incomplete"))
        elif kind == "response.failed":
            response = payload.get("response")
            error = response.get("error") if type(response) is dict else None
            raise provider_error_fault(error or "The provider could not produce an answer.")
        elif kind == "error":
            inner = payload.get("error")
            raise provider_error_fault(inner if type(inner) is dict else payload)

    def _open_call(self, index: Any, item_id: Any) -> str | None:
        """The open call at this output index or of this item id (either may be missing)."""
        call_id = self._calls.get(index)
        if call_id is None and item_id is not None:
            call_id = self._calls.get(item_id)
        return call_id

    def _item_added(self, index: Any, item: Any, out: list[StreamEvent]) -> None:
        """A function-call item opens a tool call; its arguments, if any already, follow."""
        if type(item) is not dict or item.get("type") != "function_call" \
                or self._open_call(index, item.get("id")) is not None:
            return
        call_id = _text(item.get("call_id")) or _text(item.get("id")) or f"call_{index}"
        for key in (index, item.get("id")):
            if key is not None:
                self._calls[key] = call_id
        self._called = True
        out.append(ToolCallStartEvent(id=call_id, name=_text(item.get("name")) or ""))
        args = _text(item.get("arguments"))
        if args is not None:
            self._sent_args.add(call_id)
            out.append(ToolCallDeltaEvent(id=call_id, args=args))

    def _item_done(self, index: Any, item: Any, out: list[StreamEvent]) -> None:
        """A function-call item is complete: its call closes (opened here when never added),
        after its whole arguments when no delta carried any."""
        if type(item) is not dict or item.get("type") != "function_call":
            return
        self._item_added(index, item, out)
        call_id = self._open_call(index, item.get("id"))
        assert call_id is not None  # _item_added opened it
        self._calls = {key: open_id for key, open_id in self._calls.items() if open_id != call_id}
        args = _text(item.get("arguments"))
        if args is not None and call_id not in self._sent_args:
            out.append(ToolCallDeltaEvent(id=call_id, args=args))
        out.append(ToolCallEndEvent(id=call_id))

    def _end(self, response: dict[str, Any], *, incomplete: bool) -> list[StreamEvent]:
        """Close open calls, then ``usage`` (when given) and ``done``: for an ``incomplete``
        response by its ``incomplete_details.reason``, else by what was output."""
        out: list[StreamEvent] = [ToolCallEndEvent(id=call_id) for call_id in dict.fromkeys(self._calls.values())]
        self._calls.clear()
        usage = map_usage(response.get("usage"))
        if usage is not None:
            out.append(usage)
        out.append(DoneEvent(stop_reason=self._stop(response, incomplete)))
        return out

    def _stop(self, response: dict[str, Any], incomplete: bool) -> StopReason:
        if incomplete:
            details = response.get("incomplete_details")
            reason = details.get("reason") if type(details) is dict else None
            return _INCOMPLETE.get(reason, "length") if type(reason) is str else "length"
        if self._refused:
            return "content_filter"
        return "tool_calls" if self._called else "stop"

    def on_eof(self) -> Sequence[StreamEvent]:
        """The body ended before ``response.completed``/``incomplete``/``failed``."""
        raise UpstreamFault("incomplete_stream", "The provider's stream ended before the answer was complete.")

    def on_json(self, body: Any) -> Sequence[StreamEvent]:
        """A whole (non-streamed) response object → the events a stream would give.

        Raises:
            UpstreamFault: an error object or a failed response (the provider's code); JSON
                that is not a response (``unexpected_response``).
        """
        if type(body) is not dict:
            raise _not_a_response()
        if body.get("error") or body.get("status") == "failed":
            raise provider_error_fault(body.get("error") or "The provider could not produce an answer.")
        output = body.get("output")
        if type(output) is not list:
            raise _not_a_response()
        out: list[StreamEvent] = []
        for index, item in enumerate(output):
            if type(item) is dict:
                out += _item_text(item)
                if item.get("type") == "message":
                    self._refused = self._refused or any(
                        type(p) is dict and p.get("type") == "refusal" for p in item.get("content") or ())
                self._item_done(index, item, out)
        return out + self._end(body, incomplete=body.get("status") == "incomplete")


def _item_text(item: dict[str, Any]) -> list[StreamEvent]:
    """The text a whole output item carries: a message's ``output_text``/``refusal`` parts as
    ``delta``, a reasoning item's summary and ``reasoning_text`` parts as ``reasoning``."""
    kind = item.get("type")
    if kind == "message":
        parts, keys = item.get("content"), {"output_text": "text", "refusal": "refusal"}
    elif kind == "reasoning":
        parts = [*(item.get("summary") or ()), *(item.get("content") or ())]
        keys = {"summary_text": "text", "reasoning_text": "text"}
    else:
        return []
    out: list[StreamEvent] = []
    for part in parts if type(parts) is list else ():
        key = keys.get(str(part.get("type"))) if type(part) is dict else None
        text = _text(part.get(key)) if key is not None else None
        if text is not None:
            out.append(DeltaEvent(content=text) if kind == "message" else ReasoningEvent(content=text))
    return out


def _not_a_response() -> UpstreamFault:
    return UpstreamFault("unexpected_response", "The provider answered with JSON that is not a response.")


def _input_content(content: Any, role: str) -> Any:
    """A message's content as Responses content: a string stays a string; a list of parts
    becomes ``input_text``/``input_image``/``input_file`` parts (``output_text`` for the
    assistant; docs/attachments.md "What the model gets")."""
    if type(content) is not list:
        return text_of(content)
    text_type = "output_text" if role == "assistant" else "input_text"
    parts: list[dict[str, Any]] = []
    for part in content:
        if type(part) is not dict:
            continue
        if part.get("type") == "text" and type(part.get("text")) is str:
            parts.append({"type": text_type, "text": part["text"]})
        elif part.get("type") == "image_url" and role != "assistant":
            image = part.get("image_url")
            url = image.get("url") if type(image) is dict else image
            if type(url) is str and url:
                parts.append({"type": "input_image", "image_url": url})
        elif part.get("type") == "file" and role != "assistant" and type(part.get("file")) is dict:
            file = part["file"]
            if type(file.get("file_data")) is str and file["file_data"]:
                parts.append({"type": "input_file", "filename": str(file.get("filename") or "file.pdf"),
                              "file_data": file["file_data"]})
    return parts


def convert_input(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-shape history → Responses ``input`` items (docs/providers.md).

    ``system``/``developer``/``user`` messages become ``{"role", "content"}`` messages; an
    assistant message becomes a message with its text (when any) followed by one
    ``{"type": "function_call", "call_id", "name", "arguments"}`` item per tool call; a
    ``tool`` message becomes ``{"type": "function_call_output", "call_id", "output"}``.
    Reasoning text (``reasoning_content``) is not sent: Responses takes reasoning back only
    as its own items, which ``store: false`` does not keep. Empty assistant turns are left out.
    """
    items: list[dict[str, Any]] = []
    for message in messages:
        role = str(message.get("role") or "user")
        content = message.get("content")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": str(message.get("tool_call_id") or ""),
                          "output": text_of(content)})
        elif role == "assistant":
            converted = _input_content(content, role)
            if converted:
                items.append({"role": "assistant", "content": converted})
            for call in message.get("tool_calls") or ():
                function = call.get("function") if type(call) is dict else None
                if type(function) is dict:
                    arguments = function.get("arguments")
                    items.append({"type": "function_call", "call_id": str(call.get("id") or ""),
                                  "name": str(function.get("name") or ""),
                                  "arguments": arguments if type(arguments) is str else json.dumps(arguments or {})})
        else:
            items.append({"role": role if role in ("system", "developer") else "user",
                          "content": _input_content(content, role)})
    return items


def convert_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat function tools → flat Responses function tools
    ``{"type": "function", "name", "description"?, "parameters", "strict"}``.

    ``strict`` is always sent: the function's own boolean, else ``false``, because Responses
    makes function tools strict when it is left out, and strict mode rejects schemas with
    optional properties (docs/providers.md).
    """
    out = []
    for tool in tools:
        function = tool.get("function") if tool.get("type", "function") == "function" else None
        if type(function) is not dict or not function.get("name"):
            continue
        entry: dict[str, Any] = {"type": "function", "name": function["name"]}
        if function.get("description"):
            entry["description"] = function["description"]
        entry["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
        entry["strict"] = function.get("strict") is True
        out.append(entry)
    return out


def _responses_tool_choice(choice: Any) -> Any:
    """A chat ``tool_choice`` in Responses form: a named function ``{"type": "function",
    "function": {"name": n}}`` becomes ``{"type": "function", "name": n}``; strings stay."""
    if isinstance(choice, Mapping):
        name = (choice.get("function") or {}).get("name")
        if name is not None:
            return {"type": "function", "name": name}
    return choice


class ResponsesChatClient(OpenAIChatClient):
    """Streaming client for OpenAI's Responses API (``POST {base_url}/responses``).

    It takes :class:`~.openai.OpenAIChatClient`'s arguments and sends them the Responses way:
    ``base_url`` gets ``/responses`` appended; ``api_key`` is sent as ``Authorization: Bearer
    …``; ``temperature`` only when set (reasoning models reject it); ``tool_choice``, with a
    non-empty tool list, as the chat client decides it (:func:`~.openai.tool_choice_for`) in
    Responses form; ``max_tokens`` as ``max_output_tokens``; ``reasoning_effort`` as
    ``reasoning: {"effort": …, "summary": "auto"}``, so a reasoning model streams its
    reasoning summary.
    """

    async def _prepare(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                       system_prompt: str, guard: Guard) -> PreparedRequest:
        """Body: model, [instructions], input, stream, store, [temperature], [max_output_tokens],
        [reasoning], [tools, tool_choice, parallel_tool_calls]."""
        headers = self._headers({"Authorization": f"Bearer {self.api_key}" if self.api_key else None})
        body: dict[str, Any] = {"model": self.model}
        if system_prompt:
            body["instructions"] = system_prompt
        body.update(input=convert_input(messages), stream=True, store=False)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_output_tokens"] = self.max_tokens
        if self.reasoning_effort is not None:
            body["reasoning"] = {"effort": self.reasoning_effort, "summary": "auto"}
        if tools:
            body["tools"] = convert_tools(tools)
            choice = tool_choice_for(self.tool_choice, messages, tools, self.tool_choice_when)
            body["tool_choice"] = _responses_tool_choice(choice)
            body["parallel_tool_calls"] = True
        return PreparedRequest(self.base_url + "/responses", headers, body)

    def _normaliser(self) -> Normaliser:
        return ResponsesNormaliser()
