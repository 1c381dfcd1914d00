"""Throughput of the OpenAI-compatible client's normalisation, against two baselines.

In one run, over the same bytes served by ``httpx.MockTransport`` in 16 KiB reads:

1. **jxai**: ``OpenAIChatClient.stream_chat`` — framing, payload rules, tool-call assembly,
   usage, events (everything a real stream goes through except the socket);
2. **bare loop**: ``httpx-sse``'s ``aiter_sse()`` + ``json.loads`` per event, nothing else;
3. **openai SDK**: ``AsyncOpenAI().chat.completions.create(stream=True)`` iterated to the end.

It prints SSE events per second for each and the ratios (targets: jxai ≥ 0.8× the bare
loop, ≥ 5× the SDK). Then it checks that a long data line arriving in 100-byte pieces costs
time linear in its length: a 900 KiB line must take at most ~12× a 90 KiB one.

Run: ``.venv/bin/python bench/normaliser.py`` (``make bench``). Exit status 1 when a target
is missed.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
from httpx_sse import aconnect_sse  # noqa: E402

from jxai_app.core.streaming import OpenAIChatClient  # noqa: E402

URL = "http://bench.test/v1"
READ = 16 * 1024
ROUNDS = 9


def chunk(delta: dict, finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1731000000,
            "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_bench",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def build_stream(n_text: int = 16000, n_args: int = 4000) -> tuple[bytes, int]:
    """A realistic answer: text fragments, then one tool call in many argument fragments."""
    words = ["The", " tide", " rises", " twice", " a", " day", ",", " über", " 東京", " 🌊"]
    parts = [chunk({"role": "assistant", "content": ""})]
    parts += [chunk({"content": words[i % len(words)]}) for i in range(n_text)]
    parts.append(chunk({"tool_calls": [{"index": 0, "id": "call_bench", "type": "function",
                                        "function": {"name": "search", "arguments": ""}}]}))
    parts.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\":\""}}]}))
    parts += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": "ab"}}]}) for _ in range(n_args)]
    parts.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "\"}"}}]}))
    parts.append(chunk({}, "tool_calls"))
    usage = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1731000000, "model": "gpt-4o",
             "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": n_text + n_args,
                                      "total_tokens": 100 + n_text + n_args}}
    parts.append(b"data: " + json.dumps(usage).encode() + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts), len(parts)


def transport(body: bytes, piece: int) -> httpx.MockTransport:
    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(body), piece):
            yield body[i:i + piece]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=pieces())

    return httpx.MockTransport(handler)


MESSAGES = [{"role": "user", "content": "hello"}]


async def run_jxai(body: bytes, piece: int = READ) -> int:
    client = OpenAIChatClient(base_url=URL, model="m", transport=transport(body, piece))
    count = 0
    async for _ in client.stream_chat(MESSAGES, [], ""):
        count += 1
    return count


async def run_bare(body: bytes, piece: int = READ) -> int:
    count = 0
    async with httpx.AsyncClient(transport=transport(body, piece)) as client:
        async with aconnect_sse(client, "POST", URL + "/chat/completions", json={"messages": MESSAGES}) as source:
            async for sse in source.aiter_sse():
                if sse.data == "[DONE]":
                    break
                json.loads(sse.data)
                count += 1
    return count


async def run_sdk(body: bytes, piece: int = READ) -> int:
    import openai

    async with httpx.AsyncClient(transport=transport(body, piece)) as http:
        client = openai.AsyncOpenAI(base_url=URL, api_key="bench", http_client=http, max_retries=0)
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
        count = 0
        async for _ in stream:
            count += 1
    return count


async def best_times(runs: dict[str, Callable[[bytes], Awaitable[int]]], body: bytes) -> dict[str, float]:
    """Best wall time of each runner; rounds interleave the runners so that background load
    on the machine hits them alike."""
    for run in runs.values():
        await run(body)  # warm up imports and caches
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            gc.collect()
            started = time.perf_counter()
            await run(body)
            times[name].append(time.perf_counter() - started)
    return {name: min(samples) for name, samples in times.items()}


async def linearity() -> tuple[float, float, float]:
    def one_line(size: int) -> bytes:
        return chunk({"content": "x" * size}) + chunk({}, "stop") + b"data: [DONE]\n\n"

    small, large = one_line(90 * 1024), one_line(900 * 1024)

    async def timed(body: bytes) -> float:
        started = time.perf_counter()
        events = await run_jxai(body, piece=100)
        assert events == 2, events
        return time.perf_counter() - started

    await timed(small)
    smalls, larges = [], []
    for _ in range(ROUNDS):
        smalls.append(await timed(small))
        larges.append(await timed(large))
    t_small, t_large = min(smalls), min(larges)
    return t_small, t_large, t_large / t_small


async def main() -> int:
    body, n_events = build_stream()
    print(f"stream: {n_events} SSE events, {len(body) / 1024:.0f} KiB, served in {READ // 1024} KiB reads; "
          f"best of {ROUNDS}")
    jxai_events = await run_jxai(body)
    best = await best_times({"jxai": run_jxai, "bare httpx-sse + json.loads": run_bare, "openai SDK": run_sdk},
                            body)
    results = {name: n_events / seconds for name, seconds in best.items()}
    for name, rate in results.items():
        print(f"  {name:<30} {rate:>12,.0f} SSE events/s")
    print(f"  (jxai yielded {jxai_events} normalised events)")
    bare_ratio = results["jxai"] / results["bare httpx-sse + json.loads"]
    sdk_ratio = results["jxai"] / results["openai SDK"]
    print(f"jxai / bare loop = {bare_ratio:.2f}x   (target >= 0.8x)")
    print(f"jxai / openai SDK = {sdk_ratio:.2f}x   (target >= 5x)")
    t_small, t_large, ratio = await linearity()
    print(f"long line in 100-byte pieces: 90 KiB {t_small * 1000:.1f} ms, 900 KiB {t_large * 1000:.1f} ms, "
          f"ratio {ratio:.1f}x   (target <= 12x)")
    ok = bare_ratio >= 0.8 and sdk_ratio >= 5 and ratio <= 12
    print("all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
