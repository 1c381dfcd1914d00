"""End-to-end websocket benchmark: a real daphne worker, a real
websocket client, a fake provider on 127.0.0.1 streaming 500 deltas per answer.

Measures, in one run:

1. **Latency.** Median and p99 time to first and to last token seen by a websocket client
   (``send`` frame out → first/last ``delta`` in), next to a plain httpx client reading the
   same fake provider (request out → first/last content chunk in); prints the added time.
   Targets: added time to first token p50 ≤ 10 ms, p99 ≤ 25 ms.
2. **Load.** N concurrent streams (N = 50, 200, 500 by default) with 1,000 idle sockets open
   beside them, the provider pacing its deltas like a real model (``--pace-ms``, default 20 ms
   apart, so every stream of a round is active at the same time): completion, lost events (a missing, repeated or out-of-order seq, or delta
   text that differs from what the provider sent), wall time, and the worker's peak
   resident memory per active stream (sampled from ``/proc/<pid>/status``) and after the
   streams ended. Targets: no lost event, ≤ 200 KiB per active stream, back to baseline.

Processes: the fake provider (its own process, so it does not compete with the clients for
the GIL), one daphne worker (``project.asgi:application``), and this script (the clients).
The provider closes each connection after its answer, so every request pays a TCP connect
on both paths; ``--keep-alive`` makes it keep connections for the next request, as real
providers do, and both clients then reuse theirs.
The database is a scratch SQLite file unless ``DATABASE_URL`` is set; ``REDIS_URL`` selects
the Redis layer as in production.

Usage::

    .venv/bin/python bench/e2e.py [--samples 100] [--deltas 500] [--streams 50,200,500]
                                  [--idle 1000] [--pace-ms 20] [--json FILE] [--latency-only]
                                  [--keep-alive] [--pymalloc] [--probe]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.net import free_port  # noqa: E402  (after the path is set)
from tests.support.workers import wait_listening  # noqa: E402

PROVIDER_PROGRAM = """
import sys
sys.path.insert(0, {root!r})
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream
parts = [f"t{{i}} " for i in range({deltas})]
writes = openai_text_stream(parts, usage={{"prompt_tokens": 20, "completion_tokens": {deltas}}})

def answer(request):
    paced = isinstance(request.json, dict) and request.json.get("model") == "paced"
    return Script(writes=writes, delay={pace} if paced else 0.0, keep_alive={keep_alive})

