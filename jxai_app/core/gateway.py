"""The request pipeline of ``POST /ai/chat`` (docs/api.md "`POST /ai/chat`").

Plain functions over bytes, headers and settings values: no Django request object inside, so
each step is tested on its own and the view (:mod:`jxai_app.api`) only wires them together.
The view runs them in this order; the first refusal answers and nothing later runs
(docs/api.md "Checks, in order")::

    authenticate (401/403)          jxai_app.web.authn
    resolve_upstream (403/401)      caller-supplied provider URL, before the body is read
    read_body (413)                 bytes actually read, not Content-Length
    parse_chat_request (400/413)    JSON object, messages list, counts and sizes
    select_client (400/501)         model alias → configured client (keys stay server-side)
    check_turn_allowed (429)        jxai_app.policy.ratelimit
    stream_sse (200)                normalised events as ``data: <json>\\n\\n`` (docs/api.md "The event stream")

Every refusal is a :class:`~jxai_app.core.errors.ProblemError` carrying an RFC 9457 document.

Deliberate differences from the original package's handler (docs/api.md "Differences from the
original package's handler"):

- a body that is JSON but not an object (``null``, a list, a number) is a 400
  (``The request body must be a JSON object.``) — the original raised on ``null``;
- ``tools``, ``systemPrompt`` and ``model`` are type-checked (the original forwarded
  anything); each message must be an object with a string ``role``;
- provider 429/5xx before any output are retried (:mod:`jxai_app.core.streaming.retry`) and a
  429 is problem type ``rate-limited``, not ``invalid-request``
  (docs/streaming.md "Retries", "Errors and their codes").
"""

from __future__ import annotations

import json
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, Final, Mapping, Sequence, cast

from jxai_app.core.errors import UnknownModelError
from jxai_app.core.problems import problem_error
from jxai_app.core.providers import ModelRegistry
from jxai_app.core.ssrf import BlockedURLError, CheckedURL, IPAddress, PinnedTransport, Resolver, check_base_url, \
    is_blocked_address
from jxai_app.core.streaming.base import ChatClient, ClientTimeouts, Signal
from jxai_app.core.streaming.events import DoneEvent, ErrorEvent, StreamEvent, UsageEvent, encode_event
from jxai_app.core.streaming.guarded import guarded
from jxai_app.core.streaming.openai import OpenAIChatClient
from jxai_app.core.streaming.retry import RetryPolicy
from jxai_app.core.streaming.usage import reached_provider
from jxai_app.core.tokens import tokens_for_chars, without_media
from jxai_app.core.unicode import first_unclean_path, is_clean

__all__ = [
    "READ_CHUNK_BYTES",
    "CallerProvider",
    "ChatRequest",
    "SelectedUpstream",
    "StreamOutcome",
    "message_chars",
    "parse_chat_request",
    "prompt_estimate",
    "read_body",
    "resolve_upstream",
    "select_client",
    "sse_frame",
    "stream_sse",
]

READ_CHUNK_BYTES: Final[int] = 64 * 1024
"""Bytes read from the request body at a time; reading stops at the chunk that crosses the limit."""
WIRE_VERSION: Final[int] = 1
REDACTED: Final[str] = "[redacted]"
_INVALID_JSON: Final[str] = "Invalid JSON body"


