"""How much a websocket has sent that its client has not taken (docs/websocket.md "Limits").

An ASGI ``send`` never waits for the client: daphne hands each message to Twisted, which
keeps in memory whatever the peer's TCP window does not take. A client that stops reading
makes the worker hold every frame sent to it. Twisted tells a registered *push producer*
when the connection's write buffer fills past its ``bufferSize`` (``pauseProducing``) and
when it has drained (``resumeProducing``). The transport holds one producer, and under
daphne it already has one (the HTTP channel the websocket was upgraded from), so
:func:`attach` puts a :class:`SendBuffer` in its place that passes every call on to it.

:class:`SendBuffer` is that producer for one socket. While the transport is paused, the
bytes the client has not taken are what Twisted still holds for it (its write buffer:
``dataBuffer`` from ``offset``, plus the writes not yet joined to it; the kernel's socket
buffer comes on top); while it is not paused they are under Twisted's ``bufferSize``
(64 KiB) and count as 0. The consumer checks them against ``JXAI_WS_MAX_UNSENT_BYTES``
after each send and closes the socket with 4500 past it; and the socket's session waits for
:meth:`SendBuffer.writable` before it answers its next request (a snapshot is not built for
a client that has not taken the last one).

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
    """Twisted's ``IPushProducer`` for one socket, counting what it sends while paused, in
    front of the transport's earlier producer ``inner`` (told everything, or ``None``)."""

    def __init__(self, transport: Any, inner: Any = None) -> None:
        self.transport, self.inner = transport, inner
        self.paused = False
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
        self.paused = False
        self._drained.set()
        if self.inner is not None:
            self.inner.resumeProducing()

    def stopProducing(self) -> None:  # noqa: N802
        """Twisted: the connection is gone."""
        self.paused = False
        self._drained.set()
        if self.inner is not None:
            self.inner.stopProducing()

    async def writable(self) -> None:
        """Return once the transport takes more (at once while it is not paused)."""
        await self._drained.wait()

    @property
    def unsent(self) -> int:
        """Bytes Twisted holds for the client while the transport is paused (else 0)."""
        if not self.paused:
            return 0
        held = len(getattr(self.transport, "dataBuffer", b"")) - int(getattr(self.transport, "offset", 0))
        return held + int(getattr(self.transport, "_tempDataLen", 0))


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
    buffer = SendBuffer(transport, earlier)
    if earlier is not None:
        transport.unregisterProducer()
    transport.registerProducer(buffer, True)
    return buffer
