"""A tool call cannot freeze the worker: ``calculate`` refuses an operation whose result would
be huge before computing it, so a turn streaming beside it never stalls.

Real parts: two sockets on the real consumer (WebsocketCommunicator), the real turn runner
and agent loop, the deployment's tool registry, a FakeProvider on 127.0.0.1, the database.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.app.turns_support import Tab, fake, hub, text_script, tool_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)

TICK = 0.01
"""Seconds between the event-loop probe's wake-ups."""


async def _loop_lag(stop: asyncio.Event) -> float:
    """The longest a ``TICK`` sleep overran, in seconds, until ``stop`` is set."""
    loop = asyncio.get_running_loop()
    worst = 0.0
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(TICK)
        worst = max(worst, loop.time() - before - TICK)
    return worst


@pytest.mark.parametrize("expression", ["round(1, -10**7)", "round(7, -(10**6) * 5)"])
async def test_a_huge_result_fails_fast_while_another_turn_keeps_streaming(
    user: Any, other_user: Any, fake: FakeProvider, hub: Any, expression: str
) -> None:
    parts = [f"w{i} " for i in range(60)]
    fake.add(text_script(parts, delay=0.05))  # the other user's answer: 3 s of steady output
    streaming = await Tab(other_user).open()
    await streaming.send(type="send", conversationId=None, text="Talk for a while.")
    await streaming.until_event("delta")

    fake.add(tool_script("call_1", "calculate", {"expression": expression}), text_script(["Too big."]))
    stop = asyncio.Event()
    probe = asyncio.create_task(_loop_lag(stop))
    loop = asyncio.get_running_loop()
    calculating = await Tab(user).open()
    asked = loop.time()
    await calculating.send(type="send", conversationId=None, text="Round it.")
    result = (await calculating.until_event("tool_result"))["event"]
    answered = loop.time() - asked
    await calculating.until_event("turn_end", outcome="complete")
    end = await streaming.until_event("turn_end", outcome="complete")
    stop.set()
    lag = await probe

    assert lag < 1.0, f"the event loop stalled {lag:.2f} s"
    assert result["success"] is False and "at most 300 digits" in result["result"]["error"]
    assert answered < 2.0  # two provider requests and a refused call, not seconds of arithmetic
    assert end["event"]["outcome"] == "complete" and streaming.text() == "".join(parts)
    await calculating.close()
    await streaming.close()