# -- reading and parsing -----------------------------------------------------------------
def read_body(read: Callable[[int], bytes], max_bytes: int, *, chunk: int = READ_CHUNK_BYTES) -> bytes:
    """Read a request body, refusing it as soon as it is longer than ``max_bytes``.

    Args:
        read: ``read(n)`` → up to ``n`` bytes, ``b""`` at the end (a file-like's ``read``).
        max_bytes: the largest body accepted, in bytes (a body of exactly this size passes).
        chunk: bytes per read.

    Returns:
        The body.

    Raises:
        ProblemError: ``payload-too-large`` (413) past ``max_bytes``, counted on bytes
            actually read; ``invalid-request`` (400, ``Invalid JSON body``) when the
            body stream fails while being read.
    """
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            data = read(chunk)
        except (OSError, ValueError):
            raise problem_error("invalid-request", _INVALID_JSON) from None
        if not data:
            return b"".join(parts)
        size += len(data)
        if size > max_bytes:
            raise problem_error("payload-too-large",
                                f"The request body is larger than this gateway accepts ({max_bytes} bytes).")
        parts.append(data)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """An accepted ``POST /ai/chat`` body (wire version 1, every member optional).

    Attributes:
        messages: the history, OpenAI wire shape (``[]`` when absent).
        tools: OpenAI function tools (``[]`` when absent or null).
        system_prompt: ``""`` when absent or null.
        model: the requested model alias (or, for a caller-supplied provider, the provider's
            model id); ``None`` when absent, null or empty (the default model).
        bytes: the body's size in bytes.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    system_prompt: str
    model: str | None
    bytes: int
    wire: int = field(default=WIRE_VERSION)

    @property
    def message_count(self) -> int:
        """Messages excluding the system prompt."""
        return len(self.messages)


def _text_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):  # content parts: [{"type": "text", "text": …}, …]
        return sum(len(part["text"]) for part in value
                   if isinstance(part, Mapping) and isinstance(part.get("text"), str))
    return 0


def message_chars(message: Mapping[str, Any]) -> int:
    """Characters a message carries: its content (text or text parts), its reasoning text,
    and its tool calls' argument text. This is what ``max_message_chars`` limits."""
    total = _text_chars(message.get("content")) + _text_chars(message.get("reasoning_content"))
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                total += _text_chars(function.get("arguments"))
    return total


def parse_chat_request(body: bytes, *, max_messages: int, max_message_chars: int) -> ChatRequest:
    """Parse and check a ``POST /ai/chat`` body (docs/api.md "Checks, in order").

    Args:
        body: the raw bytes (a UTF-8 byte-order mark is not stripped: it is a 400).
        max_messages: most messages accepted (exactly this many pass).
        max_message_chars: most characters in one message (see :func:`message_chars`) and in
            ``systemPrompt``.

    Returns:
        The accepted request.

    Raises:
        ProblemError: in this order — 400 ``Invalid JSON body`` (not JSON, empty, a BOM);
            400 the body is not an object (``null`` included, see module docstring); 400 a
            string (or key) anywhere in it holding a NUL or a lone surrogate (the detail names
            where, :func:`~jxai_app.core.unicode.first_unclean_path`); 400
            ``messages must be an array``; 413 too many messages; 400 a message that is not
            an object with a string ``role``; 413 a message or the system prompt too long;
            400 ``tools``/``systemPrompt``/``model`` of the wrong type.
    """
    try:  # decode first: json.loads(bytes) would strip a BOM and accept UTF-16/32
        data = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError, JSONDecodeError; nesting past the parser
        raise problem_error("invalid-request", _INVALID_JSON) from None
    if not isinstance(data, dict):
        raise problem_error("invalid-request", "The request body must be a JSON object.")
    unclean = first_unclean_path(data)
    if unclean is not None:
        raise problem_error("invalid-request", f"{unclean} holds a NUL character or a lone surrogate; "
                                               "send valid Unicode text.")
    messages = data.get("messages", [])
    if not isinstance(messages, list):
        raise problem_error("invalid-request", "messages must be an array")
    if len(messages) > max_messages:
        raise problem_error("payload-too-large",
                            f"The request carries {len(messages)} messages; this gateway accepts at most {max_messages}.")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise problem_error("invalid-request", f"messages[{index}] must be an object with a string role.")
        size = message_chars(message)
        if size > max_message_chars:
            raise problem_error("payload-too-large",
                                f"messages[{index}] has {size} characters; this gateway accepts at most "
                                f"{max_message_chars} per message.")
    system_prompt = data.get("systemPrompt")
    if system_prompt is None:
        system_prompt = ""
    if not isinstance(system_prompt, str):
        raise problem_error("invalid-request", "systemPrompt must be a string.")
    if len(system_prompt) > max_message_chars:
        raise problem_error("payload-too-large",
                            f"systemPrompt has {len(system_prompt)} characters; this gateway accepts at most "
                            f"{max_message_chars}.")
    tools = data.get("tools")
    if tools is None:
        tools = []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise problem_error("invalid-request", "tools must be an array of objects.")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise problem_error("invalid-request", "model must be a string naming a configured model.")
    return ChatRequest(messages=messages, tools=tools, system_prompt=system_prompt, model=model or None,
                       bytes=len(body))


