"""The base of every client that wraps another (docs/streaming.md "The client interface").

A :class:`WrapperClient` is itself a streaming client: it holds the client it wraps
(``inner``) and changes what goes in or comes out of one ``stream_chat`` call. Retries
(:mod:`.retry`), credential masking (:mod:`.masking`) and a turn's limits
(``jxai_app.turns.limits``) are wrappers; :func:`jxai_app.turns.clients.turn_client` and
:func:`jxai_app.core.gateway.select_client` stack them. The pattern is pydantic-ai's
``WrapperModel``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any, cast

from jxai_app.core.streaming.base import ChatClient, Signal
from jxai_app.core.streaming.events import StreamEvent

__all__ = ["WrapperClient"]


class WrapperClient:
    """A streaming client around ``inner``; a subclass overrides :meth:`stream_chat`.

    Args:
        inner: the client to call (anything with ``stream_chat``).
    """

    def __init__(self, inner: ChatClient) -> None:
        self.inner = inner

    def inner_stream(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                     system_prompt: str | None, *, signal: Signal | None = None) -> AsyncGenerator[StreamEvent, None]:
        """``inner.stream_chat`` with the same arguments, as the async generator it is (close
        it with ``contextlib.aclosing``)."""
        return cast(AsyncGenerator[StreamEvent, None], self.inner.stream_chat(messages, tools, system_prompt,
                                                                              signal=signal))

    def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                    system_prompt: str | None, *, signal: Signal | None = None) -> AsyncIterator[StreamEvent]:
        """The inner client's events unchanged (a subclass changes them)."""
        return self.inner_stream(messages, tools, system_prompt, signal=signal)
