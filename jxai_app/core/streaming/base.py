"""What every streaming client shares: the interface, timeouts, cancellation, HTTP, and the
one place where failures become ``error`` events (docs/streaming.md "The client interface";
docs/architecture.md "Errors").

A provider client subclasses :class:`BaseChatClient` and supplies two things: how to build
the request (:meth:`BaseChatClient._prepare`) and a :class:`Normaliser` that turns the
provider's SSE events (or a whole JSON body) into normalised events. Everything else is here:

- the ``httpx`` exchange (a fresh ``AsyncClient`` per call, the loop's client of a shared
  :class:`~jxai_app.core.streaming.pool.ConnectionPool`, or an injected transport);
- timeouts (:class:`ClientTimeouts`): connect, first byte, idle between body reads;
- cancellation: a signal (``asyncio.Event`` or anything with ``is_set()``/``wait()``) is raced
  against every network wait, so a silent provider is abandoned at once; once it is set only
  ``done: cancelled`` is yielded, and a signal set before the call sends no request;
- non-2xx answers (body read up to 64 KiB), content-type dispatch (event stream, JSON body,
  anything else is ``unexpected_response``), SSE framing (:mod:`.sse`);
- the translation boundary in :meth:`BaseChatClient.stream_chat`: ``UpstreamFault`` and every
  ``httpx`` error become exactly one ``error`` event; no exception escapes; nothing follows
  ``done``/``error``; closing the iterator (``aclose()``) closes the upstream connection.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Final, Mapping, Protocol, Sequence, runtime_checkable

import httpx
from httpx_sse import ServerSentEvent

from jxai_app.core.errors import ConfigurationError
from jxai_app.core.streaming.events import DeltaEvent, DoneEvent, ErrorEvent, StreamEvent
from jxai_app.core.streaming.fault import (
    MAX_ERROR_BODY,
    UpstreamFault,
    error_event_fault,
    http_fault,
    provider_error_fault,
    secret_values,
)
from jxai_app.core.streaming.pool import DIRECT_MOUNTS, ConnectionPool, ssl_context
from jxai_app.core.streaming.guard import Cancelled as Cancelled, Guard as Guard, Signal as Signal  # re-exported
from jxai_app.core.streaming.release import finish_response
from jxai_app.core.streaming.sse import SSEReader, is_complete_object, parse_payload


logger = logging.getLogger(__name__)

MAX_JSON_BODY: Final[int] = 16 * 1024 * 1024
"""Largest 2xx JSON (non-streamed) body read, in bytes."""

_CANCELLED: Final[DoneEvent] = DoneEvent(stop_reason="cancelled")
_TERMINAL: Final = (DoneEvent, ErrorEvent)


@dataclass(frozen=True, slots=True)
class ClientTimeouts:
    """Network time limits, in seconds; ``None`` disables one (docs/streaming.md "The client
    interface").

    Attributes:
        connect: establishing the TCP/TLS connection.
        first_byte: from the request being sent until the first byte of the response body.
        idle: between two reads of the response body once it has started.
    """

    connect: float | None = 10.0
    first_byte: float | None = 60.0
    idle: float | None = 60.0


@runtime_checkable
class ChatClient(Protocol):
    """The one interface every streaming client offers (docs/streaming.md "The client interface")."""

    def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                    system_prompt: str | None, *, signal: Signal | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one model answer as normalised events.

        Args:
            messages: the history in OpenAI wire shape (``{"role", "content", …}``).
            tools: OpenAI function tools (``{"type": "function", "function": {...}}``); may be empty.
            system_prompt: the system prompt (``""`` still sends a system message).
            signal: set it to stop: the stream ends with ``done: cancelled`` within 100 ms.

        Yields:
            ``StreamEvent`` objects, ending with exactly one ``DoneEvent`` or ``ErrorEvent``.
            Never raises for provider or network failures.
        """
        ...


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """The HTTP request a client sends: ``POST url`` with ``headers`` and JSON ``body``."""

    url: str
    headers: dict[str, str]
    body: dict[str, Any]


class Normaliser(Protocol):
    """One response's state machine from provider events to normalised events.

    ``on_event`` appends the events an SSE event gives to ``out`` (no list per event on the
    hot path); ``on_eof`` and ``on_json`` return theirs. A provider failure is raised as
    ``UpstreamFault`` after the events already produced. A ``DoneEvent`` ends the stream.
    """

    def on_event(self, sse: ServerSentEvent, out: list[StreamEvent]) -> None:
        """Append the normalised events of one SSE event to ``out``.

        Raises:
            UpstreamFault: a provider error or malformed data (events before it stay in ``out``).
        """

    def on_eof(self) -> Sequence[StreamEvent]:
        """The events at the end of the body (a stream cut short raises ``incomplete_stream``)."""

    def on_json(self, body: Any) -> Sequence[StreamEvent]:
        """The events of a whole JSON answer (``application/json`` instead of a stream;
        docs/streaming.md "Non-streamed answers"); a JSON error object raises ``UpstreamFault``."""


def event_object(sse: ServerSentEvent) -> dict[str, Any] | None:
    """The JSON object one SSE event carries, on a stream whose objects name themselves with a
    ``type`` member and that has no ``[DONE]`` sentinel (Anthropic, proxy; docs/streaming.md
    "Data payloads").

    Returns:
        The object, or ``None`` for keep-alive noise (and ``[DONE]``) to skip.

    Raises:
        UpstreamFault: an SSE ``error`` event (:func:`~.fault.error_event_fault`); data that is
            broken JSON or not an object (``invalid_stream``, :func:`~.sse.parse_payload`); an
            object with no ``type`` but a truthy ``error`` member, i.e. a provider error sent
            as data (:func:`~.fault.provider_error_fault` of that member).
    """
    if sse.event == "error":
        raise error_event_fault(sse.data)
    payload = parse_payload(sse.data, done_sentinel=False)
    if payload is None:
        return None
    assert isinstance(payload, dict)
    if "type" not in payload and payload.get("error"):
        raise provider_error_fault(payload["error"])
    return payload


class BaseChatClient:
    """Shared machinery of the three clients (see module docstring).

    Args:
        timeouts: connect / first-byte / idle limits in seconds.
        transport: an ``httpx.AsyncBaseTransport`` to use instead of the network (tests pass
            ``httpx.MockTransport``); it is not closed by the client.
        extra_headers: headers added to every request (after the client's own, so they win).
        pool: send through this pool's shared, kept-alive connections instead of a fresh
            ``AsyncClient`` per call (ignored when ``transport`` is given).
        unreachable_message: the ``error`` message (and problem ``detail``) when no connection
            to the provider can be made (refused, no route), instead of ``Network error: …``:
            which server is not answering and what to do (docs/streaming.md "Errors and their codes").
        strip_leading_whitespace: drop the whitespace an answer's text starts with (every
            response's first ``delta`` events until one has other text; docs/streaming.md "Text
            and reasoning"), for a model that starts every answer with a space.
    """

    _body_code_first: bool = False
    """Non-2xx: prefer the body's own string ``code`` over the status (docs/streaming.md "Proxy client")."""

    def __init__(self, *, timeouts: ClientTimeouts | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 extra_headers: Mapping[str, str] | None = None, pool: ConnectionPool | None = None,
                 unreachable_message: str | None = None, strip_leading_whitespace: bool = False) -> None:
        self.timeouts = timeouts or ClientTimeouts()
        self.transport = transport
        self.pool = pool if transport is None else None
        self.extra_headers: dict[str, str] = dict(extra_headers or {})
        self.unreachable_message = unreachable_message
        self.strip_leading_whitespace = strip_leading_whitespace

    # -- what a provider supplies ----------------------------------------------------------
    async def _prepare(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                       system_prompt: str, guard: Guard) -> PreparedRequest:
        """Build the request. It may await (a lazily resolved URL) through ``guard.wait`` so
        that the cancel signal interrupts it."""
        raise NotImplementedError

    def _normaliser(self) -> Normaliser:
        """A fresh normaliser for one response."""
        raise NotImplementedError

    # -- what the providers share -------------------------------------------------------------
    def _headers(self, own: Mapping[str, str | None]) -> dict[str, str]:
        """A request's headers: JSON in and an event stream out, then the client's ``own``
        (in order; an entry whose value is ``None`` or empty, e.g. no key configured, is left
        out), then ``extra_headers``, which win."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        for name, value in own.items():
            if value:
                headers[name] = value
        headers.update(self.extra_headers)
        return headers

    # -- the boundary ------------------------------------------------------------------------
    async def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                          system_prompt: str | None, *, signal: Signal | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one answer as normalised events (see :class:`ChatClient`; docs/streaming.md "The client
        interface").

        This is the client's single translation boundary: ``UpstreamFault`` (provider and
        framing failures), ``httpx`` timeouts and transport errors, and any unexpected
        exception become one ``error`` event; ``Cancelled`` becomes ``done: cancelled``.

        Raises:
            ConfigurationError: only from the proxy client, when its lazily resolved chat URL
                fails to resolve and the signal is not set (docs/streaming.md "Proxy client"). Nothing else raises.
        """
        if signal is not None and signal.is_set():
            yield _CANCELLED
            return
        guard = Guard(signal)
        batches: AsyncIterator[Sequence[StreamEvent]] | None = None
        secrets: tuple[str, ...] = ()  # the request's credentials, never echoed in an error
        try:
            guard.start()
            prepared = await self._prepare(messages, list(tools or ()), system_prompt or "", guard)
            secrets = secret_values(prepared.headers)
            if guard.cancelled:
                raise Cancelled()
            batches = self._exchange(prepared, guard)
            is_set = signal.is_set if signal is not None else None
            strip = self.strip_leading_whitespace
            async for batch in batches:
                for event in batch:
                    if is_set is not None and is_set():
                        raise Cancelled()
                    if strip and type(event) is DeltaEvent:
                        text = event.content.lstrip()
                        if not text:
                            continue
                        strip = False
                        event = DeltaEvent(content=text)
                    yield event
                    if type(event) is DoneEvent or type(event) is ErrorEvent:
                        return
            raise UpstreamFault("incomplete_stream", "The provider's answer ended without a result.")
        except Cancelled:
            yield _CANCELLED
        except ConfigurationError:  # the proxy's chat-URL resolver failed (docs/streaming.md "Proxy client")
            if not guard.cancelled:
                raise
            yield _CANCELLED
        except UpstreamFault as fault:
            yield _CANCELLED if guard.cancelled else fault.to_event(secrets)
        except httpx.TimeoutException as exc:
            yield _CANCELLED if guard.cancelled else _timeout_event(exc, self.timeouts)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            yield _CANCELLED if guard.cancelled else _network_event(exc, self.unreachable_message)
        except Exception as exc:  # a bug of ours: still one error event, never a raise
            if guard.cancelled:
                yield _CANCELLED
            else:
                logger.exception("streaming client failed")
                yield UpstreamFault("internal_error", f"Internal error in the streaming client ({type(exc).__name__}).",
                                    slug="internal-error").to_event()
        finally:
            guard.close()
            if batches is not None:
                await batches.aclose()  # type: ignore[attr-defined]

    async def _exchange(self, prepared: PreparedRequest, guard: Guard) -> AsyncIterator[Sequence[StreamEvent]]:
        """Send the request and yield batches of events; raise faults; close the connection."""
        timeouts = self.timeouts
        loop = asyncio.get_running_loop()
        limits = httpx.Timeout(connect=timeouts.connect, read=None, write=None, pool=None)
        pool = self.pool
        # shared: only this response is closed below (and its connection when unfinished)
        client = self._own_client(limits) if pool is None else pool.client()
        response: httpx.Response | None = None
        events: AsyncIterator[Sequence[StreamEvent]] | None = None
        complete = False
        try:
            request = client.build_request("POST", prepared.url, headers=prepared.headers, json=prepared.body,
                                           timeout=limits)
            first_byte = timeouts.first_byte
            # Until the request is on the wire the connect limit applies too; then the
            # first-byte clock restarts (httpx's trace hook tells us when).
            deadline = [_after(loop.time(), timeouts.connect, first_byte)]

            async def trace(name: str, info: Mapping[str, Any]) -> None:
                if not name.endswith("receive_response_headers.started"):
                    return
                if first_byte is not None:
                    when = loop.time() + first_byte
                    deadline[0] = when
                    guard.expire(when)

            request.extensions["trace"] = trace
            first_msg = f"The provider did not start answering within {first_byte:g} s." if first_byte else ""
            try:
                response = await guard.wait(client.send(request, stream=True), deadline[0], first_msg)
            except _DROPPED_KEPT_CONNECTION:
                if pool is None:
                    raise
                # A pooled connection the server dropped while it was idle (docs/streaming.md
                # "Connections"): nothing was answered, so the request goes once more, on a new
                # connection of its own (the pool may hold more that the server dropped too).
                pool, client = None, self._own_client(limits)
                response = await guard.wait(client.send(request, stream=True), deadline[0], first_msg)
            if not 200 <= response.status_code < 300:
                body = await self._read(response, guard, deadline[0], MAX_ERROR_BODY, truncate=True)
                raise http_fault(response.status_code, response.reason_phrase, body,
                                 response.headers.get("content-type", ""), body_code_first=self._body_code_first)
            normaliser = self._normaliser()
            mime = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if mime == "application/json" or mime.endswith("+json"):
                body = await self._read(response, guard, deadline[0], MAX_JSON_BODY, truncate=False)
                yield normaliser.on_json(_json_or_fault(body))
                return
            if mime not in ("text/event-stream", "", "text/plain"):
                raise UpstreamFault("unexpected_response",
                                    f"The provider answered with {mime}, which is neither an event stream "
                                    "nor a chat completion.")
            events = self._read_events(response, guard, deadline[0], normaliser)
            async for batch in events:
                complete = pool is not None and type(batch[-1]) in _TERMINAL
                yield batch
        finally:
            if response is not None:  # a complete pooled answer's end is read: its connection is kept
                await finish_response(response, events if complete else None)
            if pool is None and self.transport is None:
                await client.aclose()

    def _own_client(self, limits: httpx.Timeout) -> httpx.AsyncClient:
        """A client for one request, closed after it (no pool, or the second try of a request
        a kept connection failed)."""
        return httpx.AsyncClient(transport=self.transport, timeout=limits, follow_redirects=False,
                                 verify=ssl_context() if self.transport is None else True,
                                 mounts=None if self.transport is not None else DIRECT_MOUNTS)

    async def _read_events(self, response: httpx.Response, guard: Guard, deadline: float | None,
                           normaliser: Normaliser) -> AsyncIterator[Sequence[StreamEvent]]:
        """The SSE hot path: read, frame, normalise; one batch per network read."""
        idle = self.timeouts.idle
        loop = asyncio.get_running_loop()
        reader = SSEReader()
        chunks = response.aiter_bytes().__aiter__()
        message = f"The provider did not start answering within {self.timeouts.first_byte:g} s." \
            if self.timeouts.first_byte else ""
        idle_message = f"The provider sent nothing for {idle:g} s." if idle else ""
        on_event = normaliser.on_event
        while True:
            try:
                chunk = await guard.wait(chunks.__anext__(), deadline, message)
            except StopAsyncIteration:
                break
            deadline = None if idle is None else loop.time() + idle
            message = idle_message
            batch: list[StreamEvent] = []
            try:
                for sse in reader.feed(chunk):
                    on_event(sse, batch)
            except UpstreamFault:
                if batch:
                    yield batch
                raise
            if batch:
                yield batch
        last = reader.close()
        if last is not None and is_complete_object(last.data):
            batch = []
            on_event(last, batch)
            yield batch
        yield normaliser.on_eof()

    @staticmethod
    async def _read(response: httpx.Response, guard: Guard, deadline: float | None, limit: int, *,
                    truncate: bool) -> bytes:
        """Read up to ``limit`` bytes of the body (the rest is left unread: the connection
        is closed afterwards). Beyond the limit: truncate, or fail with ``unexpected_response``."""
        parts: list[bytes] = []
        size = 0
        chunks = response.aiter_bytes().__aiter__()
        while size < limit:
            try:
                chunk = await guard.wait(chunks.__anext__(), deadline, "The provider stopped sending its answer.")
            except StopAsyncIteration:
                break
            parts.append(chunk)
            size += len(chunk)
        body = b"".join(parts)
        if size >= limit and not truncate:
            raise UpstreamFault("unexpected_response", f"The provider's JSON answer is larger than {limit} bytes.")
        return body[:limit]


def _after(now: float, connect: float | None, first_byte: float | None) -> float | None:
    return None if first_byte is None else now + first_byte + (connect or 0.0)


def _json_or_fault(body: bytes) -> Any:
    import json

    try:
        return json.loads(body)
    except ValueError:
        raise UpstreamFault("unexpected_response", "The provider answered with a JSON content type but the body "
                                                   "is not valid JSON.") from None


def _timeout_event(exc: httpx.TimeoutException, timeouts: ClientTimeouts) -> ErrorEvent:
    if isinstance(exc, httpx.ConnectTimeout):
        message = f"Could not connect to the provider within {timeouts.connect:g} s." if timeouts.connect \
            else "Could not connect to the provider in time."
    else:
        message = "The provider did not answer in time."
    return UpstreamFault("timeout", message, slug="upstream-timeout").to_event()


_DROPPED_KEPT_CONNECTION: Final = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
"""What sending on a kept connection whose server went away raises before any answer."""


def _network_event(exc: httpx.HTTPError | httpx.InvalidURL, unreachable_message: str | None) -> ErrorEvent:
    if unreachable_message and isinstance(exc, httpx.ConnectError):
        return UpstreamFault("network_error", unreachable_message).to_event()
    if isinstance(exc, httpx.RemoteProtocolError):
        reason = "the connection closed before the answer was complete"
    elif isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        reason = f"the provider URL is not usable ({exc})"
    else:
        reason = str(exc) or type(exc).__name__
    return UpstreamFault("network_error", f"Network error: {reason}").to_event()