# -- the upstream -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CallerProvider:
    """An OpenAI-compatible provider chosen by the caller (only when the deployment allows it).

    Attributes:
        checked: the base URL after the SSRF checks, with the address to connect to.
        api_key: the caller's own provider key (never a jxai token, never a server key).
    """

    checked: CheckedURL
    api_key: str = field(repr=False)


async def resolve_upstream(*, base_url: str | None, provider_key: str | None, allowed: bool,
                           resolver: Resolver, blocked: Callable[[IPAddress], bool] = is_blocked_address,
                           ) -> CallerProvider | None:
    """Decide where the request goes, before the body is read
    (docs/api.md "Caller-supplied provider (`X-Api-Base-URL`)").

    Args:
        base_url: the caller's ``X-Api-Base-URL`` header, or ``None``.
        provider_key: the caller's provider key (``X-Provider-Api-Key``), or ``None``.
        allowed: the deployment's ``JXAI_ALLOW_CLIENT_PROVIDER``.
        resolver: DNS resolver for the host check (injectable, see :mod:`jxai_app.core.ssrf`).
        blocked: the address policy.

    Returns:
        ``None`` for the configured models (the usual case), else the caller's provider.

    Raises:
        ProblemError: 403 ``forbidden`` when caller URLs are off, or the URL/host is not
            permitted (``Base URL host is not permitted. …``); 401 ``unauthorized`` when a
            caller URL comes without a caller key (the server's keys never go to a URL the
            caller picked).
    """
    if base_url is None or base_url.strip() == "":
        return None
    if not allowed:
        raise problem_error("forbidden", "This server does not accept caller-supplied provider URLs "
                                         "(X-Api-Base-URL).")
    if not provider_key:
        raise problem_error("unauthorized", "A custom base URL requires an explicit provider key "
                                            "(X-Provider-Api-Key).")
    try:
        checked = await check_base_url(base_url, resolver=resolver, blocked=blocked)
    except BlockedURLError as exc:
        raise problem_error("forbidden", str(exc)) from None
    return CallerProvider(checked=checked, api_key=provider_key)


@dataclass(slots=True)
class SelectedUpstream:
    """The client a request streams from, plus what the stream needs to clean up.

    Attributes:
        client: the streaming client (retried and masked: :func:`~jxai_app.core.streaming.guarded.guarded`).
        model: the alias (configured) or provider model id (caller provider).
        secrets: provider keys that must never appear in a frame (redacted if echoed).
        transport: a transport owned by this request, closed after the stream.
    """

    client: ChatClient
    model: str
    secrets: tuple[str, ...] = ()
    transport: PinnedTransport | None = None

    async def aclose(self) -> None:
        """Release what the request owns (the pinned transport)."""
        if self.transport is not None:
            await self.transport.aclose()


def unknown_model_detail(alias: Any, offered: Sequence[str]) -> str:
    """The refusal's words for model ``alias`` that is not configured, naming ``offered``
    (the aliases the caller may use) and nothing else."""
    return f"Unknown model {alias!r}; models you may use: {', '.join(offered) or 'none'}."


