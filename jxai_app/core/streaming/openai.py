"""The OpenAI-compatible streaming client (docs/streaming.md "OpenAI-compatible requests" to
"Non-streamed answers").

``POST {base_url}/chat/completions`` with ``stream: true`` and usage requested; the answer's
``chat.completion.chunk`` events become normalised events. Works with OpenAI, OpenRouter,
Groq, DeepSeek, Ollama, vLLM, llama.cpp's server and other compatible gateways (see
:mod:`.presets`). Framing, timeouts, cancellation and error translation live in :mod:`.base`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, Mapping, Sequence

import httpx
from httpx_sse import ServerSentEvent

from jxai_app.core.streaming.base import BaseChatClient, ClientTimeouts, Guard, Normaliser, PreparedRequest
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
from jxai_app.core.streaming.fault import UpstreamFault, error_event_fault, provider_error_fault
from jxai_app.core.streaming.pool import ConnectionPool
from jxai_app.core.streaming.sse import DONE, parse_payload
from jxai_app.core.streaming.toolcalls import ToolCallAssembler, generated_call_id
from jxai_app.core.streaming.usage import usage_from

_FINISH: Final[dict[str, StopReason]] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}
"""Provider finish reasons we know; anything else is ignored (docs/streaming.md "Finish reasons and
the end of the body")."""


def map_usage(usage: Any) -> UsageEvent | None:
    """OpenAI ``usage`` → :class:`UsageEvent` (docs/streaming.md "Usage"; docs/providers.md "Token counts").

    ``inputTokens`` ← ``prompt_tokens`` (required, a number), ``outputTokens`` ←
    ``completion_tokens`` or 0, plus ``completion_tokens_details.reasoning_tokens`` when the
    numbers show them billed on top (xAI; :func:`~.usage.usage_event`); ``cachedInputTokens`` ←
    ``prompt_tokens_details.cached_tokens`` and ``reasoningTokens`` ←
    ``completion_tokens_details.reasoning_tokens`` only when numbers (:func:`~.usage.usage_from`).
    Returns ``None`` when there is no numeric ``prompt_tokens``.
    """
    return usage_from(usage, "prompt", "completion")


def _arguments(value: Any) -> str:
    if type(value) is str:
        return value
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)  # some servers send an object


def _text(value: Any) -> str | None:
    return value if type(value) is str and value else None


def text_of(content: Any) -> str:
    """Plain text of an OpenAI wire message's ``content``: a string, or the joined ``text`` of
    a list of parts (other parts, e.g. images, give nothing); ``None`` gives ``""``."""
    if content is None:
        return ""
    if type(content) is str:
        return content
    if type(content) is list:
        return "".join(p.get("text", "") for p in content if type(p) is dict and type(p.get("text")) is str)
    return str(content)


def content_parts(parts: list[Any], out: list[StreamEvent]) -> None:
    """A ``content`` sent as a list of typed parts (Mistral's reasoning models;
    docs/providers.md "Mistral") → events appended to ``out`` in the parts' order.

    ``{"type": "text", "text": s}`` gives a ``delta``; ``{"type": "thinking", "thinking": x}``
    gives a ``reasoning`` whose text is ``x`` when a string, else the joined ``text`` of the
    text parts listed in ``x``. Empty text and parts of any other type (or shape) are skipped,
    never the parts around them.
    """
    for part in parts:
        if type(part) is not dict:
            continue
        kind = part.get("type")
        if kind == "text":
            text = _text(part.get("text"))
            if text is not None:
                out.append(DeltaEvent(content=text))
        elif kind == "thinking":
            thought = part.get("thinking")
            if type(thought) is list:
                thought = "".join(p["text"] for p in thought
                                  if type(p) is dict and p.get("type") == "text" and type(p.get("text")) is str)
            text = _text(thought)
            if text is not None:
                out.append(ReasoningEvent(content=text))


def _reasoning(message: dict[str, Any]) -> str | None:
    """The reasoning text of a stream delta or a whole message: ``reasoning_content``
    (DeepSeek, llama.cpp's server), else — only when that member is absent or null —
    ``reasoning`` (OpenRouter); ``None`` unless it is a non-empty string."""
    reasoning = message.get("reasoning_content")
    if reasoning is None:
        reasoning = message.get("reasoning")
    return _text(reasoning)


