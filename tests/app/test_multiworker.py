"""Two daphne workers sharing PostgreSQL and Redis (marker ``scaleout``; docs/turns.md "Delivery").

Runs in the scale-out pass (``make test-scaleout``: ``DATABASE_URL`` on PostgreSQL and
``REDIS_URL`` set). The embedded default (SQLite file, in-memory layer) cannot share state
between processes, so there the module is skipped with that reason; the same cross-worker
paths are covered in one process by ``test_turns.py`` (two hubs on one layer).

Two real ``daphne`` processes on their own ports serve ``project.asgi:application`` with the
test database and Redis; a real websocket client (``websockets``) logged in by session
cookie talks to each. The provider is a FakeProvider on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync_to_async

from tests.app.turns_support import MODEL, models_config, text_script
from tests.support.fake_provider import FakeProvider

_DATABASE_URL = os.environ.get("DATABASE_URL", "")
_SCALEOUT = _DATABASE_URL.startswith(("postgres://", "postgresql://")) and bool(os.environ.get("REDIS_URL"))

pytestmark = [
    pytest.mark.scaleout,
    pytest.mark.skipif(not _SCALEOUT, reason="two worker processes need a shared PostgreSQL (DATABASE_URL) and "
                       "Redis (REDIS_URL); the embedded SQLite/in-memory default cannot share state across "
                       "processes (run `make test-scaleout`)"),
    pytest.mark.django_db(transaction=True),
]

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"daphne on {port} exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"daphne on {port} did not listen within {timeout} s:\n{log.read_text()[-4000:]}")


def _test_database_url() -> str:
    """``DATABASE_URL`` pointing at the database this test session created (``test_…``)."""
    from urllib.parse import urlsplit, urlunsplit

    from django.db import connection

    parts = urlsplit(_DATABASE_URL)
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


@pytest.fixture
def provider(settings: Any) -> Iterator[FakeProvider]:
    fake = FakeProvider().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def workers(provider: FakeProvider, tmp_path: Path) -> Iterator[list[int]]:
    """Two daphne processes (ports) sharing the test database and Redis."""
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": _test_database_url(),
        "JXAI_MODELS_JSON": json.dumps(models_config(provider.url)),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONUNBUFFERED": "1",
    })
    env.pop("JXAI_MODELS_FILE", None)
    processes: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for name in ("a", "b"):
            port = _free_port()
            log = tmp_path / f"daphne-{name}.log"
            with log.open("wb") as out:
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "project.asgi:application"],
                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
            _wait_listening(port, processes[-1], log)
            ports.append(port)
        yield ports
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


class Client:
    """A real websocket client on one worker; keeps frames and turn items."""

    def __init__(self, port: int, cookie: str) -> None:
        self.port, self.cookie = port, cookie
        self.frames: list[dict[str, Any]] = []
        self.items: dict[str, list[dict[str, Any]]] = {}

    async def __aenter__(self) -> Client:
        from websockets.asyncio.client import connect

        self.ws = await connect(f"ws://127.0.0.1:{self.port}/ws/chat/", origin=f"http://127.0.0.1:{self.port}",
                                additional_headers={"Cookie": self.cookie}, proxy=None, max_size=None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.ws.close()

    async def send(self, **frame: Any) -> None:
        await self.ws.send(json.dumps(frame))

    async def until(self, predicate: Any, timeout: float = 15.0) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            frame = json.loads(await asyncio.wait_for(self.ws.recv(), max(0.01, deadline - loop.time())))
            self.frames.append(frame)
            if frame["type"] in ("events", "replay"):
                self.items.setdefault(frame["turnId"], []).extend(frame["items"])
            if predicate(frame):
                return frame

    async def until_event(self, kind: str, timeout: float = 15.0, **members: Any) -> dict[str, Any]:
        def match(item: dict[str, Any]) -> bool:
            return item["event"]["type"] == kind and all(item["event"].get(k) == v for k, v in members.items())

        frame = await self.until(lambda f: f["type"] == "events" and any(map(match, f["items"])), timeout)
        return next(i for i in frame["items"] if match(i))


def _login(user: Any) -> str:
    from django.conf import settings
    from django.test import Client as HttpClient

    client = HttpClient()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def _saved(conversation_id: str) -> list[tuple[str, str, str]]:
    from jxai_app.models import Message

    return list(Message.objects.filter(conversation_id=conversation_id).order_by("position")
                .values_list("role", "content", "status"))


async def test_two_daphne_workers_share_a_conversation(user: Any, provider: FakeProvider, workers: list[int]) -> None:
    from jxai_app import store

    port_a, port_b = workers
    cookie = await sync_to_async(_login)(user)
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    cid = str(conversation.pk)
    parts = [f"{i}|" for i in range(300)]
    provider.add(text_script(parts, delay=0.002), text_script([f"s{i} " for i in range(2000)], delay=0.01))

    async with Client(port_a, cookie) as a, Client(port_b, cookie) as b:
        for client in (a, b):
            await client.send(type="subscribe", conversationId=cid)
            await client.until(lambda f: f["type"] == "snapshot")

        # 1. sent on A, streamed on A and B: the same events in the same order
        await a.send(type="send", conversationId=cid, text="Count for both workers.")
        for client in (a, b):
            await client.until_event("turn_end", outcome="complete")
            await client.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
        (first_turn,) = a.items
        assert a.items[first_turn] == b.items[first_turn]
        assert [i["seq"] for i in b.items[first_turn]] == list(range(1, len(b.items[first_turn]) + 1))
        assert "".join(i["event"]["content"] for i in b.items[first_turn] if i["event"]["type"] == "delta") == \
            "".join(parts)

        # 2. Stop sent through B stops the turn running on A
        await a.send(type="send", conversationId=cid, text="Talk until B stops you.")
        await b.until_event("delta")
        loop = asyncio.get_running_loop()
        asked = loop.time()
        await b.send(type="cancel", conversationId=cid)
        end = await b.until_event("turn_end", timeout=3)
        assert end["event"]["outcome"] == "cancelled" and loop.time() - asked < 1.0
        await a.until_event("turn_end", outcome="cancelled")
        assert provider.wait_closed(2.0)
        second_turn = next(t for t in a.items if t != first_turn)
        assert a.items[second_turn] == b.items[second_turn]
        await a.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")

        # 3. the saved conversation is identical whichever worker is asked
        snapshots = []
        for client in (a, b):
            await client.send(type="subscribe", conversationId=cid)
            snapshots.append(await client.until(lambda f: f["type"] == "snapshot"))
        assert snapshots[0] == snapshots[1]
        assert snapshots[0]["turn"] is None and snapshots[0]["conversation"]["status"] == "idle"

    saved = await sync_to_async(_saved)(cid)
    assert [(role, status) for role, _, status in saved] == [
        ("user", "complete"), ("assistant", "complete"), ("user", "complete")]
    assert saved[1][1] == "".join(parts)
    assert [m["content"] for m in snapshots[0]["messages"]] == [content for _, content, _ in saved]
