"""Issue 14 item 11, the caps beside the answer length: tool calls per model round
(``JXAI_MAX_TOOL_CALLS_PER_ROUND``) and websockets per user (``JXAI_MAX_SOCKETS_PER_USER``).

Real parts: the consumer through WebsocketCommunicator, the real database, a FakeProvider on
127.0.0.1 streaming the calls, the deployment's tool registry plus ``probe``
(``tests.app.ws_tools``), which records every call that really ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from jxai_app import conf
from jxai_app.core.agent.calls import over_cap
from jxai_app.models import ToolCall
from tests.app import ws_tools
from tests.app.turns_support import Tab, fake, hub, text_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider, Script, openai_chunk

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tools(settings: Any, fake: FakeProvider) -> Iterator[None]:
    settings.JXAI_TOOL_MODULES = ["tests.app.ws_tools"]
    conf.reset_caches()
    ws_tools.CALLS.clear()
    yield
    ws_tools.CALLS.clear()
    conf.reset_caches()


def many_calls_script(count: int) -> Script:
    """One round in which the model asks for ``count`` ``probe`` calls."""
    writes = [openai_chunk({"role": "assistant", "content": None})]
    for i in range(count):
        writes.append(openai_chunk({"tool_calls": [{
            "index": i, "id": f"call_{i}", "type": "function",
            "function": {"name": "probe", "arguments": json.dumps({"word": f"w{i}"})}}]}))
    writes += [openai_chunk({}, "tool_calls"), b"data: [DONE]\n\n"]
    return Script(writes=writes)


async def test_a_round_of_a_hundred_tool_calls_runs_only_the_default_twenty(
    user: Any, tools: None, fake: FakeProvider, hub: Any
) -> None:
    assert conf.get_agent_policy().max_tool_calls_per_round == 20
    fake.add(many_calls_script(100), text_script(["Only some ran."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Probe a hundred times.")
    end = await tab.until_event("turn_end", timeout=30)
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")

    assert end["event"]["outcome"] == "complete"
    assert ws_tools.CALLS == [(user.pk, f"w{i}") for i in range(20)]
    results = [i["event"] for i in tab.events() if i["event"]["type"] == "tool_result"]
    assert [r["callId"] for r in results] == [f"call_{i}" for i in range(100)]
    assert all(r["success"] for r in results[:20])
    refusal = over_cap(100, 20)
    assert all(r["success"] is False and r["result"]["error"] == refusal for r in results[20:])
    assert len([i for i in tab.events() if i["event"]["type"] == "tool_start"]) == 20
    # Every call is saved answered, and the model read each refusal back.
    calls = [c async for c in ToolCall.objects.order_by("position")]
    assert len(calls) == 100 and sum(c.success is False for c in calls) == 80
    replies = [m for m in fake.requests[1].json["messages"] if m["role"] == "tool"]
    assert len(replies) == 100 and json.loads(replies[99]["content"])["error"] == refusal
    await tab.close()


async def test_the_tool_call_cap_is_a_setting(
    settings: Any, user: Any, tools: None, fake: FakeProvider, hub: Any
) -> None:
    settings.JXAI_MAX_TOOL_CALLS_PER_ROUND = 2
    fake.add(many_calls_script(5), text_script(["Two ran."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Probe five times.")
    await tab.until_event("turn_end")
    assert ws_tools.CALLS == [(user.pk, "w0"), (user.pk, "w1")]
    await tab.close()