class OpenAINormaliser:
    """Chat-completion chunks → normalised events, for one response (docs/streaming.md "Text and
    reasoning" to "Non-streamed answers")."""

    __slots__ = ("calls", "finish", "usage", "extras")

    def __init__(self, extras: dict[str, dict[str, Any]] | None = None) -> None:
        self.calls = ToolCallAssembler()
        self.finish: StopReason | None = None
        self.usage: UsageEvent | None = None
        self.extras = extras if extras is not None else {}
        """Call id → the ``extra_content`` object a tool call carried (docs/providers.md
        "Google Gemini (OpenAI-compatible endpoint)")."""

    def on_event(self, sse: ServerSentEvent, out: list[StreamEvent]) -> None:
        """One SSE event: an ``error`` event, ``[DONE]``, noise, or a chunk object."""
        data = sse.data
        if sse.event == "error":
            raise error_event_fault(data)
        payload = parse_payload(data)
        if payload is None:
            return
        if payload is DONE:
            self._end(out)
        else:
            self._chunk(payload, out)  # type: ignore[arg-type]

    def on_eof(self) -> Sequence[StreamEvent]:
        """End of body: ``done`` after a finish reason, else ``incomplete_stream``."""
        if self.finish is None:
            raise UpstreamFault("incomplete_stream",
                                "The provider's stream ended before the answer was complete.")
        out: list[StreamEvent] = []
        self._end(out)
        return out

    def _end(self, out: list[StreamEvent]) -> None:
        self.calls.close_all(out)
        if self.usage is not None:
            out.append(self.usage)
        out.append(DoneEvent(stop_reason=self.finish or "stop"))

    def _chunk(self, chunk: dict[str, Any], out: list[StreamEvent]) -> None:
        """One ``chat.completion.chunk``: error member, usage, then ``choices[0]``'s delta
        (text before reasoning, docs/streaming.md "Text and reasoning"; then tool calls,
        "Tool-call fragments") and finish reason."""
        error = chunk.get("error")
        if error:
            raise provider_error_fault(error)
        usage = chunk.get("usage")
        if usage:
            mapped = map_usage(usage)
            if mapped is not None:
                self.usage = mapped
        choices = chunk.get("choices")
        if not choices or type(choices) is not list:
            return
        choice = choices[0]
        if type(choice) is not dict:
            return
        delta = choice.get("delta")
        if type(delta) is not dict:
            delta = None
        elif delta:
            content = delta.get("content")
            if content and type(content) is str:
                out.append(DeltaEvent(content=content))
                if len(delta) == 1:  # the common text-only delta: nothing else to look for
                    delta = None
            elif content and type(content) is list:
                content_parts(content, out)
        if delta:
            reasoning = _reasoning(delta)
            if reasoning is not None:
                out.append(ReasoningEvent(content=reasoning))
            tool_calls = delta.get("tool_calls")
            if tool_calls and type(tool_calls) is list:
                self._tool_calls(tool_calls, out)
            # A legacy function call is a tool call at index 0 — unless the same delta also
            # carries ``tool_calls``: llama.cpp's server sends every fragment in both forms,
            # and counting both would double the argument text.
            legacy = None if tool_calls else delta.get("function_call")
            if type(legacy) is dict:
                self.calls.fragment(0, None, _text(legacy.get("name")), _arguments(legacy.get("arguments")), out)
        reason = choice.get("finish_reason")
        if reason is not None:
            mapped_reason = _FINISH.get(reason) if type(reason) is str else None
            if mapped_reason is not None:
                if self.finish is None:
                    self.finish = mapped_reason
                self.calls.close_all(out)

    def _tool_calls(self, tool_calls: list[Any], out: list[StreamEvent]) -> None:
        single = len(tool_calls) == 1
        for position, fragment in enumerate(tool_calls):
            if type(fragment) is not dict:
                continue
            index = fragment.get("index")
            if type(index) is not int:
                index = 0 if single else position
            function = fragment.get("function")
            if type(function) is not dict:
                function = {}
            self.calls.fragment(index, _text(fragment.get("id")), _text(function.get("name")),
                                _arguments(function.get("arguments")), out)
            self._keep_extra(self.calls.open_id(index), fragment)

    def _keep_extra(self, call_id: str | None, call: dict[str, Any]) -> None:
        """Remember a tool call's non-empty ``extra_content`` object under its id."""
        extra = call.get("extra_content")
        if call_id is not None and type(extra) is dict and extra:
            self.extras[call_id] = extra

    def on_json(self, body: Any) -> Sequence[StreamEvent]:
        """A whole (non-streamed) chat completion → the events a stream would give (docs/streaming.md
        "Non-streamed answers")."""
        if type(body) is not dict:
            raise _not_a_completion()
        if body.get("error"):
            raise provider_error_fault(body["error"])
        choices = body.get("choices")
        if not choices or type(choices) is not list or type(choices[0]) is not dict:
            raise _not_a_completion()
        message = choices[0].get("message")
        if type(message) is not dict:
            raise _not_a_completion()
        out: list[StreamEvent] = []
        reasoning = _reasoning(message)
        if reasoning is not None:
            out.append(ReasoningEvent(content=reasoning))
        content = message.get("content")
        if content and type(content) is str:
            out.append(DeltaEvent(content=content))
        elif content and type(content) is list:
            content_parts(content, out)
        calls = message.get("tool_calls")
        if type(calls) is not list:
            calls = [dict(message["function_call"], id=None)] if type(message.get("function_call")) is dict else []
        for index, call in enumerate(calls):
            if type(call) is not dict:
                continue
            function = call.get("function", call)
            if type(function) is not dict:
                continue
            call_id = _text(call.get("id")) or generated_call_id(index)
            self._keep_extra(call_id, call)
            out.append(ToolCallStartEvent(id=call_id, name=_text(function.get("name")) or ""))
            args = _arguments(function.get("arguments"))
            if args:
                out.append(ToolCallDeltaEvent(id=call_id, args=args))
            out.append(ToolCallEndEvent(id=call_id))
        usage = map_usage(body.get("usage"))
        if usage is not None:
            out.append(usage)
        reason = choices[0].get("finish_reason")
        out.append(DoneEvent(stop_reason=_FINISH.get(reason, "stop") if type(reason) is str else "stop"))
        return out


