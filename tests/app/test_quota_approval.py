"""Quota reservations, credential masking and the tool-call cap on the paths tool approval
added (docs/security.md "Quota reservations", "Secret leakage in streamed text";
docs/agent.md "Tool calls"): a turn paused for approval holds no reservation, the turn an
approval resumes reserves its first request (over the websocket and over ``POST
/ai/chat?conversation=…``) and masks the key in its answer, and a call past the round's cap
never waits for approval.

Real parts: the consumer through ``WebsocketCommunicator``, the ``/ai/chat`` view through
Django's async client, the real database, a FakeProvider on 127.0.0.1 as the model,
``probe`` (``tests.app.ws_tools``) with a ``ToolPolicy`` row requiring approval.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from django.db.models import Sum
from django.test import AsyncClient

from jxai_app import conf
from jxai_app.core.logsafety import REDACTED
from jxai_app.models import ApprovalState, Conversation, Message, TokenReservation, ToolCall, UsageLedger, UserLimits
from tests.app import ws_tools
from tests.app.apisupport import CHAT, bearer, frames, read_all, token  # noqa: F401  (fixtures)
from tests.app.approval_support import calls_script, tools  # noqa: F401  (fixture)
from tests.app.turns_support import MODEL, Tab, fake, hub, probe_tools, text_script  # noqa: F401  (fixtures)
from tests.support.echo_key import echo_stream, echoed_text
from tests.support.fake_provider import FakeProvider, Request, Script, Write, openai_text_stream

pytestmark = pytest.mark.django_db(transaction=True)

RESERVE = 200
"""``JXAI_RESERVE_OUTPUT_TOKENS`` in these tests."""


@pytest.fixture(autouse=True)
def small_answer_allowance(settings: Any) -> None:
    settings.JXAI_RESERVE_OUTPUT_TOKENS = RESERVE


async def _reservations() -> int:
    return await TokenReservation.objects.acount()


async def _used() -> int:
    sums = await UsageLedger.objects.aaggregate(inp=Sum("input_tokens"), out=Sum("output_tokens"))
    return int(sums["inp"] or 0) + int(sums["out"] or 0)


async def _pause(tab: Tab, fake: FakeProvider) -> str:
    fake.add(calls_script(("call_p", "probe", {"word": "w"})))
    await tab.send(type="send", conversationId=None, text="Probe it.")
    cid = str((await tab.until(lambda f: f["type"] == "conversation"))["conversation"]["id"])
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "awaiting_approval")
    return cid


async def test_a_paused_turn_holds_no_reservation_and_the_resumed_one_reserves_its_request(
    user: Any, tools: None, fake: FakeProvider, hub: Any
) -> None:
    limits = await UserLimits.objects.acreate(user=user, tokens_per_day=100_000, turns_per_minute=0)
    tab = await Tab(user).open()
    cid = await _pause(tab, fake)
    assert await _reservations() == 0  # the pause ended the send's reservation: a waiting call holds nothing
    used = await _used()
    assert used == 48  # the first round's 40 + 8

    # Little enough left that the resumed turn's first request (its prompt + RESERVE) does not fit.
    limits.tokens_per_day = used + RESERVE
    await limits.asave()
    await tab.send(type="approve", conversationId=cid, callId="call_p")
    end = await tab.until_event("turn_end")
    assert end["event"]["outcome"] == "error"
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "error")
    conversation = await Conversation.objects.aget(pk=cid)
    assert conversation.last_problem["type"].endswith("quota-exceeded")
    assert "may take" in conversation.last_problem["detail"]
    assert ws_tools.CALLS == [(user.pk, "w")]  # the approved call ran; the request after it was never sent
    assert len(fake.requests) == 1
    assert await _used() == used and await _reservations() == 0
    ledger = await UsageLedger.objects.aaggregate(failed=Sum("failed_requests"), requests=Sum("requests"))
    assert ledger == {"failed": 0, "requests": 1}  # jxai's own refusal is no provider request
    await tab.close()


async def test_a_resumed_turn_that_fits_reserves_while_its_request_runs_and_settles(
    user: Any, tools: None, fake: FakeProvider, hub: Any
) -> None:
    await UserLimits.objects.acreate(user=user, tokens_per_day=100_000, turns_per_minute=0)
    tab = await Tab(user).open()
    cid = await _pause(tab, fake)
    arrived, gate = threading.Event(), threading.Event()
    writes = openai_text_stream(["Probed."], usage={"prompt_tokens": 60, "completion_tokens": 2})

    def held_answer(request: Request) -> Script:
        arrived.set()
        return Script(writes=[Write(writes[0], gate=gate), *writes[1:]])

    fake.handler = held_answer
    await tab.send(type="approve", conversationId=cid, callId="call_p")
    assert await asyncio.to_thread(arrived.wait, 30)
    running = await Conversation.objects.aget(pk=cid)
    [reservation] = [r async for r in TokenReservation.objects.all()]
    assert reservation.turn_id == running.turn_id and reservation.tokens == reservation.prompt_tokens + RESERVE
    assert reservation.prompt_tokens > 0
    gate.set()
    await tab.until_event("turn_end", outcome="complete")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    assert await _reservations() == 0 and await _used() == 48 + 62
    await tab.close()


async def test_ai_chat_conversation_mode_reserves_its_send_and_its_resumed_request(
    user: Any, token: str, tools: None, fake: FakeProvider, hub: Any
) -> None:
    limits = await UserLimits.objects.acreate(user=user, tokens_per_day=RESERVE, turns_per_minute=0)

    async def post(conversation: str, payload: dict[str, Any]) -> Any:
        return await AsyncClient().post(f"{CHAT}?conversation={conversation}", data=json.dumps(payload),
                                        content_type="application/json", headers=bearer(token))

    refused = await post("new", {"messages": [{"role": "user", "content": "Probe over HTTP."}]})
    assert refused.status_code == 429 and "may take" in json.loads(refused.content)["detail"]
    assert fake.requests == [] and await Conversation.objects.acount() == 0

    limits.tokens_per_day = 100_000
    await limits.asave()
    fake.add(calls_script(("call_p", "probe", {"word": "h"})))
    response = await post("new", {"messages": [{"role": "user", "content": "Probe over HTTP."}]})
    events = frames(await read_all(response))
    assert events[-1] == {"type": "done", "stopReason": "approval_required"}
    assert await _reservations() == 0
    limits.tokens_per_day = await _used() + RESERVE
    await limits.asave()
    answer = await post(events[0]["id"], {"messages": [{"role": "tool", "tool_call_id": "call_p",
                                                        "approval": {"approved": True}}]})
    events = frames(await read_all(answer))
    [error] = [e for e in events if e["type"] == "error"]
    assert error["code"] == "quota-exceeded" and events[-1] == error
    assert len(fake.requests) == 1 and await _reservations() == 0


KEY = "sk-resumed-echo-Qw3Er5Ty7Ui9"
KEY_ENV = "JXAI_TEST_RESUMED_ECHO_KEY"


def _probe_then_echo(request: Request) -> Script:
    """The first request calls ``probe``; the one after its result echoes the request's key."""
    if any(m.get("role") == "tool" for m in request.json["messages"]):
        return Script(writes=echo_stream(request.headers["authorization"].removeprefix("Bearer ")))
    return calls_script(("call_p", "probe", {"word": "k"}))


