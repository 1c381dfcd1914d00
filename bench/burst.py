"""Burst benchmark (docs/turns.md "Faults an operator can rely on", a burst of sends): N sends (default 200) arriving within one second at one
real daphne worker (or ``--workers`` of them, the sockets dealt round-robin), each from its own user and websocket,
each into its own conversation.

Measures, for each send, the time from the client's ``send`` frame to the fake provider
receiving that turn's model request (both stamped with ``time.monotonic()``, one clock for
every process of the machine; the provider runs in its own process so it does not compete
with the clients for the GIL); prints p50, p99 and max, and how many requests arrived.
Target: every model request out within 1 s of its send (p99 ≤ 1 s on PostgreSQL). It also
checks that every turn completed with no lost event (seq 1..n once each, in order, the whole
answer), as ``bench/e2e.py`` does.

The database is a scratch SQLite file unless ``DATABASE_URL`` is set (the embedded default,
in-memory layer); ``DATABASE_URL`` on PostgreSQL plus ``REDIS_URL`` is the scale-out profile.
The database must exist; its tables are migrated here. More than one worker needs the
scale-out profile (the workers share the database and the channel layer).

Usage::

    .venv/bin/python bench/burst.py [--sends 200] [--deltas 20] [--workers 1] [--json FILE]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/jxai_bench REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/burst.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.e2e import (  # noqa: E402  (after the path is set)
    Stream, bench_models, connect, cpu_seconds, make_users, new_conversations, pct, setup_django, start_provider,
    start_worker,
    stop_all,
    ws_turn,
)

PROVIDER_PROGRAM = """
import json
import sys
sys.path.insert(0, {root!r})
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream
writes = openai_text_stream([f"t{{i}} " for i in range({deltas})])
fake = FakeProvider(handler=lambda request: Script(writes=writes))
fake.start()
print(fake.url, flush=True)
sys.stdin.read()
fake.stop()
for request in fake.requests:
    messages = (request.json or {{}}).get("messages") or []
    text = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    print(json.dumps({{"text": text, "at": request.received_at}}), flush=True)
"""
"""The fake provider: answers every request with ``deltas`` deltas at once and, when its stdin
closes, prints one JSON line per request received: the last user message and when it came."""


def arrivals(provider: subprocess.Popen[bytes]) -> dict[str, float]:
    """Stop the provider; return ``{user text: monotonic time its request arrived}``."""
    assert provider.stdin is not None and provider.stdout is not None
    provider.stdin.close()
    lines = provider.stdout.read().decode().splitlines()
    provider.wait(10)
    return {row["text"]: row["at"] for row in map(json.loads, lines) if isinstance(row["text"], str)}


async def burst(ports: list[int], sends: int, deltas: int,
                pids: list[int]) -> tuple[list[tuple[str, Stream | BaseException]], float]:
    """Open ``sends`` logged-in sockets (each its own user and conversation; socket ``i`` at
    ``ports[i % len(ports)]``), then send on all of them at once and read every turn to its
    end; return ``(text, outcome)`` per send, and the CPU seconds the workers ``pids`` used
    from the sends to the last turn's end."""
    from asgiref.sync import sync_to_async

    users = await sync_to_async(make_users)(sends, "burst")
    conversations = await sync_to_async(new_conversations)([u for u, _ in users])
    sockets = []
    for first in range(0, sends, 50):  # open in slices: the handshakes are not what is measured
        sockets += await asyncio.gather(*(connect(ports[i % len(ports)], cookie)
                                          for i, (_, cookie) in enumerate(users[first:first + 50], first)))
    texts = [f"burst {os.getpid()} {i}" for i in range(sends)]
    cpu_before = sum(map(cpu_seconds, pids))
    results = await asyncio.gather(*(ws_turn(ws, cid, deltas, timeout=120, text=text)
                                     for ws, cid, text in zip(sockets, conversations, texts)),
                                   return_exceptions=True)
    cpu = sum(map(cpu_seconds, pids)) - cpu_before
    await asyncio.gather(*(ws.close() for ws in sockets))
    return list(zip(texts, results)), cpu