def select_client(chat: ChatRequest, caller: CallerProvider | None, *, registry: ModelRegistry,
                  timeouts: ClientTimeouts, retry: RetryPolicy,
                  build: Callable[[str], ChatClient] | None = None, secrets: Sequence[str] = (),
                  max_output_tokens: int | None = None, offered: Sequence[str] | None = None) -> SelectedUpstream:
    """Pick the streaming client for an accepted request.

    Args:
        chat: the parsed request.
        caller: the caller's provider from :func:`resolve_upstream`, or ``None``.
        registry: the model registry (aliases, tool support, provider keys).
        timeouts: connect / first-byte / idle limits.
        retry: the retry policy (``retries`` from ``upstream_retries``).
        build: ``build(alias)`` → client (default ``registry.build_client`` with ``timeouts``).
        secrets: further credentials the stream must never show (the deployment's, beside
            the provider key the request uses).
        max_output_tokens: the answer allowance the request's reservation holds, sent as its
            output limit (``ModelRegistry.build_client``; a caller's provider gets it as
            ``max_tokens``); ``None``: no limit of jxai's.
        offered: the aliases an unknown-model refusal names: the ones the caller may use
            (the caller decides; docs/security.md "Group entitlements"); ``None``: every
            configured alias.

    Returns:
        The selected upstream, its client guarded (retried, and the request's provider key
        and ``secrets`` masked in its text: :func:`~jxai_app.core.streaming.guarded.guarded`);
        its ``secrets`` are those credentials, for whole frames too.

    Raises:
        ProblemError: 400 ``invalid-request`` for an unknown alias (the detail lists the
            ``offered`` aliases, nothing else) or a caller provider without ``model``; 501
            ``capability-unavailable`` when tools are sent to a model configured without them.
    """
    if caller is not None:
        if not chat.model:
            raise problem_error("invalid-request", "model is required with a caller-supplied provider URL.")
        transport = PinnedTransport(caller.checked)
        client = OpenAIChatClient(base_url=caller.checked.url, model=chat.model, api_key=caller.api_key,
                                  timeouts=timeouts, transport=transport, max_tokens=max_output_tokens)
        masked = (caller.api_key, *secrets)
        return SelectedUpstream(guarded(client, retry=retry, secrets=masked), chat.model, masked, transport)
    try:
        model = registry.resolve(chat.model)
    except UnknownModelError:
        raise problem_error("invalid-request", unknown_model_detail(
            chat.model, registry.aliases() if offered is None else offered)) from None
    if chat.tools and not model.supports_tools:
        raise problem_error("capability-unavailable", f"The model {model.alias!r} is configured without tool "
                                                      "support; send no tools or pick another model.")
    refused = model.refused_input(chat.messages)
    if refused is not None:
        raise problem_error("capability-unavailable", refused, model=model.alias)
    configured: ChatClient = build(model.alias) if build is not None else registry.build_client(
        model.alias, timeouts=timeouts, max_output_tokens=max_output_tokens)
    key = registry.provider(model.provider).api_key
    masked = (*((key,) if key else ()), *secrets)
    return SelectedUpstream(guarded(configured, retry=retry, secrets=masked), model.alias, masked)


# -- the stream ---------------------------------------------------------------------------
def sse_frame(event: StreamEvent, secrets: Sequence[str] = ()) -> bytes:
    """One SSE frame: ``data: `` + compact JSON + blank line (docs/api.md "The event stream").

    Any of ``secrets`` (8 characters or more) found in the frame — a provider that echoes the
    key in an error text — is replaced by ``[redacted]``. Model output holding a lone
    surrogate, which UTF-8 cannot carry, goes out JSON-escaped (``\\ud800``) rather than
    breaking the stream (docs/api.md "The event stream").
    """
    text = encode_event(event)
    if not is_clean(text):  # a lone surrogate (JSON escapes NUL itself)
        text = json.dumps(event.to_dict(), separators=(",", ":"))
    for secret in secrets:
        if len(secret) >= 8 and secret in text:
            text = text.replace(secret, REDACTED)
    return f"data: {text}\n\n".encode("utf-8")


