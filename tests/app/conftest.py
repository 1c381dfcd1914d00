"""Fixtures for the Django-layer tests: users, fake clocks (the store's monotonic one and
ratelimit's wall clock), a write counter, and websocket steps the turn tests share."""

from __future__ import annotations


import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pytest
from django.db import connection

if TYPE_CHECKING:
    from tests.app.turns_support import Tab


NOON = datetime(2025, 3, 4, 12, 0, 0, tzinfo=timezone.utc).timestamp()
"""A fixed wall-clock instant (Unix seconds): the start of a minute window, 12 h before
midnight UTC. Where :func:`wall_clock` starts."""


class FakeClock:
    """A clock the test moves by hand: ``now`` in seconds (set it, or :meth:`advance` it)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class WriteCounter:
    """Counts INSERT/UPDATE/DELETE statements run on the default connection, each statement
    of a batch sent in one round trip (``store.sql.fetch_together`` on PostgreSQL) apart."""

    _WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)

    def __init__(self) -> None:
        self.statements: list[str] = []

    @property
    def count(self) -> int:
        return len(self.statements)

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        self.statements.extend(part for part in sql.split(";\n") if self._WRITE.match(part))
        return execute(sql, params, many, context)


@contextmanager
def count_writes() -> Iterator[WriteCounter]:
    """Count the writes of the block (this thread's connection)."""
    counter = WriteCounter()
    with connection.execute_wrapper(counter):
        yield counter


async def start_streaming(tab: Tab, text: str, *, delta_frames: int = 1) -> str:
    """Send ``text`` on ``tab`` as the first message of a new conversation and return once
    ``delta_frames`` frames carrying a ``delta`` event have arrived (the answer is streaming).

    Returns the new conversation's id, from the ``conversation`` frame the send answers with
    first. Raises ``AssertionError`` when a delta is more than 10 s apart (``Tab.until_event``).
    """
    await tab.send(type="send", conversationId=None, text=text)
    for _ in range(delta_frames):
        await tab.until_event("delta")
    return str(tab.frames[0]["conversation"]["id"])


async def watch_one_turn(tabs: Sequence[Tab], conversation_id: str, text: str) -> list[dict[str, Any]]:
    """Subscribe every tab to the conversation, send ``text`` from the first, and wait until
    each tab has seen the turn end and the conversation go back to idle.

    Returns the ``snapshot`` frame each tab got on subscribing, in the order of ``tabs``.
    Raises ``AssertionError`` when a tab waits more than 10 s for a frame (``Tab.until``).
    """
    snapshots = []
    for tab in tabs:
        await tab.send(type="subscribe", conversationId=conversation_id)
        snapshots.append(await tab.until(lambda f: f["type"] == "snapshot"))
    await tabs[0].send(type="send", conversationId=conversation_id, text=text)
    for tab in tabs:
        await tab.until_event("turn_end")
        await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    return snapshots


@pytest.fixture
def clock() -> FakeClock:
    """A monotonic clock at 1000.0 s, for the store code that takes ``clock=``."""
    return FakeClock()


@pytest.fixture
def wall_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """``jxai_app.policy.ratelimit.clock`` (Unix seconds) frozen at :data:`NOON` for the test."""
    fixed = FakeClock(NOON)
    monkeypatch.setattr("jxai_app.policy.ratelimit.clock", fixed)
    return fixed


@pytest.fixture
def no_answer_reserve(settings: Any) -> None:
    """``JXAI_RESERVE_OUTPUT_TOKENS = 0``: a request reserves only its prompt estimate, so
    quota tests with allowances of tens of tokens admit a request while its prompt fits (the
    reservation itself: tests/app/test_quota_reservations.py)."""
    settings.JXAI_RESERVE_OUTPUT_TOKENS = 0


@pytest.fixture
def user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice")


@pytest.fixture
def other_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("mallory")


@contextmanager
def production_static(static_root: Any) -> Iterator[None]:
    """Static files as a deployment serves them: ``DEBUG`` off, ``collectstatic`` into
    ``static_root`` with WhiteNoise's hashed (manifest) storage, no finders. Make a fresh
    ``Client()`` inside: WhiteNoise indexes ``STATIC_ROOT`` when its handler starts."""
    from django.core.management import call_command
    from django.test import override_settings

    storages = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    with override_settings(DEBUG=False, STATIC_ROOT=static_root, STORAGES=storages, WHITENOISE_USE_FINDERS=False,
                           WHITENOISE_AUTOREFRESH=False):
        call_command("collectstatic", interactive=False, verbosity=0)
        yield
