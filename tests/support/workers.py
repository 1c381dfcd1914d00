"""Real ``daphne`` workers for the scale-out and fault tests, and the clients that talk to them.

* :class:`Cluster` starts N ``daphne`` processes serving ``project.asgi:application`` on the
  test database, with ``DATABASE_URL`` and ``REDIS_URL`` pointed through two
  :class:`~tests.support.tcp_proxy.TcpProxy` (one for PostgreSQL, one for Redis) so a test
  can cut either without touching the shared servers, and a FakeProvider as the model
  (``JXAI_MODELS_JSON`` from :func:`tests.app.turns_support.models_config`). Every worker
  imports this checkout's code: its ``cwd`` is the checkout and ``PYTHONPATH`` starts with it.
* :class:`Worker` is one of them: its port, its process (signal it, wait for its exit) and its log.
* :func:`deaf_socket` is a websocket at the protocol level that only writes (frames from
  :func:`ws_frame`) and never reads, as a client that stopped reading does.
* :class:`WsClient` is a real websocket client (the ``websockets`` library) on ``ws/chat/``,
  logged in by session cookie (:func:`session_cookie`, :func:`make_users`); it keeps every
  frame (``chunk`` frames joined, as the page does) and every turn's event items, the close
  code, and the size of the largest message it received.

Nothing here imports pytest: ``bench/`` uses the clients and the session helpers too.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

from tests.support.database import database_url
from tests.support.net import free_port
from tests.support.tcp_proxy import TcpProxy

__all__ = ["Cluster", "Worker", "WsClient", "Frame", "deaf_socket", "kill_hard", "make_users", "session_cookie",
           "start_workers", "wait_listening", "redis_url_via", "ws_frame"]

ROOT = Path(__file__).resolve().parents[2]
"""The checkout the workers run (this file's)."""

Frame = dict[str, Any]


# -- processes ---------------------------------------------------------------------------
def wait_listening(port: int, process: subprocess.Popen[bytes], log: Path | None = None,
                   timeout: float = 30.0) -> None:
    """Return once something accepts connections on 127.0.0.1:``port``.

    Raises ``AssertionError`` (with the tail of ``log``, when given) when ``process`` exits
    first or ``timeout`` seconds pass.
    """
    import socket

    def tail() -> str:
        return f":\n{log.read_text()[-4000:]}" if log is not None else ""

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"daphne on {port} exited with {process.returncode}{tail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"daphne on {port} did not listen within {timeout} s{tail()}")


@dataclass
class Worker:
    """One running ``daphne`` process of a :class:`Cluster`."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        """Everything the worker printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, signum: int) -> None:
        """Send ``signum`` (``signal.SIGKILL``, ``signal.SIGTERM`` …) to the worker."""
        self.process.send_signal(signum)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status once the process ended, or None when it still runs after ``timeout`` s."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 15.0) -> None:
        """Terminate the process (kill it when it has not ended ``grace`` s later)."""
        if self.process.poll() is None:
            self.process.terminate()
        if self.wait_exit(grace) is None:
            self.process.kill()
            self.process.wait(5)


def start_workers(names: Iterable[str], env: Mapping[str, str], logs: Path) -> list[Worker]:
    """One ``daphne`` process per name serving ``project.asgi:application`` on a free port of
    127.0.0.1 from this checkout, with environment ``env`` and its log in
    ``logs/daphne-<name>.log``; returned once each listens (``AssertionError`` as
    :func:`wait_listening`). Stop them with :meth:`Worker.stop`."""
    started = []
    for name in names:
        port = free_port()
        log = logs / f"daphne-{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "project.asgi:application"],
                cwd=ROOT, env=dict(env), stdout=out, stderr=subprocess.STDOUT)
        started.append(Worker(name, port, process, log))
    for worker in started:
        wait_listening(worker.port, worker.process, worker.log_path)
    return started


def redis_url_via(redis_url: str, port: int) -> str:
    """``redis_url`` with its host and port replaced by ``127.0.0.1:port`` (same db number)."""
    parts = urlsplit(redis_url)
    auth = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=(auth + "@" if auth else "") + f"127.0.0.1:{port}"))