@dataclass(slots=True)
class StreamOutcome:
    """What one streamed answer cost, reported when the stream ends however it ends.

    Attributes:
        usage: ``{"inputTokens", "outputTokens", …}`` (saved usage shape).
        estimated: True when the provider sent no usage and the counts are estimates
            (input ≈ :func:`prompt_estimate` once the request reached the provider, even
            when it was stopped before any output; output ≈ produced characters / 4; both 0
            when the provider refused it with an HTTP status).
        terminal: ``"done"``, ``"error"`` or ``"disconnected"`` (the caller went away).
    """

    usage: dict[str, Any]
    estimated: bool
    terminal: str


def prompt_estimate(chat: ChatRequest) -> int:
    """The request's prompt in tokens, estimated: characters of the system prompt, the
    messages' and tools' JSON, / 4 rounded up, plus the image and PDF parts' tokens
    (:func:`~jxai_app.core.tokens.without_media`; the quota's reservation and the usage of a
    stream whose provider reported none; docs/security.md "Quota reservations")."""
    messages, media = without_media(chat.messages)
    chars = len(chat.system_prompt) + sum(len(json.dumps(m, ensure_ascii=False)) for m in messages) + \
        (len(json.dumps(chat.tools, ensure_ascii=False)) if chat.tools else 0)
    return tokens_for_chars(chars) + media


def _produced_chars(event: StreamEvent) -> int:
    """Characters of model output in an event (text, reasoning, tool names and arguments)."""
    for attr in ("content", "args", "name"):
        value = getattr(event, attr, None)
        if isinstance(value, str):
            return len(value)
    return 0


async def stream_sse(upstream: SelectedUpstream, chat: ChatRequest, *, signal: Signal | None = None,
                     on_finish: Callable[[StreamOutcome], Awaitable[None]] | None = None) -> AsyncIterator[bytes]:
    """The response body: one frame per normalised event, in order (docs/api.md "The event stream").

    Upstream failures arrive as ``error`` events with problems (the clients' boundary,
    docs/streaming.md "The client interface"). The upstream's ``secrets`` are masked in the
    streamed text across chunks (:class:`~jxai_app.core.streaming.masking.MaskingClient`)
    and in every whole frame (:func:`sse_frame`). Closing this iterator (the caller disconnected) closes the upstream
    stream and so its connection. ``on_finish`` runs exactly once at the end with the usage
    (from the ``usage`` event, else an estimate), also after a disconnect; its failures are
    its own business (they are not raised into the stream).
    """
    usage: UsageEvent | None = None
    produced = 0
    terminal = "disconnected"
    last: DoneEvent | ErrorEvent | None = None
    try:
        stream = cast(AsyncGenerator[StreamEvent, None],
                      upstream.client.stream_chat(chat.messages, chat.tools, chat.system_prompt, signal=signal))
        async with aclosing(stream) as events:
            async for event in events:
                if type(event) is UsageEvent:
                    usage = event
                else:
                    produced += _produced_chars(event)
                if type(event) is DoneEvent or type(event) is ErrorEvent:
                    terminal, last = event.type, event
                yield sse_frame(event, upstream.secrets)
    finally:
        await upstream.aclose()
        if on_finish is not None:
            if usage is not None:
                outcome = StreamOutcome(usage.to_dict(), False, terminal)
                outcome.usage.pop("type", None)
            elif produced or reached_provider(last):  # the prompt counts once it reached the provider
                outcome = StreamOutcome({"inputTokens": prompt_estimate(chat),
                                         "outputTokens": tokens_for_chars(produced)}, True, terminal)
            else:  # the provider refused it with an HTTP status: nothing to count
                outcome = StreamOutcome({"inputTokens": 0, "outputTokens": 0}, True, terminal)
            await on_finish(outcome)