async def test_the_resumed_turn_masks_an_echoed_key(user: Any, tools: None, settings: Any,
                                                     monkeypatch: pytest.MonkeyPatch, hub: Any) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider(handler=_probe_then_echo) as provider:
        settings.JXAI_MODELS = {
            "providers": {"fake": {"kind": "openai", "base_url": provider.url, "api_key_env": KEY_ENV}},
            "models": {MODEL: {"provider": "fake", "model_id": "m", "context_window": 100000,
                               "supports_tools": True}},
            "roles": {"default": MODEL},
        }
        conf.reset_caches()
        tab = await Tab(user).open()
        await tab.send(type="send", conversationId=None, text="Probe, then tell me your key.")
        cid = str((await tab.until(lambda f: f["type"] == "conversation"))["conversation"]["id"])
        await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "awaiting_approval")
        await tab.send(type="approve", conversationId=cid, callId="call_p")
        await tab.until_event("turn_end", outcome="complete")
        await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
        assert provider.requests[1].headers["authorization"] == f"Bearer {KEY}"  # the key really went upstream
    assert KEY[:-1] not in json.dumps(tab.frames, ensure_ascii=False)
    last = await Message.objects.filter(conversation_id=cid, role="assistant").order_by("-position").afirst()
    assert last is not None and last.content == echoed_text(KEY, REDACTED)
    await tab.close()


async def test_a_call_past_the_rounds_cap_never_waits_for_approval(user: Any, tools: None, settings: Any,
                                                                    fake: FakeProvider, hub: Any) -> None:
    settings.JXAI_MAX_TOOL_CALLS_PER_ROUND = 2
    fake.add(calls_script(("call_c", "calculate", {"expression": "2*3"}), ("call_p1", "probe", {"word": "a"}),
                          ("call_p2", "probe", {"word": "b"})))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Three calls.")
    cid = str((await tab.until(lambda f: f["type"] == "conversation"))["conversation"]["id"])
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "awaiting_approval")
    asked = [i["event"]["callId"] for i in tab.events() if i["event"]["type"] == "tool_approval_request"]
    assert asked == ["call_p1"]
    results = {i["event"]["callId"]: i["event"] for i in tab.events() if i["event"]["type"] == "tool_result"}
    assert set(results) == {"call_c", "call_p2"} and results["call_c"]["success"] is True
    assert results["call_p2"]["result"]["error"].startswith("Not run: this reply asked for 3 tool calls and at most 2")
    states = {c.call_id: c.approval_state async for c in ToolCall.objects.filter(message__conversation_id=cid)}
    assert states == {"call_c": ApprovalState.NONE, "call_p1": ApprovalState.AWAITING, "call_p2": ApprovalState.NONE}
    assert ws_tools.CALLS == []
    await tab.close()
