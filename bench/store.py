"""Database writes per assistant message through the chat store's ``TurnRecorder``.

Each scenario runs a whole turn against a fresh SQLite file (WAL, IMMEDIATE, as deployed)
with a simulated clock, counts INSERT/UPDATE/DELETE statements, and prints writes per
assistant message next to the budget of issue 7 (4 + one per 2 s of streaming + 2 per tool
call). It also times the recorder's memory-only path (``add_delta``) and a whole turn.

    .venv/bin/python bench/store.py [--database-url sqlite:////tmp/x.sqlite3]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Scenario:
    """A turn: ``rounds`` rounds of ``deltas`` text deltas over ``seconds`` each, the first
    ``rounds - 1`` ending with ``calls`` tool calls of ``arg_deltas`` argument fragments."""

    name: str
    deltas: int
    seconds: float
    rounds: int = 1
    calls: int = 0
    arg_deltas: int = 0


SCENARIOS = (
    Scenario("short answer (20 deltas, 1 s)", deltas=20, seconds=1.0),
    Scenario("long answer (5,000 deltas, 60 s)", deltas=5_000, seconds=60.0),
    Scenario("tool-heavy (4 rounds x 3 calls, 300 deltas + 3x200 arg fragments, 8 s a round)",
             deltas=300, seconds=8.0, rounds=4, calls=3, arg_deltas=200),
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Writes:
    WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if self.WRITE.match(sql):
            self.count += 1
        return execute(sql, params, many, context)


def run_turn(store: Any, user: Any, scenario: Scenario) -> tuple[int, int, float]:
    """Run one turn; returns (writes, assistant messages, wall seconds)."""
    from django.db import connection

    clock = Clock()
    conversation = store.conversation_create(user=user, model="bench")
    writes = Writes()
    started = time.perf_counter()
    with connection.execute_wrapper(writes):
        recorder = store.TurnRecorder(
            store.message_send(user=user, conversation_id=conversation.pk, text="bench"), clock=clock)
        for round_no in range(scenario.rounds):
            if round_no:
                recorder.begin_round()
            tool_round = round_no < scenario.rounds - 1 and scenario.calls > 0
            fragments = scenario.deltas + (scenario.calls * (scenario.arg_deltas + 1) if tool_round else 0)
            step = scenario.seconds / fragments
            for _ in range(scenario.deltas):
                clock.now += step
                if recorder.add_delta("token "):
                    recorder.flush()
            if tool_round:
                for n in range(scenario.calls):
                    clock.now += step
                    recorder.tool_call_start(f"call_{n}", "bench_tool")
                    for _ in range(scenario.arg_deltas):
                        clock.now += step
                        if recorder.tool_call_delta(f"call_{n}", "xy"):
                            recorder.flush()
                    recorder.tool_call_end(f"call_{n}")
                recorder.finish_round(stop_reason="tool_calls", usage={"inputTokens": 100, "outputTokens": 50})
                for n in range(scenario.calls):
                    recorder.attach_tool_result(call_id=f"call_{n}", content='{"success":true,"data":1}')
            else:
                recorder.finish_round(stop_reason="stop", usage={"inputTokens": 100, "outputTokens": 50},
                                      last=True)
    return writes.count, scenario.rounds, time.perf_counter() - started


def budget(scenario: Scenario) -> int:
    """Issue 7's bound for the whole turn: per assistant message 4 + ⌊seconds / 2⌋, plus 2
    per tool call."""
    per_message = 4 + math.floor(scenario.seconds / 2.0)
    tool_calls = scenario.calls * (scenario.rounds - 1)
    return per_message * scenario.rounds + 2 * tool_calls


def memory_path_ns(store: Any, user: Any, deltas: int = 200_000) -> float:
    """Nanoseconds per ``add_delta`` when no flush is due (the per-delta cost the runner pays)."""
    conversation = store.conversation_create(user=user, model="bench")
    recorder = store.TurnRecorder(store.message_send(user=user, conversation_id=conversation.pk, text="x"),
                                  clock=Clock())
    started = time.perf_counter_ns()
    for _ in range(deltas):
        recorder.add_delta("tok ")
    elapsed = time.perf_counter_ns() - started
    recorder.cancel()
    return elapsed / deltas


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="database to use (default: a fresh temporary SQLite file)")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="jxai-bench-store-")
    os.environ["DATABASE_URL"] = args.database_url or f"sqlite:///{tmp.name}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from jxai_app import store

    call_command("migrate", verbosity=0, interactive=False)
    user, _ = get_user_model().objects.get_or_create(username="bench-store")
    print(f"{'scenario':<82} {'writes':>6} {'per msg':>8} {'budget':>6} {'turn ms':>8}")
    within = True
    for scenario in SCENARIOS:
        writes, messages, wall = run_turn(store, user, scenario)
        limit = budget(scenario)
        within &= writes <= limit
        print(f"{scenario.name:<82} {writes:>6} {writes / messages:>8.2f} {limit:>6} {wall * 1000:>8.1f}")
    print(f"add_delta memory path: {memory_path_ns(store, user):.0f} ns per delta (no write)")
    print("all within budget" if within else "OVER BUDGET")
    tmp.cleanup()
    return 0 if within else 1


if __name__ == "__main__":
    raise SystemExit(main())