fake = FakeProvider(handler=answer)
fake._server.socket.listen(4096)  # socketserver listens with a backlog of 5: SYN drops under load
fake.start()
print(fake.url, flush=True)
sys.stdin.read()
fake.stop()
"""


def expected_text(deltas: int) -> str:
    return "".join(f"t{i} " for i in range(deltas))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process used so far (``/proc/<pid>/stat``), in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --------------------------------------------------------------------------- setup
def setup_django(database_url: str) -> None:
    """Django in this process, on the worker's database and settings (sessions made here must
    verify there: same secret key)."""
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_LOG_LEVEL"] = "WARNING"
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SECRET_KEY", os.urandom(32).hex())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def make_users(count: int, prefix: str) -> list[tuple[Any, str]]:
    """``count`` users, each with a logged-in session: ``[(user, cookie header value)]``.

    Every socket of the bench is its own user, as in real use (a user's conversation-list
    notices go to all of that user's tabs)."""
    from tests.support.workers import make_users as logged_in_users

    return logged_in_users(count, f"bench-{prefix}")


def new_conversations(owners: list[Any], model: str = "bench") -> list[str]:
    from jxai_app.models import Conversation

    made = Conversation.objects.bulk_create([Conversation(owner=owner, model=model) for owner in owners])
    return [str(c.pk) for c in made]


def bench_models(provider_url: str) -> dict[str, Any]:
    """The worker's model registry: ``bench`` (the provider answers at once) and ``paced``
    (it paces its deltas), both at ``provider_url``."""
    return {"providers": {"fake": {"kind": "openai", "base_url": provider_url, "api_key_env": None}},
            "models": {"bench": {"provider": "fake", "model_id": "fast", "context_window": 1_000_000},
                       "paced": {"provider": "fake", "model_id": "paced", "context_window": 1_000_000}}}


def start_provider(program: str) -> tuple[subprocess.Popen[bytes], str]:
    """Run a fake provider ``program`` (Python source printing its URL first, stopping when
    its stdin closes) in its own process; return the process and that URL."""
    provider = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert provider.stdout is not None
    return provider, provider.stdout.readline().decode().strip()


def stop_all(server: subprocess.Popen[bytes] | None, provider: subprocess.Popen[bytes], scratch: Path) -> None:
    """Stop the worker (SIGTERM, up to 15 s) and the fake provider, and remove the scratch folder."""
    if server is not None:
        server.terminate()
        server.wait(15)
    if provider.poll() is None:
        provider.kill()
        provider.wait(10)
    shutil.rmtree(scratch, ignore_errors=True)


def start_worker(database_url: str, models: dict[str, Any], env: dict[str, str] | None = None,
                 launcher: tuple[str, ...] = ("-m", "daphne")) -> tuple[subprocess.Popen[bytes], int]:
    """One daphne worker of this checkout in the production profile (DEBUG off: no query log
    growing in memory), limits out of the way, on a free port; returns it and its port once
    it listens. ``env`` adds to (or overrides) that environment."""
    port = free_port()
    full = dict(os.environ, DATABASE_URL=database_url, JXAI_MODELS_JSON=json.dumps(models), DJANGO_DEBUG="0",
                DJANGO_LOG_LEVEL="WARNING", JXAI_TURNS_PER_MINUTE=str(10**9), JXAI_TOKENS_PER_DAY=str(10**15),
                PYTHONPATH=str(ROOT))
    full.update(env or {})
    full.pop("JXAI_MODELS_FILE", None)
    server = subprocess.Popen([sys.executable, *launcher, "-v", "0", "-b", "127.0.0.1", "-p", str(port),
                               "project.asgi:application"], cwd=ROOT, env=full)
    wait_listening(port, server)
    return server, port


# --------------------------------------------------------------------------- clients
async def plain_read(url: str, client: Any) -> tuple[float, float]:
    """Time to first and last content chunk reading the provider directly (seconds)."""
    body = {"model": "fast", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    started = time.perf_counter()
    first = last = 0.0
    async with client.stream("POST", url + "/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:") and '"content":"t' in line:
                last = time.perf_counter()
                if not first:
                    first = last
    return first - started, last - started


@dataclass
class Stream:
    """One websocket turn's outcome."""

    first: float = 0.0
    last: float = 0.0
    sent: float = 0.0
    """``time.monotonic()`` just before the ``send`` frame went out (one clock for every process)."""
    seqs: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    outcome: str | None = None
    error: str | None = None

    def lost(self, deltas: int) -> int:
        problems = 0 if self.seqs == list(range(1, len(self.seqs) + 1)) else 1
        text = "".join(self.text)
        missing = 0 if text == expected_text(deltas) else max(1, deltas - len(self.text))
        return problems + missing + (0 if self.outcome == "complete" else 1)


async def connect(port: int, cookie: str) -> Any:
    from websockets.asyncio.client import connect as ws_connect

    return await ws_connect(f"ws://127.0.0.1:{port}/ws/chat/", origin=f"http://127.0.0.1:{port}",
                            additional_headers={"Cookie": cookie}, proxy=None, max_size=None, compression=None,
                            ping_interval=None, open_timeout=60)


async def ws_turn(ws: Any, conversation_id: str, deltas: int, timeout: float = 120.0,
                  text: str = "Count.") -> Stream:
    """Send ``text`` and read the turn to its end; times are from the send."""
    result = Stream(sent=time.monotonic())
    started = time.perf_counter()
    await ws.send(json.dumps({"type": "send", "conversationId": conversation_id, "text": text}))
    async with asyncio.timeout(timeout):
        while result.outcome is None:
            frame = json.loads(await ws.recv())
            if frame["type"] == "error":
                raise RuntimeError(f"refused: {frame}")
            if frame["type"] != "events":
                continue
            now = time.perf_counter() - started
            for item in frame["items"]:
                result.seqs.append(item["seq"])
                event = item["event"]
                if event["type"] == "delta":
                    result.text.append(event["content"])
                    result.last = now
                    if not result.first:
                        result.first = now
                elif event["type"] == "error":
                    result.error = event.get("message")
                elif event["type"] == "turn_end":
                    result.outcome = event["outcome"]
    return result


class Sampler:
    """Samples the worker's resident memory every 20 ms while running."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._task = pid, 0, None

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_kib(self.pid))
            await asyncio.sleep(0.02)

    def __enter__(self) -> Sampler:
        self.peak = rss_kib(self.pid)
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def settle_rss(pid: int, seconds: float = 12.0, probe: bool = False) -> int:
    """The worker's RSS after ``seconds`` of rest (KiB): long enough for the worker's idle
    return of free memory (jxai_app.ops.memory: 1 s after the last turn, at most every 10 s);
    with ``probe``, it also writes a probe line (bench/worker_probe.py)."""
    await asyncio.sleep(seconds)
    if probe:
        os.kill(pid, signal.SIGUSR1)
        await asyncio.sleep(1.0)
    return rss_kib(pid)


def print_probe(path: Path) -> list[dict[str, Any]]:
    """Print, for each probe after the first, what grew since the first (the baseline)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    if not rows:
        return rows
    base = rows[0]
    print("\nprobe (after each round, against the baseline):")
    for number, row in enumerate(rows[1:], 1):
        grown = {name: count - base["types"].get(name, 0) for name, count in row["types"].items()}
        top = sorted(((c, n) for n, c in grown.items() if c), reverse=True)[:8]
        print(f"  #{number}: RSS {(row['rss_kib'] - base['rss_kib']) / 1024:+.1f} MiB, allocated blocks "
              f"{row['allocated_blocks'] - base['allocated_blocks']:+d}, full gc {row.get('gc_ms')} ms, threads {row['threads']}, tasks "
              f"{row['tasks']}; objects grown: {', '.join(f'{n} {c:+d}' for c, n in top) or 'none'}")
        if "traced_kib" in row:
            print(f"      traced {row['traced_kib'] - base['traced_kib']:+d} KiB; top: "
                  + "; ".join(f"{site} {kib:+d} KiB" for site, kib in row.get("top", [])[:6]))
    return rows


# --------------------------------------------------------------------------- the run
async def run(args: argparse.Namespace, port: int, provider_url: str, pid: int) -> dict[str, Any]:
    import httpx
    from asgiref.sync import sync_to_async

    report: dict[str, Any] = {"deltas": args.deltas, "samples": args.samples, "pace_ms": args.pace_ms}
    make = sync_to_async(new_conversations)
    users = sync_to_async(make_users)
    ((user, cookie),) = await users(1, "latency")

    # warm-up (imports, first connections)
    ws = await connect(port, cookie)
    async with httpx.AsyncClient(timeout=60) as client:
        for cid in await make([user] * 3):
            await ws_turn(ws, cid, args.deltas)
            await plain_read(provider_url, client)

        # 1. latency, one stream at a time, the two clients alternating
        plain: list[tuple[float, float]] = []
        socket_times: list[tuple[float, float]] = []
        lost = 0
        for cid in await make([user] * args.samples):
            plain.append(await plain_read(provider_url, client))
            stream = await ws_turn(ws, cid, args.deltas)
            lost += stream.lost(args.deltas)
            socket_times.append((stream.first, stream.last))
    await ws.close()

    def ms(values: list[float]) -> dict[str, float]:
        return {"p50": round(statistics.median(values) * 1000, 2), "p99": round(pct(values, 0.99) * 1000, 2)}

    report["latency"] = {
        "plain_first": ms([p[0] for p in plain]), "plain_last": ms([p[1] for p in plain]),
        "ws_first": ms([s[0] for s in socket_times]), "ws_last": ms([s[1] for s in socket_times]),
        "added_first": ms([s[0] - p[0] for s, p in zip(socket_times, plain)]),
        "added_last": ms([s[1] - p[1] for s, p in zip(socket_times, plain)]),
        "lost_events": lost,
    }
    print_latency(report["latency"], args.samples)
    if args.latency_only:
        return report

    # 2. load: N concurrent streams beside idle sockets
    idle = [await connect(port, idle_cookie) for _, idle_cookie in await users(args.idle, "idle")]
    baseline = await settle_rss(pid, probe=args.probe)
    report["baseline_rss_kib"] = baseline
    report["idle_sockets"] = len(idle)
    print(f"\n{len(idle)} idle sockets open; worker RSS {baseline / 1024:.1f} MiB; load streams paced "
          f"{args.pace_ms:g} ms per delta ({args.deltas * args.pace_ms / 1000:g} s per answer)")
    report["load"] = []
    for round_number, count in enumerate(args.streams):
        active = await users(count, f"active{round_number}")
        conversations = await make([u for u, _ in active], "paced")
        sockets = await asyncio.gather(*(connect(port, c) for _, c in active))
        before = await settle_rss(pid, 0.5)
        with Sampler(pid) as sampler:
            started = time.perf_counter()
            results = await asyncio.gather(*(ws_turn(s, c, args.deltas, timeout=300) for s, c in
                                             zip(sockets, conversations)), return_exceptions=True)
            wall = time.perf_counter() - started
        await asyncio.gather(*(s.close() for s in sockets))
        after = await settle_rss(pid, probe=args.probe)
        done = [r for r in results if isinstance(r, Stream)]
        failures = [repr(r) for r in results if not isinstance(r, Stream)]
        failures += [f"turn ended {r.outcome}: {r.error}" for r in done if r.outcome != "complete"]
        row = {
            "streams": count, "completed": sum(1 for r in done if r.outcome == "complete"),
            "lost_events": sum(r.lost(args.deltas) for r in done)
                           + sum(1 for r in results if not isinstance(r, Stream)) * args.deltas,
            "wall_s": round(wall, 2),
            "first_token_ms_p50": round(statistics.median([r.first for r in done]) * 1000, 1) if done else None,
            "last_token_ms_p50": round(statistics.median([r.last for r in done]) * 1000, 1) if done else None,
            "peak_kib_per_stream": round((sampler.peak - before) / count, 1),
            "rss_after_minus_baseline_kib": after - baseline,
            "failures": failures[:3],
        }
        report["load"].append(row)
        print(f"N={count:4d}: {row['completed']}/{count} complete, lost events {row['lost_events']}, "
              f"wall {row['wall_s']} s, first token p50 {row['first_token_ms_p50']} ms, last token p50 "
              f"{row['last_token_ms_p50']} ms, peak {row['peak_kib_per_stream']} KiB/stream, "
              f"RSS after − baseline {row['rss_after_minus_baseline_kib'] / 1024:.1f} MiB")
        for failure in row["failures"]:
            print(f"        failed: {failure[:300]}")
    await asyncio.gather(*(s.close() for s in idle))
    report["final_rss_minus_baseline_kib"] = await settle_rss(pid, probe=args.probe) - baseline
    print(f"after closing everything: RSS − baseline {report['final_rss_minus_baseline_kib'] / 1024:.1f} MiB")
    return report


def print_latency(lat: dict[str, Any], samples: int) -> None:
    print(f"latency over {samples} sequential turns (ms)         p50      p99")
    for key, label in [("plain_first", "plain httpx, first token"), ("ws_first", "websocket, first token"),
                       ("added_first", "added, first token"), ("plain_last", "plain httpx, last token"),
                       ("ws_last", "websocket, last token"), ("added_last", "added, last token")]:
        print(f"  {label:<40} {lat[key]['p50']:8.2f} {lat[key]['p99']:8.2f}")
    print(f"  lost events: {lat['lost_events']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=500)
    parser.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")], default=[50, 200, 500])
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--pace-ms", type=float, default=20.0, help="delay between deltas in the load phase")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--latency-only", action="store_true", help="measure part 1 only (no load rounds)")
    parser.add_argument("--keep-alive", action="store_true",
                        help="the fake provider keeps connections alive for the next request, as real providers "
                             "do, and both clients reuse theirs (default: it closes each one after its answer)")
    parser.add_argument("--pymalloc", action="store_true",
                        help="run the worker with CPython's own allocator instead of PYTHONMALLOC=malloc")
    parser.add_argument("--probe", action="store_true",
                        help="run the worker under bench/worker_probe.py and report live objects at each "
                             "memory reading (set PYTHONTRACEMALLOC=1 as well for allocation sites)")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="jxai-bench-"))
    database_url = os.environ.get("DATABASE_URL") or f"sqlite:///{scratch / 'bench.sqlite3'}"
    program = PROVIDER_PROGRAM.format(root=str(ROOT), deltas=args.deltas, pace=args.pace_ms / 1000,
                                      keep_alive=args.keep_alive)
    provider, provider_url = start_provider(program)
    server: subprocess.Popen[bytes] | None = None
    try:
        setup_django(database_url)
        models = bench_models(provider_url)
        # the worker as `make run` and the README start it: glibc's allocator, so that free
        # memory can go back after a burst (jxai_app.ops.memory); --pymalloc to compare
        env = {} if args.pymalloc else {"PYTHONMALLOC": "malloc"}
        launcher: tuple[str, ...] = ("-m", "daphne")
        if args.probe:
            launcher = (str(ROOT / "bench" / "worker_probe.py"),)
            env["JXAI_PROBE_FILE"] = str(scratch / "probe.jsonl")
        server, port = start_worker(database_url, models, env, launcher)
        layer = "redis" if os.environ.get("REDIS_URL") else "in-memory"
        print(f"jxai e2e bench: daphne pid {server.pid} ({env.get('PYTHONMALLOC') or 'pymalloc'}), "
              f"database {database_url.split(':')[0]}, layer {layer}, "
              f"{args.deltas} deltas per answer, provider {'keeps' if args.keep_alive else 'closes'} "
              f"connections, {os.cpu_count()} CPUs")
        report = asyncio.run(run(args, port, provider_url, server.pid))
        if args.probe:
            report["probe"] = print_probe(scratch / "probe.jsonl")
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return 0
    finally:
        provider.stdin.close()  # type: ignore[union-attr]
        stop_all(server, provider, scratch)


if __name__ == "__main__":
    sys.exit(main())