def _not_a_completion() -> UpstreamFault:
    return UpstreamFault("unexpected_response", "The provider answered with JSON that is not a chat completion.")


class OpenAIChatClient(BaseChatClient):
    """Streaming client for any OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` (``/chat/completions`` is appended).
        model: the provider's model id.
        api_key: sent as ``Authorization: Bearer …`` when set (local servers need none).
        temperature: sent only when set; ``0`` is sent.
        tool_choice: sent with a non-empty tool list, with ``parallel_tool_calls: true``.
        extra_headers: added to every request (e.g. OpenRouter's ``HTTP-Referer``).
        timeouts: connect / first-byte / idle limits in seconds.
        transport: an ``httpx`` transport instead of the network (tests).
        max_tokens: sent as ``max_tokens`` when set.
        pool: shared kept-alive connections (:class:`~jxai_app.core.streaming.pool.ConnectionPool`).
        reasoning_effort: sent as ``reasoning_effort`` when set (OpenAI's reasoning models;
            Gemini maps it to its thinking budget, docs/providers.md "Google Gemini (OpenAI-compatible endpoint)").
        tool_choice_when: a regular expression; a forcing ``tool_choice`` applies only to a user
            message it is found in (:func:`tool_choice_for`); ``None``: to every user message.
        unreachable_message, strip_leading_whitespace: see :class:`~.base.BaseChatClient`.

    A tool call that arrives with an ``extra_content`` object (Gemini's thought signature) gets
    it back when the same client sends that call in a later request of the turn (the agent loop
    uses one client per turn); Gemini 3 answers 400 to a call of the current turn without it.
    """

    def __init__(self, *, base_url: str, model: str, api_key: str | None = None, temperature: float | None = None,
                 tool_choice: Any = "auto", extra_headers: Mapping[str, str] | None = None,
                 timeouts: ClientTimeouts | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 max_tokens: int | None = None, pool: ConnectionPool | None = None,
                 reasoning_effort: str | None = None, tool_choice_when: str | None = None,
                 unreachable_message: str | None = None, strip_leading_whitespace: bool = False) -> None:
        super().__init__(timeouts=timeouts, transport=transport, extra_headers=extra_headers, pool=pool,
                         unreachable_message=unreachable_message, strip_leading_whitespace=strip_leading_whitespace)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.temperature = temperature
        self.tool_choice = tool_choice
        self.max_tokens = max_tokens
        self.reasoning_effort = reasoning_effort
        self.tool_choice_when = re.compile(tool_choice_when) if tool_choice_when is not None else None
        self._extras: dict[str, dict[str, Any]] = {}
        """Call id → ``extra_content`` received with that call, for this client's life (one turn)."""

    async def _prepare(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                       system_prompt: str, guard: Guard) -> PreparedRequest:
        """Body members in the order of docs/streaming.md "OpenAI-compatible requests": model,
        messages (system first), stream,
        stream_options, [temperature], [max_tokens], [reasoning_effort], [tools, tool_choice,
        parallel_tool_calls]."""
        headers = self._headers({"Authorization": f"Bearer {self.api_key}" if self.api_key else None})
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": system_prompt}, *map(self._outgoing, messages)],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = tool_choice_for(self.tool_choice, messages, tools, self.tool_choice_when)
            body["parallel_tool_calls"] = True
        return PreparedRequest(self.base_url + "/chat/completions", headers, body)

    def _normaliser(self) -> Normaliser:
        return OpenAINormaliser(self._extras)

    def _outgoing(self, message: Mapping[str, Any]) -> Mapping[str, Any]:
        """One history message as sent (:func:`_wire_message`), its tool calls carrying again
        the ``extra_content`` this client received with them (Gemini's thought signatures,
        docs/providers.md "Google Gemini (OpenAI-compatible endpoint)")."""
        message = _wire_message(message)
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls or not self._extras or type(calls) is not list:
            return message
        echoed = [dict(call, extra_content=self._extras[call["id"]])
                  if type(call) is dict and call.get("id") in self._extras and "extra_content" not in call else call
                  for call in calls]
        return {**message, "tool_calls": echoed}


