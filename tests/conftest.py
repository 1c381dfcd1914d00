"""Suite-wide test settings.

Persistent database connections (``CONN_MAX_AGE`` 60 s in ``project/settings.py``) are kept
by the worker threads of ``sync_to_async``; in tests they would outlive a test and keep
PostgreSQL from dropping the test database at the end of the session. Tests use one
connection per request/operation instead, as Django's own test runner assumes.
"""

from __future__ import annotations

import pytest
from django.conf import settings


def pytest_configure(config: pytest.Config) -> None:
    """Turn persistent connections off before pytest-django creates the test database."""
    for alias in settings.DATABASES.values():
        alias["CONN_MAX_AGE"] = 0
