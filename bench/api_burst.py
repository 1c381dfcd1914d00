"""``POST /ai/chat`` burst benchmark (docs/operations.md "Database connections"): N simultaneous
requests (default 400, each with its own API token) at one real daphne worker, the fake
provider (its own process) answering each with 20 deltas at once.

Counts each request's outcome — a whole stream ending in ``done``, a refusal with a problem
(status and slug), an ``error`` event (its code: ``connect_timeout`` would mean the worker's
event loop could not even open the provider connection in time), an HTTP 500 — and, on
PostgreSQL, the most sessions the worker held at once (``pg_stat_activity`` rows of the
worker's own ``application_name``, :data:`WORKER_APP`, given to it in its ``DATABASE_URL``:
this process's Django has a pool of its own; sampled every 10 ms from this process). Prints the time from the first request out to the
last stream's end and the p50/p99 time to first delta.

Usage::

    .venv/bin/python bench/api_burst.py [--requests 400]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/jxai_bench .venv/bin/python bench/api_burst.py
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.burst import PROVIDER_PROGRAM  # noqa: E402  (after the path is set)
from bench.e2e import bench_models, pct, setup_django, start_provider, start_worker, stop_all  # noqa: E402


def tokens(count: int) -> list[str]:
    """``count`` users, each with an API token: the plaintexts."""
    from django.contrib.auth import get_user_model

    from jxai_app.models import ApiToken

    stamp = f"{os.getpid()}-{int(time.time())}"
    users = get_user_model().objects.bulk_create(
        [get_user_model()(username=f"api-burst-{stamp}-{i}") for i in range(count)])
    return [ApiToken.issue(user=user, name="bench")[1] for user in users]


async def one(client: Any, url: str, token: str) -> tuple[str, float | None]:
    """One request read to its end: ``(outcome, seconds to the first delta)``."""
    started = time.monotonic()
    first: float | None = None
    body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with client.stream("POST", url, json=body, headers={"Authorization": f"Bearer {token}"}) as response:
            if response.status_code != 200:
                raw = await response.aread()
                try:
                    slug = str(json.loads(raw).get("type", "")).rsplit("/", 1)[-1]
                except ValueError:
                    slug = "not-json"
                return f"http {response.status_code} {slug}", None
            outcome = "no terminal event"
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                if event["type"] == "delta" and first is None:
                    first = time.monotonic() - started
                elif event["type"] == "done":
                    outcome = "done"
                elif event["type"] == "error":
                    outcome = f"error event {event.get('code')}"
            return outcome, first
    except Exception as exc:  # the client's own failure (read timeout, reset)
        return f"client {type(exc).__name__}", None


WORKER_APP = "jxai_bench_worker"
"""The ``application_name`` of the measured worker's sessions."""


def worker_database_url(database_url: str) -> str:
    """The worker's ``DATABASE_URL``: on PostgreSQL, naming its sessions :data:`WORKER_APP`."""
    if not database_url.startswith("postgres"):
        return database_url
    return database_url + ("&" if "?" in database_url else "?") + f"application_name={WORKER_APP}"


async def sessions_peak(database_url: str, stop: asyncio.Event) -> int | None:
    """The most sessions the worker held on PostgreSQL at once (``None`` on SQLite)."""
    if not database_url.startswith("postgres"):
        return None
    import psycopg

    peak = 0
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        while not stop.is_set():
            cur = await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                     (WORKER_APP,))
            row = await cur.fetchone()
            peak = max(peak, int(row[0]) if row else 0)
            await asyncio.sleep(0.01)
    return peak


async def burst(port: int, plaintexts: list[str], database_url: str) -> dict[str, Any]:
    import httpx

    stop = asyncio.Event()
    watch = asyncio.ensure_future(sessions_peak(database_url, stop))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(120.0)) as client:
        started = time.monotonic()
        results = await asyncio.gather(*(one(client, f"http://127.0.0.1:{port}/ai/chat", t) for t in plaintexts))
        wall = time.monotonic() - started
    stop.set()
    firsts = [f for _, f in results if f is not None]
    row: dict[str, Any] = {"requests": len(results), "wall_s": round(wall, 2),
                           "outcomes": dict(collections.Counter(o for o, _ in results)),
                           "peak_sessions": await watch}
    if firsts:
        row.update({"first_delta_ms_p50": round(statistics.median(firsts) * 1000, 1),
                    "first_delta_ms_p99": round(pct(firsts, 0.99) * 1000, 1)})
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="jxai-api-burst-"))
    database_url = os.environ.get("DATABASE_URL") or f"sqlite:///{scratch / 'bench.sqlite3'}"
    provider, provider_url = start_provider(PROVIDER_PROGRAM.format(root=str(ROOT), deltas=20))
    server = None
    try:
        setup_django(database_url)
        plaintexts = tokens(args.requests)
        server, port = start_worker(worker_database_url(database_url), bench_models(provider_url),
                                    env={"DJANGO_SECURE_SSL_REDIRECT": "0"})  # plain HTTP on 127.0.0.1
        row = asyncio.run(burst(port, plaintexts, database_url))
        print(f"jxai /ai/chat burst: {args.requests} requests at once at one worker, database "
              f"{database_url.split(':')[0]}, {os.cpu_count()} CPUs")
        print(f"  {row}")
        if args.json:
            args.json.write_text(json.dumps(row, indent=2))
        return 0
    finally:
        stop_all(server, provider, scratch)


if __name__ == "__main__":
    sys.exit(main())
