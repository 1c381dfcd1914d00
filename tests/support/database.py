"""The test database as a ``DATABASE_URL``, for subprocesses (workers, daphne) that must use
the database the test run created."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote


def database_url(settings: Mapping[str, Any]) -> str:
    """A ``DATABASE_URL`` (as ``project.settings`` parses it) for a Django connection's
    ``settings_dict``, e.g. ``django.db.connection.settings_dict`` while the test database is
    in use.

    SQLite gives ``sqlite:///<absolute path>``; PostgreSQL gives
    ``postgres://user[:password]@host[:port]/name`` with each part percent-encoded (host
    127.0.0.1 when unset). Raises ``RuntimeError`` for any other engine.
    """
    engine = settings["ENGINE"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{Path(settings['NAME']).resolve()}"
    if "postgresql" in engine:
        user = quote(settings.get("USER") or "", safe="")
        password = quote(settings.get("PASSWORD") or "", safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = settings.get("HOST") or "127.0.0.1"
        port = f":{settings['PORT']}" if settings.get("PORT") else ""
        return f"postgres://{auth}{host}{port}/{quote(settings['NAME'], safe='')}"
    raise RuntimeError(f"no DATABASE_URL form for a {engine} test database")
