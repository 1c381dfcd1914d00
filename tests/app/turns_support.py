"""Helpers for the turn-runner and websocket tests: a loopback provider wired into the model
registry, a hub torn down after each test, and :class:`Tab`, a browser tab played by
Channels' ``WebsocketCommunicator`` that keeps what it received.

Import the fixtures into a test module (``from tests.app.turns_support import fake, hub``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, Callable

import pytest
from channels.testing import WebsocketCommunicator

from jxai_app import conf
from jxai_app.consumers import ChatConsumer
from jxai_app.turns import start
from jxai_app.turns.hub import TurnHub
from jxai_app.turns.plan import TurnPlan
from jxai_app.turns.runner import TurnRunner
from jxai_app.turns.worker import get_hub
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream, openai_tool_call_stream

MODEL = "fake-model"
DOWN_MODEL = "down-model"


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def models_config(base_url: str, *, down_url: str | None = None) -> dict[str, Any]:
    """A registry with ``fake-model`` at ``base_url`` (and ``down-model`` at ``down_url``)."""
    providers: dict[str, Any] = {"fake": {"kind": "openai", "base_url": base_url, "api_key_env": None}}
    models: dict[str, Any] = {MODEL: {"provider": "fake", "model_id": "m", "context_window": 1000,
                                      "supports_tools": True}}
    if down_url:
        providers["down"] = {"kind": "openai", "base_url": down_url, "api_key_env": None}
        models[DOWN_MODEL] = {"provider": "down", "model_id": "m", "context_window": 1000}
    return {"providers": providers, "models": models, "roles": {"default": MODEL}}


@contextmanager
def provider_registry(settings: Any, registry: Callable[[str], dict[str, Any]]) -> Iterator[FakeProvider]:
    """A FakeProvider on 127.0.0.1 and, while it runs, ``registry(its base URL)`` as the model registry."""
    provider = FakeProvider().start()
    settings.JXAI_MODELS = registry(provider.url)
    conf.reset_caches()
    try:
        yield provider
    finally:
        provider.stop()
        conf.reset_caches()


@pytest.fixture
def fake(settings: Any) -> Iterator[FakeProvider]:
    """A FakeProvider on 127.0.0.1 configured as the default model (``fake-model``), plus a
    ``down-model`` whose port refuses connections."""
    down = f"http://127.0.0.1:{closed_port()}/v1"
    with provider_registry(settings, lambda url: models_config(url, down_url=down)) as provider:
        yield provider


@pytest.fixture
def probe_tools(settings: Any, fake: FakeProvider) -> Iterator[None]:
    """The deployment's registry with ``probe`` added (``JXAI_TOOL_MODULES`` = ``tests.app.ws_tools``),
    its recorded calls cleared before and after."""
    from tests.app import ws_tools

    settings.JXAI_TOOL_MODULES = ["tests.app.ws_tools"]
    conf.reset_caches()
    ws_tools.CALLS.clear()
    yield
    ws_tools.CALLS.clear()
    conf.reset_caches()


async def send_turn(hub: TurnHub, follower: Any = None, **send: Any) -> tuple[TurnPlan, TurnRunner]:
    """Start a turn as a socket does: the plan of ``start.send(hub, **send)``, followed by
    ``follower`` (when given) before it is launched."""
    plan = await start.send(hub, **send)
    if follower is not None:
        hub.delivery.follow(plan.conversation_id, follower)
    return plan, start.launch(hub, plan)


@pytest.fixture
async def hub() -> AsyncIterator[TurnHub]:
    """This test's worker hub; every turn is stopped and awaited at teardown."""
    current = get_hub()
    yield current
    await current.shutdown(timeout=5.0)


def text_script(parts: list[str], *, delay: float = 0.0, usage: dict[str, Any] | None = None,
                stall_after: int | None = None) -> Script:
    return Script(writes=openai_text_stream(parts, usage=usage), delay=delay, stall_after=stall_after)


