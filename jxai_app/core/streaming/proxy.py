"""The proxy client: talks to a backend that already speaks normalised events, such as jxai's
own ``POST /ai/chat`` (docs/streaming.md "Proxy client").

``POST chat_url`` with ``{messages, tools, systemPrompt, model}``; ``X-Api-Key`` and
``X-Api-Base-URL`` only when configured. Each SSE data object is an event and is
re-yielded after the shared data rules (docs/streaming.md "Data payloads"): noise is skipped, JSON that is not an
object or is broken is ``invalid_stream``, objects that are not valid events are skipped,
``[DONE]`` is ignored. The stream stops at the first ``done``/``error``; a body that
ends with neither is ``incomplete_stream`` — a ``done`` is never invented. On a
non-2xx answer the body's own string ``code`` is the event code before the status.

``chat_url`` may be a function (sync or async) returning the URL; it is resolved inside the
first stream, once, and reused. A signal set during resolution gives
``done: cancelled`` and sends nothing; a resolver failure without a signal
raises :class:`~jxai_app.core.errors.ConfigurationError` out of ``stream_chat``.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable, Final, Mapping, Sequence, Union

import httpx
from httpx_sse import ServerSentEvent

from jxai_app.core.errors import ConfigurationError, InvalidEventError
from jxai_app.core.problems import problem
from jxai_app.core.streaming.base import BaseChatClient, ClientTimeouts, Guard, Normaliser, PreparedRequest, event_object
from jxai_app.core.streaming.events import ErrorEvent, StreamEvent, event_from_dict
from jxai_app.core.streaming.fault import UpstreamFault, provider_error_fault
from jxai_app.core.streaming.pool import ConnectionPool

DEFAULT_PROXY_MODEL: Final[str] = "gpt-4o"
"""Model sent when none is configured (docs/streaming.md "Proxy client")."""

ChatURL = Union[str, Callable[[], Union[str, Awaitable[str]]]]


class ProxyNormaliser:
    """Normalised events on the wire → the same events, validated (docs/streaming.md "Proxy client")."""

    __slots__ = ()

    def on_event(self, sse: ServerSentEvent, out: list[StreamEvent]) -> None:
        """One SSE event: its object re-yielded when it is a valid event (an ``error`` event
        given its missing ``code``/``problem``), skipped when it is not."""
        payload = event_object(sse)
        if payload is None:
            return
        try:
            event = event_from_dict(payload)
        except InvalidEventError:
            return  # not an event this client knows: skipped
        if isinstance(event, ErrorEvent) and (event.code is None or event.problem is None):
            event = ErrorEvent(message=event.message, code=event.code or "upstream_error",
                               problem=event.problem or problem("upstream-failure", event.message))
        out.append(event)

    def on_eof(self) -> Sequence[StreamEvent]:
        """A proxy stream must end with ``done`` or ``error``: reaching EOF first is
        ``incomplete_stream`` (docs/streaming.md "Proxy client")."""
        raise UpstreamFault("incomplete_stream", "The stream ended without a done or error event.")

    def on_json(self, body: Any) -> Sequence[StreamEvent]:
        """A JSON answer is an error object (``provider_error``) or ``unexpected_response``."""
        if type(body) is dict and body.get("error"):
            raise provider_error_fault(body["error"])
        raise UpstreamFault("unexpected_response", "The backend answered with JSON instead of an event stream.")


class ProxyChatClient(BaseChatClient):
    """Streaming client for a backend that emits normalised events over SSE.

    Args:
        chat_url: the endpoint, or a (sync or async) function returning it, resolved once.
        model: sent as ``model``; ``gpt-4o`` when not given.
        api_key: sent as ``X-Api-Key`` when set (a jxai API token for jxai's ``/ai/chat``).
        api_base_url: sent as ``X-Api-Base-URL`` when set.
        extra_headers: added to every request.
        timeouts: connect / first-byte / idle limits in seconds.
        transport: an ``httpx`` transport instead of the network (tests).
        pool: shared kept-alive connections (:class:`~jxai_app.core.streaming.pool.ConnectionPool`).
        unreachable_message: what the ``error`` says when no connection can be made
            (:class:`~.base.BaseChatClient`).
    """

    _body_code_first = True

    def __init__(self, *, chat_url: ChatURL, model: str | None = None, api_key: str | None = None,
                 api_base_url: str | None = None, extra_headers: Mapping[str, str] | None = None,
                 timeouts: ClientTimeouts | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 pool: ConnectionPool | None = None, unreachable_message: str | None = None) -> None:
        super().__init__(timeouts=timeouts, transport=transport, extra_headers=extra_headers, pool=pool,
                         unreachable_message=unreachable_message)
        self.chat_url = chat_url
        self.model = model
        self.api_key = api_key
        self.api_base_url = api_base_url
        self._resolved: str | None = chat_url if isinstance(chat_url, str) else None
        self._resolving: asyncio.Future[str] | None = None

    async def _url(self, guard: Guard) -> str:
        if self._resolved is not None:
            return self._resolved
        if self._resolving is None:
            self._resolving = asyncio.ensure_future(self._resolve())
        try:
            url: str = await guard.wait(asyncio.shield(self._resolving), None, "")
        except ConfigurationError:
            self._resolving = None  # a later stream may try again
            raise
        self._resolved = url
        return url

    async def _resolve(self) -> str:
        assert callable(self.chat_url)
        try:
            value = self.chat_url()
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            raise ConfigurationError(f"could not resolve the proxy chat URL: {exc}") from exc
        if not isinstance(value, str) or not value:
            raise ConfigurationError("the proxy chat URL resolver returned no URL")
        return value

    async def _prepare(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                       system_prompt: str, guard: Guard) -> PreparedRequest:
        url = await self._url(guard)
        headers = self._headers({"X-Api-Key": self.api_key, "X-Api-Base-URL": self.api_base_url})
        body = {"messages": list(messages), "tools": list(tools), "systemPrompt": system_prompt,
                "model": self.model or DEFAULT_PROXY_MODEL}
        return PreparedRequest(url, headers, body)

    def _normaliser(self) -> Normaliser:
        return ProxyNormaliser()
