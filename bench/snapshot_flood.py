"""Snapshot amplification (docs/websocket.md "Limits"; docs/security.md threat 4c): one user
with a long saved answer (default 4,000,000 characters, the answer cap) opens sockets that
stop reading and sends small ``subscribe`` frames for that conversation on each; meanwhile
another user's socket asks for its conversation list (``list``) every 50 ms.

Measures the other user's ``list`` round trips (p50 and max, in ms, before and during the
attack) and the worker's resident memory (baseline, peak growth during the attack, and the
growth left when it ends), against one real daphne worker of this checkout in the production
profile. The attacker's sockets are raw TCP with a small receive buffer: after the handshake
they only write (masked client frames, RFC 6455) and never read, as a client that stopped
reading does. Acceptance (the issue's): worst ``list`` under 250 ms, growth under 100 MB.

The database is a scratch SQLite file unless ``DATABASE_URL`` is set (its tables are
migrated here). Usage::

    .venv/bin/python bench/snapshot_flood.py [--chars 4000000] [--sockets 4] [--frames 30] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
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

from bench.e2e import (  # noqa: E402  (after the path is set)
    Sampler, bench_models, connect, make_users, rss_kib, setup_django, start_provider, start_worker, stop_all,
)
from tests.support.workers import deaf_socket, ws_frame  # noqa: E402

PROVIDER_PROGRAM = """
import sys
sys.path.insert(0, {root!r})
from tests.support.fake_provider import FakeProvider
fake = FakeProvider()
fake.start()
print(fake.url, flush=True)
sys.stdin.read()
fake.stop()
"""


async def list_round_trips(ws: Any, until: float, out: list[float]) -> None:
    """Ask for the first page of conversations every 50 ms until ``until`` (loop time);
    append each round trip in ms to ``out``."""
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        started = time.perf_counter()
        await ws.send(json.dumps({"type": "list"}))
        while json.loads(await ws.recv())["type"] != "conversations":
            pass
        out.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.05)


def figures(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 1), "max": round(max(values), 1), "n": len(values)}


async def run(args: argparse.Namespace, port: int, pid: int, cid: str, attacker: str, victim: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    ws = await connect(port, victim)
    before: list[float] = []
    await list_round_trips(ws, loop.time() + 3.0, before)
    baseline = rss_kib(pid)
    during: list[float] = []
    deaf = [await deaf_socket(port, attacker) for _ in range(args.sockets)]
    with Sampler(pid) as sampler:
        watch = asyncio.ensure_future(list_round_trips(ws, loop.time() + args.seconds, during))
        frame = ws_frame(json.dumps({"type": "subscribe", "conversationId": cid}))
        for _, writer, _ in deaf:
            writer.write(frame * args.frames)
        for _, writer, _ in deaf:
            try:
                await asyncio.wait_for(writer.drain(), 5.0)
            except (OSError, asyncio.TimeoutError):
                pass
        await watch
    left = rss_kib(pid)
    for _, writer, raw in deaf:
        writer.close()
        raw.close()
    await ws.close()
    return {"list_before_ms": figures(before), "list_during_ms": figures(during),
            "rss_baseline_mib": round(baseline / 1024, 1),
            "rss_peak_growth_mib": round((sampler.peak - baseline) / 1024, 1),
            "rss_growth_at_end_mib": round((left - baseline) / 1024, 1),
            "attack": {"sockets": args.sockets, "subscribe_frames": args.sockets * args.frames,
                       "answer_chars": args.chars, "seconds": args.seconds}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=4_000_000)
    parser.add_argument("--sockets", type=int, default=4)
    parser.add_argument("--frames", type=int, default=30, help="subscribe frames per socket")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the other user's lists are timed")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="jxai-flood-"))
    database_url = os.environ.get("DATABASE_URL") or f"sqlite:///{scratch / 'bench.sqlite3'}"
    provider, provider_url = start_provider(PROVIDER_PROGRAM.format(root=str(ROOT)))
    server = None
    try:
        setup_django(database_url)
        from tests.app.store_support import saved_answer  # the models need Django set up

        (owner, attacker), (_, victim) = make_users(2, "flood")
        cid = saved_answer(owner, args.chars)
        server, port = start_worker(database_url, bench_models(provider_url), {"PYTHONMALLOC": "malloc"})
        report = asyncio.run(run(args, port, server.pid, cid, attacker, victim))
        print(json.dumps(report, indent=2))
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return 0
    finally:
        provider.stdin.close()  # type: ignore[union-attr]
        stop_all(server, provider, scratch)


if __name__ == "__main__":
    raise SystemExit(main())
