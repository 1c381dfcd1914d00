"""How much a websocket has sent that its client has not taken (docs/websocket.md "Limits").

An ASGI ``send`` never waits for the client: daphne hands each message to Twisted, which
keeps in memory whatever the peer's TCP window does not take. A client that stops reading
makes the worker hold every frame sent to it. Twisted tells a registered *push producer*
when the connection's write buffer fills past its ``bufferSize`` (``pauseProducing``) and
when it has drained (``resumeProducing``). The transport holds one producer, and under
daphne it already has one (the HTTP channel the websocket was upgraded from), so
:func:`attach` puts a :class:`SendBuffer` in its place that passes every call on to it.

:class:`SendBuffer` is that producer for one socket: the bytes sent while the transport is
paused are bytes the client has not taken (a lower bound: Twisted's own 64 KiB and the
kernel's buffer come on top), and they fall back to 0 once it resumes. The consumer checks
them against ``JXAI_WS_MAX_UNSENT_BYTES`` after each send and closes the socket with 4500
past it.

Only daphne's ``send`` reaches a protocol (``functools.partial(server.handle_reply,
protocol)``, which Channels' session middleware wraps and keeps as ``real_send``); under
another server (or Channels' test communicator) :func:`attach` finds none and there is no
bound.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

__all__ = ["SendBuffer", "attach"]

logger = logging.getLogger("jxai_app.consumers")


class SendBuffer:
    """Twisted's ``IPushProducer`` for one socket, counting what it sends while paused, in
    front of the transport's earlier producer ``inner`` (told everything, or ``None``)."""

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner
        self.paused = False
        self.unsent = 0
        """Bytes sent since the transport paused (0 while it takes everything)."""

    def pauseProducing(self) -> None:  # noqa: N802 (Twisted's interface)
        """Twisted: the write buffer is full."""
        self.paused = True
        if self.inner is not None:
            self.inner.pauseProducing()

    def resumeProducing(self) -> None:  # noqa: N802
        """Twisted: the write buffer drained."""
        self.paused, self.unsent = False, 0
        if self.inner is not None:
            self.inner.resumeProducing()

    def stopProducing(self) -> None:  # noqa: N802
        """Twisted: the connection is gone."""
        self.paused = False
        if self.inner is not None:
            self.inner.stopProducing()

    def sent(self, size: int) -> int:
        """``size`` more bytes were handed to the server; returns :attr:`unsent`."""
        if self.paused:
            self.unsent += size
        return self.unsent


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
