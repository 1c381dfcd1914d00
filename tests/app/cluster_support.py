"""Fixtures for the tests that run real ``daphne`` workers on PostgreSQL and Redis
(``test_multiworker.py``, ``test_faults.py``): import them into the test module
(``from tests.app.cluster_support import SCALEOUT_MARKS, cluster, provider``).

* :data:`SCALEOUT_MARKS`: the module's ``pytestmark``: marker ``scaleout``, skipped with the
  reason on the embedded default (SQLite file, in-memory layer: nothing shared between
  processes), and a transactional database (the workers see committed rows only).
* ``provider``: a FakeProvider on 127.0.0.1, the workers' ``fake-model``.
* ``cluster``: a :class:`~tests.support.workers.Cluster` on the test database and the run's
  Redis, both through its proxies; start workers with ``cluster.start("a", "b")``. Every
  worker is stopped at teardown, and their logs are printed (pytest shows them on failure).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.turns_support import models_config
from tests.support.fake_provider import FakeProvider
from tests.support.workers import Cluster, WsClient

__all__ = ["SCALEOUT", "SCALEOUT_MARKS", "cluster", "provider", "saved_messages"]

_DATABASE_URL = os.environ.get("DATABASE_URL", "")
SCALEOUT = _DATABASE_URL.startswith(("postgres://", "postgresql://")) and bool(os.environ.get("REDIS_URL"))
"""True in the scale-out pass (``DATABASE_URL`` on PostgreSQL and ``REDIS_URL`` set)."""

SCALEOUT_MARKS = [
    pytest.mark.scaleout,
    pytest.mark.skipif(not SCALEOUT, reason="worker processes need a shared PostgreSQL (DATABASE_URL) and "
                       "Redis (REDIS_URL); the embedded SQLite/in-memory default cannot share state across "
                       "processes (run `make test-scaleout`)"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    """A FakeProvider on 127.0.0.1 (scripts queued with ``provider.add``)."""
    fake = FakeProvider().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def cluster(provider: FakeProvider, tmp_path: Path) -> Iterator[Cluster]:
    """Workers on the test database and Redis through the cluster's proxies (none started yet)."""
    from django.db import connection

    with Cluster(connection.settings_dict, os.environ["REDIS_URL"], models_config(provider.url), tmp_path) as made:
        yield made
        print(made.logs_text())


def saved_messages(conversation_id: Any) -> list[tuple[str, str, str]]:
    """``(role, content, status)`` of the conversation's saved messages, in order (read
    directly, not through the proxy)."""
    from jxai_app.models import Message

    return list(Message.objects.filter(conversation_id=conversation_id).order_by("position")
                .values_list("role", "content", "status"))


async def subscribe(clients: list[WsClient], conversation_id: str) -> None:
    """Subscribe every client to the conversation and wait for each one's snapshot."""
    for client in clients:
        await client.send(type="subscribe", conversationId=conversation_id)
        await client.until(lambda f: f["type"] == "snapshot", what="snapshot")