def _wire_message(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """An assistant message with ``tool_calls`` and ``content: null`` is sent without the
    ``content`` key: OpenAI's chat completions reference makes ``content`` optional when
    ``tool_calls`` is given, and llama.cpp's server answers HTTP 500 to a ``null`` one."""
    if message.get("role") == "assistant" and message.get("content") is None and "content" in message \
            and message.get("tool_calls"):
        return {key: value for key, value in message.items() if key != "content"}
    return message


def tool_choice_for(configured: Any, messages: Sequence[Mapping[str, Any]],
                    tools: Sequence[Mapping[str, Any]], when: re.Pattern[str] | None = None) -> Any:
    """The ``tool_choice`` of one request (jxai's rule, not a provider's; docs/streaming.md
    "OpenAI-compatible requests").

    A forcing choice (``"required"`` or a named function, set on a model alias for small
    models that never call a tool unprompted) applies only to the request that answers the
    user, i.e. when the history ends with a ``user`` message; after tool results the request
    says ``auto``, or a forced model would call the tool again after every result until the
    round budget runs out. With ``when`` (the model's ``tool_choice_when``) it applies only
    when ``when`` is found in that user message's text (a calculator forced on "12 times 7",
    not on "the capital of Italy"); otherwise ``auto``. ``auto`` and ``none`` are sent as
    configured. A named function that is not among this request's ``tools`` (a tool policy
    withheld it from the user) becomes ``auto``: OpenAI rejects such a request and
    llama.cpp's server answers it with an empty HTTP 200.
    """
    if isinstance(configured, Mapping):
        name = (configured.get("function") or {}).get("name")
        if name is not None and name not in {(t.get("function") or {}).get("name") for t in tools}:
            return "auto"
    if configured in ("auto", "none") or not messages:
        return configured
    last = messages[-1]
    if last.get("role") == "user" and (when is None or when.search(text_of(last.get("content"))) is not None):
        return configured
    return "auto"
