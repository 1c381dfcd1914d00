"""What the metrics hook costs per delta: the runner's per-event path with and without it.

For each event the turn runner numbers it, appends it to the replay log, hands it to the
turn's :class:`~jxai_app.turns.observe.TurnObserver` and publishes it to the followers
(``TurnRunner._event``); a follower encodes each frame as JSON for its socket. This bench runs
exactly that path over one turn's events (a round of 20,000 deltas with usage, a tool round
before it) in two variants, alternated in the same run:

1. **with metrics**: a real ``TurnObserver`` (Prometheus counters and histograms, tracing off);
2. **without**: the same loop with no observer call.

It prints nanoseconds per event for each (the fastest of the rounds: what the code costs,
less the other processes' interference on a shared machine) and their ratio, and the hook alone. Target: the ratio ≤ 1.05 (no measurable time per delta: the observer's work per
delta is one failed dict lookup after the turn's first output).

Run: ``.venv/bin/python bench/metrics.py`` (a few seconds). Exit status 1 when the target is missed.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
os.environ["JXAI_MODELS_JSON"] = json.dumps({
    "providers": {"bench": {"kind": "openai", "base_url": "http://bench.test/v1", "api_key_env": None}},
    "models": {"bench-model": {"provider": "bench", "model_id": "m", "price": {"input_per_mtok": 0,
                                                                               "output_per_mtok": 0}}}})

import django  # noqa: E402

django.setup()

from jxai_app.turns.observe import TurnObserver  # noqa: E402
from jxai_app.turns.delivery import LocalDelivery  # noqa: E402
from jxai_app.turns.framing import encode  # noqa: E402
from jxai_app.turns.replay import ReplayLog  # noqa: E402

DELTAS = 20_000
ROUNDS = 11
TARGET = 1.05


class Follower:
    """A socket's receiving end that encodes every frame, as the session's writer does."""

    def __init__(self) -> None:
        self.bytes = 0

    def deliver(self, frame: dict[str, Any]) -> None:
        self.bytes += len(encode(frame))

    def refresh(self) -> None:
        pass


def turn_events() -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": "{\"expression\":\"1\"}"}}
    events: list[dict[str, Any]] = [
        {"type": "round_start", "round": 1},
        {"type": "tool_call_start", "id": "c1", "name": "calculate"},
        {"type": "tool_call_delta", "id": "c1", "args": call["function"]["arguments"]},
        {"type": "tool_call_end", "id": "c1"},
        {"type": "done", "stopReason": "tool_calls"},
        {"type": "round_end", "round": 1, "stopReason": "tool_calls", "message": {"tool_calls": [call]}},
        {"type": "tool_start", "callId": "c1", "name": "calculate", "arguments": "{}"},
        {"type": "tool_result", "callId": "c1", "name": "calculate", "success": True, "result": {"data": 1}},
        {"type": "round_start", "round": 2},
    ]
    words = ["The", " tide", " rises", " twice", " a", " day", ",", " über", " 東京", " 🌊"]
    events += [{"type": "delta", "content": words[i % len(words)]} for i in range(DELTAS)]
    events += [{"type": "usage", "inputTokens": 100, "outputTokens": DELTAS}, {"type": "done", "stopReason": "stop"},
               {"type": "round_end", "round": 2, "stopReason": "stop", "message": None},
               {"type": "turn_end", "outcome": "complete", "message": None, "usage": None}]
    return events


def run(events: list[dict[str, Any]], with_metrics: bool) -> float:
    """Seconds for one turn's events through the per-event path."""
    cid, turn_id = uuid.uuid4(), uuid.uuid4().hex
    log, delivery, follower = ReplayLog(), LocalDelivery(), Follower()
    delivery.follow(cid, follower)
    observer = TurnObserver(model="bench-model", conversation_id=str(cid), turn_id=turn_id) if with_metrics else None
    if observer is not None:
        observer.started()
    cid_text = str(cid)
    started = time.perf_counter()
    for event in events:  # TurnRunner._event, line for line
        seq = log.last_seq + 1
        log.append(seq, 1, event)
        if observer is not None:
            observer.see(event)
            if event["type"] == "round_end":
                observer.round_usage({"inputTokens": 100, "outputTokens": 10}, False)
        delivery.publish(cid, {"type": "events", "conversationId": cid_text, "turnId": turn_id,
                               "items": [{"seq": seq, "messageId": 1, "event": event}]})
    elapsed = time.perf_counter() - started
    if observer is not None:
        observer.close()
    return elapsed


def hook_alone(events: list[dict[str, Any]]) -> float:
    """Seconds for the observer calls only, over the same events."""
    observer = TurnObserver(model="bench-model", conversation_id="c", turn_id="t")
    observer.started()
    see: Callable[[dict[str, Any]], None] = observer.see
    started = time.perf_counter()
    for event in events:
        see(event)
    elapsed = time.perf_counter() - started
    observer.close()
    return elapsed


def main() -> int:
    events = turn_events()
    timings: dict[bool, list[float]] = {True: [], False: []}
    run(events, True), run(events, False)  # warm up
    gc.disable()
    try:
        for i in range(ROUNDS):
            for variant in ((True, False) if i % 2 == 0 else (False, True)):
                timings[variant].append(run(events, variant))
        alone = min(hook_alone(events) for _ in range(ROUNDS))
    finally:
        gc.enable()
    per_event = {k: min(v) / len(events) * 1e9 for k, v in timings.items()}
    ratio = per_event[True] / per_event[False]
    print(f"events per turn: {len(events)} ({DELTAS} deltas), rounds: {ROUNDS}, fastest of each")
    print(f"  with metrics:    {per_event[True]:8.0f} ns/event")
    print(f"  without metrics: {per_event[False]:8.0f} ns/event")
    print(f"  the hook alone:  {alone / len(events) * 1e9:8.0f} ns/event "
          f"({100 * alone / len(events) * 1e9 / per_event[False]:.1f} % of the path without it)")
    print(f"  ratio with/without: {ratio:.3f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