def tool_script(call_id: str, name: str, args: dict[str, Any], *, text: list[str] = ()) -> Script:  # type: ignore[assignment]
    payload = json.dumps(args)
    return Script(writes=openai_tool_call_stream(call_id, name, [payload[: len(payload) // 2],
                                                                payload[len(payload) // 2:]], text=list(text),
                                                 usage={"prompt_tokens": 50, "completion_tokens": 10}))


class Tab:
    """One browser tab on ``ws/chat/`` (scope user set directly, as AuthMiddleware would).

    Every received frame is kept in :attr:`frames`; ``events`` items per turn in
    :attr:`items` (after the tab's own seq check, like the page's sequencer).
    """

    def __init__(self, user: Any, consumer: type[ChatConsumer] = ChatConsumer) -> None:
        self.comm = WebsocketCommunicator(consumer.as_asgi(), "/ws/chat/")
        self.comm.scope["user"] = user
        self.frames: list[dict[str, Any]] = []
        self.items: dict[str, list[dict[str, Any]]] = {}

    async def open(self) -> Tab:
        connected, _ = await self.comm.connect()
        assert connected
        return self

    async def close(self) -> None:
        await self.comm.disconnect()

    async def send(self, **frame: Any) -> None:
        await self.comm.send_json_to(frame)

    async def send_raw(self, text: str | None = None, data: bytes | None = None) -> None:
        await self.comm.send_to(text_data=text, bytes_data=data)

    def _keep(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)
        if frame["type"] in ("events", "replay"):
            self.items.setdefault(frame["turnId"], []).extend(frame["items"])
        elif frame["type"] == "snapshot" and frame.get("turn"):
            self.items[frame["turn"]["turnId"]] = list(frame["turn"]["items"])

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        frame = await self.comm.receive_json_from(timeout)
        self._keep(frame)
        return frame

    async def until(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> dict[str, Any]:
        """Receive frames until one matches; return it (all are kept)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"no matching frame within {timeout} s; last frames: {self.frames[-5:]}")
            frame = await self.recv(timeout=left)
            if predicate(frame):
                return frame

    async def until_event(self, kind: str, timeout: float = 10.0, **members: Any) -> dict[str, Any]:
        """Receive until an event item of ``kind`` (with ``members``) arrives; return the item."""
        def has(frame: dict[str, Any]) -> bool:
            return any(self._match(item, kind, members) for item in self._frame_items(frame))

        frame = await self.until(has, timeout)
        return next(item for item in self._frame_items(frame) if self._match(item, kind, members))

    @staticmethod
    def _frame_items(frame: dict[str, Any]) -> list[dict[str, Any]]:
        if frame["type"] in ("events", "replay"):
            return list(frame["items"])
        if frame["type"] == "snapshot" and frame.get("turn"):
            return list(frame["turn"]["items"])
        return []

    @staticmethod
    def _match(item: dict[str, Any], kind: str, members: dict[str, Any]) -> bool:
        event = item["event"]
        return event["type"] == kind and all(event.get(k) == v for k, v in members.items())

    async def quiet(self, timeout: float = 0.3) -> bool:
        """True when nothing arrives within ``timeout`` seconds."""
        return await self.comm.receive_nothing(timeout)

    def events(self, turn_id: str | None = None) -> list[dict[str, Any]]:
        """The kept items of a turn (the only turn when ``turn_id`` is None)."""
        if turn_id is None:
            assert len(self.items) == 1, list(self.items)
            turn_id = next(iter(self.items))
        return self.items[turn_id]

    def text(self, turn_id: str | None = None, kind: str = "delta") -> str:
        return "".join(i["event"]["content"] for i in self.events(turn_id) if i["event"]["type"] == kind)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == kind]


def assert_in_order(items: list[dict[str, Any]]) -> None:
    """Seqs are exactly 1, 2, 3 … (each once, in order)."""
    assert [i["seq"] for i in items] == list(range(1, len(items) + 1))


class Recorder:
    """A follower that keeps every frame pushed to it (what a socket would get)."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.ended = asyncio.Event()

    def deliver(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)
        if frame["type"] == "conversation" and frame["conversation"]["status"] != "streaming":
            self.ended.set()

    def refresh(self) -> None:
        self.frames.append({"type": "refresh"})

    def items(self) -> list[dict[str, Any]]:
        return [i for f in self.frames if f["type"] == "events" for i in f["items"]]