def report(results: list[tuple[str, Stream | BaseException]], arrived: dict[str, float], deltas: int) -> dict[str, Any]:
    """The figures: send → provider request (ms), how many arrived, completed and lost."""
    streams = [(text, r) for text, r in results if isinstance(r, Stream)]
    waits = [arrived[text] - r.sent for text, r in streams if text in arrived]
    sent = [r.sent for _, r in streams]
    row: dict[str, Any] = {
        "sends": len(results),
        "send_spread_ms": round((max(sent) - min(sent)) * 1000, 1) if sent else None,
        "requests_received": sum(1 for text, _ in results if text in arrived),
        "completed": sum(1 for _, r in streams if r.outcome == "complete"),
        "lost_events": sum(r.lost(deltas) for _, r in streams) + (len(results) - len(streams)) * deltas,
        "failures": [repr(r)[:300] for _, r in results if not isinstance(r, Stream)][:3],
    }
    if waits:
        row.update({"to_provider_ms_p50": round(statistics.median(waits) * 1000, 1),
                    "to_provider_ms_p99": round(pct(waits, 0.99) * 1000, 1),
                    "to_provider_ms_max": round(max(waits) * 1000, 1),
                    "last_token_ms_p50": round(statistics.median([r.last for _, r in streams]) * 1000, 1)})
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=200)
    parser.add_argument("--deltas", type=int, default=20, help="deltas per answer")
    parser.add_argument("--workers", type=int, default=1, help="daphne workers (more than one: scale-out profile)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="jxai-burst-"))
    database_url = os.environ.get("DATABASE_URL") or f"sqlite:///{scratch / 'bench.sqlite3'}"
    provider, provider_url = start_provider(PROVIDER_PROGRAM.format(root=str(ROOT), deltas=args.deltas))
    workers: list[tuple[subprocess.Popen[bytes], int]] = []
    try:
        setup_django(database_url)
        workers = [start_worker(database_url, bench_models(provider_url)) for _ in range(args.workers)]
        layer = "redis" if os.environ.get("REDIS_URL") else "in-memory"
        print(f"jxai burst bench: {args.sends} sends at {args.workers} daphne worker(s) "
              f"(pid {', '.join(str(w.pid) for w, _ in workers)}), database "
              f"{database_url.split(':')[0]}, layer {layer}, {args.deltas} deltas per answer, {os.cpu_count()} CPUs")
        started = time.monotonic()
        results, cpu = asyncio.run(burst([port for _, port in workers], args.sends, args.deltas,
                                         [worker.pid for worker, _ in workers]))
        wall = time.monotonic() - started
        row = report(results, arrivals(provider), args.deltas)
        row["wall_s_with_setup"] = round(wall, 1)
        row["worker_cpu_ms_per_turn"] = round(cpu * 1000 / max(1, args.sends), 1)
        print(f"  sends spread over {row['send_spread_ms']} ms; provider received {row['requests_received']}/"
              f"{row['sends']} requests; {row['completed']} completed, lost events {row['lost_events']}")
        if "to_provider_ms_p50" in row:
            print(f"  send → provider request (ms): p50 {row['to_provider_ms_p50']}  p99 {row['to_provider_ms_p99']}"
                  f"  max {row['to_provider_ms_max']}  (last token p50 {row['last_token_ms_p50']} ms)")
        print(f"  workers' CPU from the sends to the last turn's end: {row['worker_cpu_ms_per_turn']} ms per turn")
        for failure in row["failures"]:
            print(f"  failed: {failure}")
        if args.json:
            args.json.write_text(json.dumps(row, indent=2))
        return 0 if row["completed"] == row["sends"] and not row["lost_events"] else 1
    finally:
        for worker, _ in workers[1:]:
            stop_all(worker, provider, scratch)
        stop_all(workers[0][0] if workers else None, provider, scratch)


if __name__ == "__main__":
    sys.exit(main())
