"""Exit 0 when the PostgreSQL and Redis URLs given as arguments both accept a TCP connection.

Used by ``make test-scaleout`` to decide whether the PostgreSQL + Redis run can go ahead.
"""

from __future__ import annotations

import socket
import sys
from urllib.parse import urlsplit


def reachable(url: str, default_port: int, timeout: float = 2.0) -> bool:
    """True when ``url``'s host and port accept a TCP connection within ``timeout`` seconds."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout):
            return True
    except OSError:
        return False


def main(argv: list[str]) -> int:
    """``services_up DATABASE_URL REDIS_URL`` → exit 0 when both answer, 1 otherwise."""
    database_url, redis_url = argv
    ok = reachable(database_url, 5432) and reachable(redis_url, 6379)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
