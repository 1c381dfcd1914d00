"""The agent loop's own overhead per round, next to a bare loop over the same events.

A scripted client streams N ``delta`` events plus one tool call per round; the tool does
nothing. The *loop* figure runs ``jxai_app.core.agent.run_turn`` for R tool rounds (then the
budget ends the turn); the *bare* figure iterates the very same client streams and calls the
same tool directly, keeping only the text — what any caller would pay anyway. The ratio and
the difference per round are the loop's cost: repair, message assembly, events, tasks.

    .venv/bin/python bench/agent.py [--deltas 10 100 1000] [--rounds 10] [--repeat 15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Mapping

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jxai_app.core.agent import AgentPolicy, run_turn  # noqa: E402
from jxai_app.core.streaming.events import (  # noqa: E402
    DeltaEvent, DoneEvent, StreamEvent, ToolCallDeltaEvent, ToolCallEndEvent, ToolCallStartEvent, UsageEvent,
)


def round_events(n: int, index: int) -> list[StreamEvent]:
    """N deltas, one tool call, usage, done — one round's stream."""
    call = f"call_{index}"
    return [*(DeltaEvent(content="tok ") for _ in range(n)), ToolCallStartEvent(id=call, name="noop"),
            ToolCallDeltaEvent(id=call, args='{"x":'), ToolCallDeltaEvent(id=call, args="1}"),
            ToolCallEndEvent(id=call), UsageEvent(input_tokens=100, output_tokens=n), DoneEvent(stop_reason="tool_calls")]


class Client:
    """Replays prepared rounds; no copying, no sleeping."""

    def __init__(self, rounds: list[list[StreamEvent]]) -> None:
        self.rounds = rounds
        self.index = 0

    async def stream_chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], system_prompt: str,
                          *, signal: Any = None) -> AsyncIterator[StreamEvent]:
        events = self.rounds[self.index]
        self.index += 1
        for event in events:
            yield event


class NoopTools:
    listing = [{"type": "function", "function": {"name": "noop", "description": "Does nothing.",
                                                 "parameters": {"type": "object", "properties": {}}}}]

    def list_for_llm(self) -> list[dict[str, Any]]:
        return self.listing

    async def execute(self, name: str, arguments_json: str, context: Any) -> Mapping[str, Any]:
        return {"success": True, "data": None}


async def with_loop(rounds: list[list[StreamEvent]]) -> float:
    client, tools = Client(rounds), NoopTools()
    policy = AgentPolicy(max_tool_rounds=len(rounds), max_rounds=len(rounds) + 1)
    start = time.perf_counter()
    async for event in run_turn(client=client, tools=tools, history=[{"role": "user", "content": "go"}],
                                system_prompt="", policy=policy, context_factory=lambda call_id, name: None):
        pass
    elapsed = time.perf_counter() - start
    assert event.type == "turn_end" and event.outcome == "cap_partial", event  # type: ignore[union-attr]
    return elapsed


async def bare(rounds: list[list[StreamEvent]]) -> float:
    client, tools = Client(rounds), NoopTools()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    start = time.perf_counter()
    for _ in rounds:
        text: list[str] = []
        args: list[str] = []
        async for event in client.stream_chat(messages, tools.list_for_llm(), ""):
            if isinstance(event, DeltaEvent):
                text.append(event.content)
            elif isinstance(event, ToolCallDeltaEvent):
                args.append(event.args)
        await tools.execute("noop", "".join(args), None)
        "".join(text)
    return time.perf_counter() - start


def measure(n: int, rounds: int, repeat: int) -> tuple[float, float]:
    def prepared() -> list[list[StreamEvent]]:
        return [round_events(n, i) for i in range(rounds)]

    loop_times, bare_times = [], []
    for _ in range(repeat):
        loop_times.append(asyncio.run(with_loop(prepared())))
        bare_times.append(asyncio.run(bare(prepared())))
    return statistics.median(loop_times) / rounds, statistics.median(bare_times) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deltas", type=int, nargs="+", default=[10, 100, 1000], help="delta events per round")
    parser.add_argument("--rounds", type=int, default=10, help="tool rounds per turn")
    parser.add_argument("--repeat", type=int, default=15, help="turns timed per figure (median kept)")
    opts = parser.parse_args()
    print(f"agent loop overhead per round ({opts.rounds} rounds/turn, median of {opts.repeat} turns)")
    print(f"{'deltas':>7} {'loop µs/round':>14} {'bare µs/round':>14} {'ratio':>7} {'overhead µs':>12}")
    for n in opts.deltas:
        loop_s, bare_s = measure(n, opts.rounds, opts.repeat)
        print(f"{n:>7} {loop_s * 1e6:>14.1f} {bare_s * 1e6:>14.1f} {loop_s / bare_s:>7.2f} "
              f"{(loop_s - bare_s) * 1e6:>12.1f}")


if __name__ == "__main__":
    main()
