"""The fault tests' TCP proxy (:mod:`tests.support.tcp_proxy`) against a real echo server on
127.0.0.1: it forwards both ways, ``cut`` resets open connections and refuses new ones,
``restore`` forwards again. No database: runs in every pass."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.support.tcp_proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A threaded echo server on 127.0.0.1; yields its address."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(4096):
                    conn.sendall(data)
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    thread.join(2)
    server.close()


def _round_trip(address: tuple[str, int], payload: bytes = b"ping") -> bytes:
    with socket.create_connection(address, timeout=2) as conn:
        conn.sendall(payload)
        return conn.recv(4096)


def _refused(conn: socket.socket) -> bool:
    """True when the peer reset or closed ``conn`` (a read gives an error or EOF)."""
    try:
        conn.sendall(b"x")
        return conn.recv(4096) == b""
    except OSError:
        return True


def _connect_refused(address: tuple[str, int]) -> bool:
    """True when a new connection to ``address`` fails, at once or on its first exchange (a
    reset that lands during the handshake fails ``connect`` itself)."""
    try:
        conn = socket.create_connection(address, timeout=2)
    except OSError:
        return True
    with conn:
        return _refused(conn)


def test_proxy_forwards_cuts_and_restores(echo: tuple[str, int]) -> None:
    with TcpProxy(echo) as proxy:
        assert _round_trip(proxy.address) == b"ping"
        held = socket.create_connection(proxy.address, timeout=2)
        held.sendall(b"first")
        assert held.recv(4096) == b"first"
        assert proxy.accepted == 2

        proxy.cut()
        assert proxy.is_cut and proxy.open_connections() == 0
        assert _refused(held), "an open connection survived the cut"
        held.close()
        assert _connect_refused(proxy.address), "a new connection was forwarded while cut"
        assert proxy.accepted == 2

        proxy.restore()
        assert _round_trip(proxy.address, b"again") == b"again"
        assert proxy.accepted == 3
    with pytest.raises(OSError):
        _round_trip(proxy.address)
