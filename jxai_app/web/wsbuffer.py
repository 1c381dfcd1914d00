"""How much a websocket has sent that its client has not taken (docs/websocket.md "Limits").

An ASGI ``send`` never waits for the client: daphne hands each message to Twisted, which
keeps in memory whatever the peer's TCP window does not take. A client that stops reading
makes the worker hold every frame sent to it. Twisted tells a registered *push producer*
(``IPushProducer``, registered with the transport's public ``registerProducer(producer,
True)``) when the connection's write buffer fills past its ``bufferSize`` (64 KiB):
``pauseProducing``; and when it has drained to empty: ``resumeProducing``. The transport
holds one producer, and under daphne it already has one (the HTTP channel the websocket was
upgraded from, the transport's documented ``producer``), so :func:`attach` puts a
:class:`SendBuffer` in its place that passes every call on to it.

:class:`SendBuffer` is that producer for one socket. It reads nothing of Twisted's buffer:
the consumer tells it the bytes of each message it hands to the transport
(:meth:`SendBuffer.wrote`), and it counts those written while the transport is paused (the
write that filled the buffer included), back to 0 when Twisted resumes it. What Twisted
holds for the client is at most that count plus what it held when it paused (under
``bufferSize`` plus the one write that crossed it; the kernel's socket buffer comes on top);
the count is more than what it holds by what the client read during the pause (a client
that reads, slowly, while the worker goes on writing). The consumer checks the count against
``JXAI_WS_MAX_UNSENT_BYTES`` after each send and closes the socket with 4500 past it; and the
socket's session waits for :meth:`SendBuffer.writable` before it answers its next request
(a snapshot is not built for a client that has not taken the last one).

Only daphne's ``send`` reaches a protocol (``functools.partial(server.handle_reply,
protocol)``, which Channels' session middleware wraps and keeps as ``real_send``); under
another server (or Channels' test communicator) :func:`attach` finds none and there is no
bound.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

__all__ = ["SendBuffer", "attach"]

logger = logging.getLogger("jxai_app.consumers")


class SendBuffer:
    """Twisted's ``IPushProducer`` for one socket, counting the bytes written while paused,
    in front of the transport's earlier producer ``inner`` (told everything, or ``None``)."""

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner
        self.paused = False
        self.unsent = 0
        """Bytes handed to the transport since it paused (0 while it is not paused); see the
        module docstring for how it relates to what Twisted holds."""
        self._drained = asyncio.Event()
        self._drained.set()

    def pauseProducing(self) -> None:  # noqa: N802 (Twisted's interface)
        """Twisted: the write buffer is full."""
        self.paused = True
        self._drained.clear()
        if self.inner is not None:
            self.inner.pauseProducing()

    def resumeProducing(self) -> None:  # noqa: N802
        """Twisted: the write buffer drained."""
        self._resume()
        if self.inner is not None:
            self.inner.resumeProducing()

    def stopProducing(self) -> None:  # noqa: N802
        """Twisted: the connection is gone."""
        self._resume()
        if self.inner is not None:
            self.inner.stopProducing()

    def _resume(self) -> None:
        self.paused = False
        self.unsent = 0
        self._drained.set()

    def wrote(self, nbytes: int) -> None:
        """The consumer handed one message of ``nbytes`` bytes (its payload) to the
        transport; counted in :attr:`unsent` when the transport is paused after it."""
        if self.paused:
            self.unsent += nbytes

    async def writable(self) -> None:
        """Return once the transport takes more (at once while it is not paused)."""
        await self._drained.wait()


def attach(send: Any) -> SendBuffer | None:
    """A :class:`SendBuffer` registered on the transport of the daphne protocol behind the
    ASGI ``send`` callable (in front of the producer it had), or ``None`` when there is none
    (another server) or the transport takes no producer."""
    for _ in range(8):  # through the middleware's wrappers (Channels' sessions keep ``real_send``)
        if isinstance(send, functools.partial) or not hasattr(getattr(send, "__self__", None), "real_send"):
            break
        send = send.__self__.real_send
    protocol = send.args[0] if isinstance(send, functools.partial) and send.args else None
    transport = getattr(protocol, "transport", None)
    if transport is None or not hasattr(transport, "registerProducer"):
        return None
    earlier = getattr(transport, "producer", None)
    if earlier is not None and not getattr(transport, "streamingProducer", True):
        logger.warning("websocket: the transport has a pull producer; its unsent bytes are not bounded")
        return None
    buffer = SendBuffer(earlier)
    if earlier is not None:
        transport.unregisterProducer()
    transport.registerProducer(buffer, True)
    return buffer
