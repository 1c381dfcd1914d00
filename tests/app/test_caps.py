"""The caps beside the answer length: tool calls per model round
(``JXAI_MAX_TOOL_CALLS_PER_ROUND``) and websockets per user (``JXAI_MAX_SOCKETS_PER_USER``).

Real parts: the consumer through WebsocketCommunicator, the real database, a FakeProvider on
127.0.0.1 streaming the calls, the deployment's tool registry plus ``probe``
(``tests.app.ws_tools``), which records every call that really ran.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from jxai_app import conf
from jxai_app.consumers import TOO_MANY_SOCKETS_CLOSE_CODE, ChatConsumer
from jxai_app.core.agent.calls import over_cap
from jxai_app.models import ToolCall
from tests.app import ws_tools
from tests.app.turns_support import Tab, fake, hub, probe_tools, text_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider, Script, openai_chunk

pytestmark = pytest.mark.django_db(transaction=True)


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
    user: Any, probe_tools: None, fake: FakeProvider, hub: Any
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
    settings: Any, user: Any, probe_tools: None, fake: FakeProvider, hub: Any
) -> None:
    settings.JXAI_MAX_TOOL_CALLS_PER_ROUND = 2
    fake.add(many_calls_script(5), text_script(["Two ran."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Probe five times.")
    await tab.until_event("turn_end")
    assert ws_tools.CALLS == [(user.pk, "w0"), (user.pk, "w1")]
    await tab.close()


# -- sockets per user ---------------------------------------------------------------------
async def _refused_socket(user: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Open one more socket for ``user``; return the frame it got and its close message."""
    comm = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/")
    comm.scope["user"] = user
    connected, _ = await comm.connect()
    assert connected
    frame = json.loads((await comm.receive_output(5))["text"])
    closing = await comm.receive_output(5)
    await comm.wait(5)
    return frame, closing


async def test_a_socket_over_the_per_user_cap_gets_an_error_and_4429_and_others_are_not_affected(
    settings: Any, user: Any, other_user: Any, fake: FakeProvider, hub: Any
) -> None:
    assert conf.get_limits().max_sockets_per_user == 50
    settings.JXAI_MAX_SOCKETS_PER_USER = 3
    tabs = [await Tab(user).open() for _ in range(3)]
    frame, closing = await _refused_socket(user)

    assert closing == {"type": "websocket.close", "code": TOO_MANY_SOCKETS_CLOSE_CODE}
    assert frame["type"] == "error" and frame["code"] == "rate-limited"
    assert frame["message"].startswith("You have 3 chat connections open to this server, the most allowed")
    assert hub.delivery.user_socket_count(user.pk) == 3
    # Another user still connects, and the three open tabs still work.
    other = await Tab(other_user).open()
    fake.add(text_script(["Still here."]))
    await tabs[2].send(type="send", conversationId=None, text="Are you there?")
    await tabs[2].until_event("turn_end")
    assert tabs[2].text() == "Still here."
    # A closed tab frees its place.
    await tabs[0].close()
    again = await Tab(user).open()
    assert hub.delivery.user_socket_count(user.pk) == 3
    for tab in (*tabs[1:], again, other):
        await tab.close()


async def test_no_socket_cap_when_set_to_zero(settings: Any, user: Any, fake: FakeProvider, hub: Any) -> None:
    settings.JXAI_MAX_SOCKETS_PER_USER = 0
    tabs = [await Tab(user).open() for _ in range(60)]
    assert hub.delivery.user_socket_count(user.pk) == 60
    for tab in tabs:
        await tab.close()
