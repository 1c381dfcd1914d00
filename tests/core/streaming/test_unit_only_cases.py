"""The wire cases the command line cannot express (conformance/unit-only.md), against a real
loopback server: cancellation with held connections, and generated tool-call ids.

Latency bounds are generous (1 s, for loaded CI machines); the measured figure is attached to
the test report with ``record_property`` (docs/streaming.md "Cancellation" promises 100 ms; ``bench/`` measures it).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any, Callable

from jxai_app.core.streaming import OpenAIChatClient, ProxyChatClient
from jxai_app.core.streaming.events import DoneEvent, StreamEvent
from tests.core.streaming.conftest import GET_WEATHER, USER, collect
from tests.support.fake_provider import FakeProvider, Script, Write

GENERATED = re.compile(r"^call_0_[0-9a-f]{8}$")
MARGIN = 1.0  # seconds; the contract is 100 ms, the figure is recorded


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


TEXT_CHUNKS = [chunk({"role": "assistant", "content": ""}), chunk({"content": "alpha "}),
               chunk({"content": "beta "}), chunk({"content": "gamma "})]


async def cancel_after(stream: Any, signal: asyncio.Event, n: int) -> tuple[list[StreamEvent], float]:
    """Consume ``stream``, set ``signal`` right after the n-th event; return the events and
    the seconds from the set to the final event."""
    events: list[StreamEvent] = []
    set_at = 0.0
    async for event in stream:
        events.append(event)
        if len(events) == n:
            set_at = time.perf_counter()
            signal.set()
    return events, time.perf_counter() - set_at


def openai(fake: FakeProvider) -> OpenAIChatClient:
    return OpenAIChatClient(base_url=fake.url, model="m", api_key="k")


async def test_abort_after_1_event_buffered(fake: FakeProvider, record_property: Callable[..., None]) -> None:
    fake.add(Script(writes=[b"".join(TEXT_CHUNKS)], hold=True))
    signal = asyncio.Event()
    events, latency = await cancel_after(openai(fake).stream_chat(USER, [], "sys", signal=signal), signal, 1)
    record_property("cancel_latency_ms", round(latency * 1000, 2))
    assert [e.to_dict() for e in events] == [{"type": "delta", "content": "alpha "},
                                            {"type": "done", "stopReason": "cancelled"}]
    assert latency < MARGIN
    assert fake.wait_closed(2.0), "the upstream connection was not closed"


async def test_abort_after_2_events_separate_reads(fake: FakeProvider, record_property: Callable[..., None]) -> None:
    fake.add(Script(writes=[Write(c, 0.04) for c in TEXT_CHUNKS], hold=True))
    signal = asyncio.Event()
    events, latency = await cancel_after(openai(fake).stream_chat(USER, [], "sys", signal=signal), signal, 2)
    record_property("cancel_latency_ms", round(latency * 1000, 2))
    assert [e.to_dict() for e in events] == [{"type": "delta", "content": "alpha "},
                                            {"type": "delta", "content": "beta "},
                                            {"type": "done", "stopReason": "cancelled"}]
    assert latency < MARGIN
    assert fake.wait_closed(2.0)


async def test_cancel_while_provider_is_silent(fake: FakeProvider, record_property: Callable[..., None]) -> None:
    """The signal is set from elsewhere while the client waits on a silent, held response."""
    fake.add(Script(writes=TEXT_CHUNKS[:2], hold=True))
    signal = asyncio.Event()
    stream = openai(fake).stream_chat(USER, [], "sys", signal=signal)
    first = await stream.__anext__()
    assert first.to_dict() == {"type": "delta", "content": "alpha "}
    loop = asyncio.get_running_loop()
    set_at: list[float] = []
    loop.call_later(0.2, lambda: (set_at.append(time.perf_counter()), signal.set()))
    last = await stream.__anext__()
    latency = time.perf_counter() - set_at[0]
    record_property("cancel_latency_ms", round(latency * 1000, 2))
    assert last == DoneEvent(stop_reason="cancelled")
    assert latency < MARGIN
    assert [e async for e in stream] == []
    assert fake.wait_closed(2.0)


async def test_abort_before_start(fake: FakeProvider) -> None:
    fake.add(Script(writes=TEXT_CHUNKS))
    signal = asyncio.Event()
    signal.set()
    events = await collect(openai(fake).stream_chat(USER, [], "sys", signal=signal))
    assert events == [{"type": "done", "stopReason": "cancelled"}]
    assert not fake.request_received.wait(0.3)
    assert fake.requests == []


async def test_abort_mid_tool_call(fake: FakeProvider) -> None:
    fake.add(Script(writes=[chunk({"role": "assistant", "content": None, "tool_calls": [
        {"index": 0, "id": "call_cut", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\":"}}]})], hold=True))
    signal = asyncio.Event()
    events, latency = await cancel_after(openai(fake).stream_chat(USER, GET_WEATHER, "sys", signal=signal),
                                         signal, 2)
    assert [e.to_dict() for e in events] == [
        {"type": "tool_call_start", "id": "call_cut", "name": "get_weather"},
        {"type": "tool_call_delta", "id": "call_cut", "args": "{\"city\":"},
        {"type": "done", "stopReason": "cancelled"}]
    assert latency < MARGIN
    assert fake.wait_closed(2.0)


async def test_proxy_abort_after_1(fake: FakeProvider, record_property: Callable[..., None]) -> None:
    fake.add(Script(writes=[b'data: {"type":"delta","content":"one"}\n\ndata: {"type":"delta","content":"two"}\n\n'],
                    hold=True))
    signal = asyncio.Event()
    client = ProxyChatClient(chat_url=fake.url + "/chat")
    events, latency = await cancel_after(client.stream_chat(USER, [], "sys", signal=signal), signal, 1)
    record_property("cancel_latency_ms", round(latency * 1000, 2))
    assert [e.to_dict() for e in events] == [{"type": "delta", "content": "one"},
                                            {"type": "done", "stopReason": "cancelled"}]
    assert latency < MARGIN
    assert fake.wait_closed(2.0)


async def events_with_generated_id(fake: FakeProvider, writes: list[bytes]) -> tuple[list[dict[str, Any]], str]:
    """Serve ``writes`` once and stream them through the OpenAI client (with the get_weather
    tool); return the events (as dicts) and the first event's id, checked to be a generated
    one (``call_0_`` and 8 hex digits)."""
    fake.add(Script(writes=writes))
    events = await collect(openai(fake).stream_chat(USER, GET_WEATHER, "sys"))
    generated = events[0].get("id", "")
    assert GENERATED.match(generated), generated
    return events, generated


async def test_tool_call_fragment_before_id(fake: FakeProvider) -> None:
    events, gen = await events_with_generated_id(fake, [
        chunk({"role": "assistant", "content": None,
               "tool_calls": [{"index": 0, "function": {"arguments": "{\"orphan\":"}}]}),
        chunk({"tool_calls": [{"index": 0, "id": "call_after", "type": "function",
                               "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":\"Ulm\"}"}}]}),
        chunk({}, "tool_calls"), b"data: [DONE]\n\n"])
    assert events == [
        {"type": "tool_call_start", "id": gen, "name": ""},
        {"type": "tool_call_delta", "id": gen, "args": "{\"orphan\":"},
        {"type": "tool_call_end", "id": gen},
        {"type": "tool_call_start", "id": "call_after", "name": "get_weather"},
        {"type": "tool_call_delta", "id": "call_after", "args": "{\"city\":\"Ulm\"}"},
        {"type": "tool_call_end", "id": "call_after"},
        {"type": "done", "stopReason": "tool_calls"}]


async def test_finish_function_call_legacy(fake: FakeProvider) -> None:
    events, gen = await events_with_generated_id(fake, [
        chunk({"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": ""}}),
        chunk({"function_call": {"arguments": "{\"city\":"}}),
        chunk({"function_call": {"arguments": "\"Oslo\"}"}}),
        chunk({}, "function_call"), b"data: [DONE]\n\n"])
    assert events == [
        {"type": "tool_call_start", "id": gen, "name": "get_weather"},
        {"type": "tool_call_delta", "id": gen, "args": "{\"city\":"},
        {"type": "tool_call_delta", "id": gen, "args": "\"Oslo\"}"},
        {"type": "tool_call_end", "id": gen},
        {"type": "done", "stopReason": "tool_calls"}]


async def test_generated_ids_differ_between_calls(fake: FakeProvider) -> None:
    body = [chunk({"tool_calls": [{"index": 0, "function": {"name": "a", "arguments": "{}"}},
                                  {"index": 1, "function": {"name": "b", "arguments": "{}"}}]}),
            chunk({}, "tool_calls")]
    fake.add(Script(writes=body), Script(writes=body))
    first = await collect(openai(fake).stream_chat(USER, GET_WEATHER, "sys"))
    second = await collect(openai(fake).stream_chat(USER, GET_WEATHER, "sys"))
    starts = [e["id"] for e in first + second if e["type"] == "tool_call_start"]
    assert [s.split("_")[1] for s in starts] == ["0", "1", "0", "1"]
    assert len(set(starts)) == 4


async def test_threading_event_signal_set_from_another_thread(fake: FakeProvider) -> None:
    """A thread-safe signal works too; its blocking wait() must never stall the loop."""
    import threading

    fake.add(Script(writes=TEXT_CHUNKS[:2], hold=True))
    signal = threading.Event()
    stream = openai(fake).stream_chat(USER, [], "sys", signal=signal)  # type: ignore[arg-type]
    assert (await stream.__anext__()).to_dict() == {"type": "delta", "content": "alpha "}
    timer = threading.Timer(0.1, signal.set)
    timer.start()
    started = time.perf_counter()
    assert await stream.__anext__() == DoneEvent(stop_reason="cancelled")
    assert time.perf_counter() - started < MARGIN
    assert fake.wait_closed(2.0)
