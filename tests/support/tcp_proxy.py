"""A small TCP proxy the fault tests put between a worker and a server (PostgreSQL, Redis).

The proxy listens on ``127.0.0.1:<free port>`` and forwards every connection to a target
``(host, port)``, byte for byte, in background threads: so sync tests, async tests and
subprocesses (daphne workers) can all go through it. A fault is played without touching
the shared server itself:

* :meth:`TcpProxy.cut` resets every open connection (both sides, so the server ends the
  session and releases its locks) and, until :meth:`TcpProxy.restore`, resets each new
  connection as soon as it is accepted: the client sees the server as unreachable
  (``connection reset``) at once, with no timeout to wait out.
* :meth:`TcpProxy.restore` forwards new connections again.

Typical use::

    with TcpProxy(("127.0.0.1", 5432)) as proxy:
        url = f"postgres://postgres@127.0.0.1:{proxy.port}/test_x"   # give this to the worker
        ...
        proxy.cut()        # the database is gone for whoever goes through the proxy
        ...
        proxy.restore()

:attr:`TcpProxy.accepted` counts the connections forwarded so far (a test can check that a
worker really goes through the proxy).
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Self

__all__ = ["TcpProxy"]

_CHUNK = 65536


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset (linger 0), waking any thread blocked reading it."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class _Link:
    """One forwarded connection: the client's socket and the upstream one."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client, self.upstream = client, upstream
        self._lock = threading.Lock()
        self._open = 2  # pump threads still running

    def pump_done(self) -> bool:
        """A direction ended: close both sockets once both directions have (then True)."""
        with self._lock:
            self._open -= 1
            last = self._open == 0
        if last:
            self.client.close()
            self.upstream.close()
        return last

    def reset(self) -> None:
        """Reset both sides (the pump threads then see an error or EOF and end)."""
        _reset(self.client)
        _reset(self.upstream)


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target``; :meth:`cut` and :meth:`restore` play an outage.

    Args:
        target: ``(host, port)`` of the real server.
        connect_timeout: seconds to wait for the upstream connection of each new client.

    Start it with :meth:`start` or ``with``; :meth:`stop` (or leaving the ``with`` block)
    closes the listening socket and every connection.
    """

    def __init__(self, target: tuple[str, int], *, connect_timeout: float = 5.0) -> None:
        self.target = target
        self.connect_timeout = connect_timeout
        self.accepted = 0
        """Connections forwarded to the target so far (not counting those refused while cut)."""
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._cut = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name=f"tcp-proxy-{self.port}", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        """``("127.0.0.1", port)``: where clients connect."""
        return ("127.0.0.1", self.port)

    @property
    def is_cut(self) -> bool:
        """True between :meth:`cut` and :meth:`restore`."""
        return self._cut

    def open_connections(self) -> int:
        """How many forwarded connections are open now."""
        with self._lock:
            return len(self._links)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> Self:
        """Accept and forward connections in a background thread (``with`` does this)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, reset every open connection and wait for the accept thread."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._listener.close()
        self._reset_all()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults ------------------------------------------------------------------------
    def cut(self) -> None:
        """Reset every open connection now and refuse (reset) new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
        self._reset_all()

    def restore(self) -> None:
        """Forward new connections again (the ones reset by :meth:`cut` stay closed)."""
        with self._lock:
            self._cut = False

    # -- the forwarding ----------------------------------------------------------------
    def _reset_all(self) -> None:
        with self._lock:
            links, self._links = list(self._links), set()
        for link in links:
            link.reset()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self._cut:
                _reset(client)
                continue
            threading.Thread(target=self._open_link, args=(client,), daemon=True,
                             name=f"tcp-proxy-{self.port}-link").start()

    def _open_link(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=self.connect_timeout)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(client, upstream)
        with self._lock:
            if self._cut or self._stopped.is_set():
                refused = True
            else:
                refused = False
                self._links.add(link)
                self.accepted += 1
        if refused:
            link.reset()
            return
        threading.Thread(target=self._pump, args=(link, client, upstream), daemon=True).start()
        self._pump(link, upstream, client)

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket) -> None:
        """Copy ``source`` to ``sink`` until EOF or an error; pass the EOF on (half-close)."""
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            if link.pump_done():
                with self._lock:
                    self._links.discard(link)