class Cluster:
    """``daphne`` workers on the test database and Redis, each through the cluster's proxies.

    Args:
        db_settings: the test connection's ``settings_dict`` (``django.db.connection.settings_dict``
            while the test database is in use); must be PostgreSQL.
        redis_url: the run's ``REDIS_URL``.
        models: the model registry the workers get as ``JXAI_MODELS_JSON``.
        logs: a folder for the workers' logs.
        env: more environment for every worker (e.g. ``JXAI_DRAIN_SECONDS``).

    :attr:`db_proxy` and :attr:`redis_proxy` run from construction to :meth:`stop`; cut them
    to play an outage for every worker at once. Use as a context manager or call :meth:`stop`.
    """

    def __init__(self, db_settings: Mapping[str, Any], redis_url: str, models: Mapping[str, Any], logs: Path,
                 env: Mapping[str, str] | None = None) -> None:
        self.db_proxy = TcpProxy((db_settings.get("HOST") or "127.0.0.1", int(db_settings.get("PORT") or 5432)))
        redis = urlsplit(redis_url)
        self.redis_proxy = TcpProxy((redis.hostname or "127.0.0.1", redis.port or 6379))
        self.db_proxy.start()
        self.redis_proxy.start()
        self.logs = logs
        self.workers: list[Worker] = []
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url({**db_settings, "HOST": "127.0.0.1", "PORT": self.db_proxy.port}),
            "REDIS_URL": redis_url_via(redis_url, self.redis_proxy.port),
            "JXAI_MODELS_JSON": json.dumps(models),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.env.pop("JXAI_MODELS_FILE", None)

    def start(self, *names: str, **env: str) -> list[Worker]:
        """Start one worker per name (in parallel) with ``env`` added; return them once each listens."""
        started = start_workers(names, {**self.env, **env}, self.logs)
        self.workers.extend(started)
        return started

    def logs_text(self) -> str:
        """Every worker's log, each under its name (to attach to a failure message)."""
        return "\n".join(f"--- daphne {w.name} ---\n{w.log()[-3000:]}" for w in self.workers)

    def stop(self) -> None:
        """Stop every worker (SIGTERM to all, SIGKILL to those still running 10 s later: a
        failed test may leave a turn that would drain or retry for long), then the proxies."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.terminate()
        deadline = time.monotonic() + 10.0
        for worker in self.workers:
            worker.stop(grace=max(0.0, deadline - time.monotonic()))
        self.db_proxy.stop()
        self.redis_proxy.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def kill_hard(worker: Worker) -> None:
    """``kill -9`` the worker and reap it."""
    worker.signal(signal.SIGKILL)
    worker.process.wait(10)


# -- sessions ----------------------------------------------------------------------------
def session_cookie(user: Any) -> str:
    """A ``Cookie`` header value with a new logged-in session of ``user`` (saved in the
    database, so any worker on it accepts it; the workers share this checkout's secret key)."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def make_users(count: int, prefix: str) -> list[tuple[Any, str]]:
    """``count`` new users (unusable passwords), each with a logged-in session:
    ``[(user, cookie header value)]``. Names carry a random run id, so a reused database
    keeps no clash with earlier runs."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    user_model = get_user_model()
    password = make_password(None)
    run = os.urandom(4).hex()
    users = user_model.objects.bulk_create([user_model(username=f"{prefix}-{run}-{i}", password=password)
                                            for i in range(count)])
    return [(user, session_cookie(user)) for user in users]


# -- websocket clients -------------------------------------------------------------------
@dataclass
class WsClient:
    """A real websocket client on one worker's ``ws/chat/``, logged in by ``cookie``.

    Every received frame is kept in :attr:`frames` (with its arrival time, ``loop.time()``,
    in :attr:`arrived`), the ``events``/``replay`` items of each turn in :attr:`items`, and
    once the server closed the socket, its close code in :attr:`close_code`. ``chunk``
    frames (docs/websocket.md "Frame size") are joined into the frame they carry;
    :attr:`largest` is the largest websocket message received, in UTF-8 bytes, and
    :attr:`chunked` counts the frames that came in chunks.
    """

    port: int
    cookie: str
    frames: list[Frame] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)
    items: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    close_code: int | None = None
    largest: int = 0
    chunked: int = 0
    ws: Any = None

    async def open(self, timeout: float = 10.0) -> Self:
        """Open the socket; raises ``AssertionError`` when the handshake is refused (e.g. HTTP 500)."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus
        from websockets.typing import Origin

        try:
            self.ws = await connect(f"ws://127.0.0.1:{self.port}/ws/chat/",
                                    origin=Origin(f"http://127.0.0.1:{self.port}"),
                                    additional_headers={"Cookie": self.cookie}, proxy=None, max_size=None,
                                    compression=None, open_timeout=timeout)
        except InvalidStatus as refused:
            raise AssertionError(f"websocket handshake on {self.port} refused: HTTP "
                                 f"{refused.response.status_code}") from refused
        return self

    async def close(self) -> None:
        """Close the socket (no-op when it is closed)."""
        if self.ws is not None:
            await self.ws.close()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send(self, **frame: Any) -> None:
        """Send one client frame (``type=…`` and its members); raises ``AssertionError`` when
        the socket is closed."""
        from websockets.exceptions import ConnectionClosed

        try:
            await self.ws.send(json.dumps(frame))
        except ConnectionClosed as closed:
            self.close_code = closed.rcvd.code if closed.rcvd is not None else 1006
            raise AssertionError(f"socket on {self.port} closed ({self.close_code}) before sending {frame}; "
                                 f"last frames: {self.tail()}") from None

    def tail(self, count: int = 4, width: int = 400) -> str:
        """The last ``count`` kept frames, each cut to ``width`` characters (for failure messages)."""
        return "\n  ".join([""] + [json.dumps(f)[:width] for f in self.frames[-count:]])

    def _keep(self, frame: Frame) -> None:
        self.frames.append(frame)
        self.arrived.append(asyncio.get_running_loop().time())
        if frame["type"] in ("events", "replay"):
            self.items.setdefault(frame["turnId"], []).extend(frame["items"])

    async def recv(self, timeout: float) -> Frame | None:
        """The next frame within ``timeout`` s (kept); None once the server closed the socket
        (:attr:`close_code` set). Raises ``TimeoutError`` when nothing arrives in time."""
        from websockets.exceptions import ConnectionClosed

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pieces: list[str] = []
        while True:
            try:
                raw = await asyncio.wait_for(self.ws.recv(), max(0.001, deadline - loop.time()))
            except ConnectionClosed as closed:
                self.close_code = closed.rcvd.code if closed.rcvd is not None else 1006
                return None
            self.largest = max(self.largest, len(raw.encode("utf-8")))
            frame: Frame = json.loads(raw)
            if frame["type"] != "chunk":
                break
            assert frame["index"] == len(pieces), f"chunk {frame['index']} after {len(pieces)} pieces"
            pieces.append(frame["data"])
            if len(pieces) == frame["count"]:
                frame = json.loads("".join(pieces))
                self.chunked += 1
                break
        self._keep(frame)
        return frame

    async def until(self, predicate: Callable[[Frame], bool], timeout: float = 15.0, what: str = "") -> Frame:
        """Receive frames until one matches ``predicate``; return it (all are kept).

        Raises ``AssertionError`` (naming ``what`` and the last frames) when none matches
        within ``timeout`` s or the socket closes first.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                frame = await self.recv(deadline - loop.time())
            except TimeoutError:
                raise AssertionError(f"no {what or 'matching frame'} within {timeout:.1f} s on {self.port}; "
                                     f"last frames: {self.tail()}") from None
            if frame is None:
                raise AssertionError(f"socket on {self.port} closed ({self.close_code}) before "
                                     f"{what or 'a matching frame'}; last frames: {self.tail()}")
            if predicate(frame):
                return frame

    async def wait_for(self, predicate: Callable[[Frame], bool], timeout: float = 15.0, what: str = "",
                       since: int = 0) -> Frame:
        """The first frame from index ``since`` of :attr:`frames` on that matches, whether it
        is already kept or still to come (then as :meth:`until`): for frames whose order
        among themselves the protocol leaves open."""
        for frame in self.frames[since:]:
            if predicate(frame):
                return frame
        return await self.until(predicate, timeout, what)

    async def until_event(self, kind: str, timeout: float = 15.0, **members: Any) -> dict[str, Any]:
        """Receive until an ``events`` item of ``kind`` (with ``members``) arrives; return the item."""
        def match(item: dict[str, Any]) -> bool:
            return item["event"]["type"] == kind and all(item["event"].get(k) == v for k, v in members.items())

        frame = await self.until(lambda f: f["type"] == "events" and any(map(match, f["items"])), timeout,
                                 what=f"{kind} event {members or ''}")
        return next(i for i in frame["items"] if match(i))

    async def until_closed(self, timeout: float = 15.0) -> int:
        """Keep receiving until the server closes the socket; return the close code (1006 when
        it went away without a close frame). Raises ``AssertionError`` after ``timeout`` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.close_code is None:
            try:
                await self.recv(deadline - loop.time())
            except TimeoutError:
                raise AssertionError(f"socket on {self.port} still open after {timeout} s") from None
        return self.close_code

    async def collect_until(self, deadline: float) -> None:
        """Keep every frame that arrives until ``loop.time()`` reaches ``deadline`` (or the close)."""
        loop = asyncio.get_running_loop()
        while self.close_code is None and loop.time() < deadline:
            try:
                await self.recv(deadline - loop.time())
            except TimeoutError:
                return

    def of_type(self, kind: str) -> list[Frame]:
        """The kept frames of ``type`` ``kind``."""
        return [f for f in self.frames if f["type"] == kind]

    def events(self, turn_id: str) -> list[dict[str, Any]]:
        """The events of a turn's kept items, in arrival order."""
        return [item["event"] for item in self.items.get(turn_id, [])]

    def text(self, turn_id: str) -> str:
        """The turn's ``delta`` text as received."""
        return "".join(e["content"] for e in self.events(turn_id) if e["type"] == "delta")


def ws_frame(text: str) -> bytes:
    """One masked client text frame (RFC 6455 section 5.2)."""
    payload = text.encode("utf-8")
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x81]) + (bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + struct.pack("!H", size))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def deaf_socket(port: int, cookie: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, socket.socket]:
    """A raw websocket on ``ws/chat/`` logged in by ``cookie`` whose handshake is done and
    which then reads nothing (receive buffer 4 KiB): write :func:`ws_frame` frames to the
    writer; the reader is there to see, later, whether the server dropped the connection."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.setblocking(False)
    await asyncio.get_running_loop().sock_connect(raw, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=raw, limit=2**20)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((f"GET /ws/chat/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  f"Origin: http://127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n").encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head[:200]
    writer.transport.pause_reading()  # it reads nothing more
    return reader, writer, raw
