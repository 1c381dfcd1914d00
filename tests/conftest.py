"""Suite-wide test settings.

Persistent database connections (``CONN_MAX_AGE`` 60 s in ``project/settings.py``) are kept
by the worker threads of ``sync_to_async``; in tests they would outlive a test and keep
PostgreSQL from dropping the test database at the end of the session. Tests use one
connection per request/operation instead, as Django's own test runner assumes.

That alone closes nothing in a worker thread: Django closes connections at a request's end,
and its test clients switch even that off. The app's own async-to-sync database calls close
theirs (:mod:`jxai_app.db`); what tests run there themselves (Django's async ORM,
``sync_to_async``) is closed after each test by :func:`_close_shared_sync_thread_connections`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from asgiref.sync import SyncToAsync
from django.conf import settings
from django.db import connections


def pytest_configure(config: pytest.Config) -> None:
    """Turn persistent connections off before pytest-django creates the test database, and
    PostgreSQL's connection pool in this process (``project/settings.py`` turns it on): a
    pooled connection stays open after its call, and the tests check that what they ran left
    none. The ``daphne`` workers the tests start read the environment and use the pool
    (tests/app/test_db_pool.py)."""
    for alias in settings.DATABASES.values():
        alias["CONN_MAX_AGE"] = 0
        alias.get("OPTIONS", {}).pop("pool", None)


@pytest.fixture(autouse=True)
def _close_shared_sync_thread_connections() -> Iterator[None]:
    """After each test, close the connections of asgiref's shared sync thread, where
    ``sync_to_async`` and Django's async ORM (``aget``, ``asave`` …) run outside a request;
    one left open at the end of the session keeps PostgreSQL from dropping the test database
    ("is being accessed by other users")."""
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)
