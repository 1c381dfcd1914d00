"""Policy on live websocket turns (docs/security.md, threats 2, 3 and 11): tools act as the
user, quotas and rate limits before the provider, usage recorded per provider round, provider retries.

Real parts: the consumer through WebsocketCommunicator, the real database, a FakeProvider on
127.0.0.1, the deployment's tool registry (plus ``probe`` from ``tests.app.ws_tools``).
"""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group


from jxai_app.policy import ratelimit
from jxai_app.models import Conversation, Message, ToolCall, ToolPolicy, UsageLedger, UserLimits
from tests.app import ws_tools
from tests.app.turns_support import (  # noqa: F401  (fixtures)
    Tab, assert_in_order, fake, hub, probe_tools, text_script, tool_script,
)
from tests.support.fake_provider import FakeProvider, Script, json_response, openai_chunk, sse

pytestmark = pytest.mark.django_db(transaction=True)

NOON = datetime(2025, 3, 4, 12, 0, 0, tzinfo=timezone.utc).timestamp()
"""Mid-day UTC: 12 h (43 200 s) before the daily quota renews."""
TODAY = date(2025, 3, 4)


@pytest.fixture
def noon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ratelimit, "clock", lambda: NOON)


def _offered(request_json: dict[str, Any]) -> list[str]:
    return sorted(t["function"]["name"] for t in request_json.get("tools") or [])


async def _finished(tab: Tab) -> dict[str, Any]:
    """Wait for the turn's end and the conversation's final state; return ``turn_end``."""
    end = await tab.until_event("turn_end")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] != "streaming")
    return end


def _results(tab: Tab) -> list[dict[str, Any]]:
    return [i["event"] for i in tab.events() if i["event"]["type"] == "tool_result"]


# -- tools act as the user (docs/security.md, threat 2) -----------------------------------
async def test_a_tool_the_user_may_not_use_is_not_offered_and_refused_when_called(
    user: Any, probe_tools: None, fake: FakeProvider, hub: Any
) -> None:
    auditors = await Group.objects.acreate(name="auditors")
    policy = await ToolPolicy.objects.acreate(tool_name="probe")
    await sync_to_async(policy.allowed_groups.add)(auditors)
    fake.add(tool_script("call_1", "probe", {"word": "leak"}), text_script(["I could not."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Use probe.")
    end = await _finished(tab)

    assert end["event"]["outcome"] == "complete"
    offered = _offered(fake.requests[0].json)
    assert "probe" not in offered and "calculate" in offered
    [result] = _results(tab)
    assert result["success"] is False
    assert result["result"]["error"] == 'Tool "probe" is not available in this conversation'
    assert ws_tools.CALLS == []  # it never ran
    call = await ToolCall.objects.aget(call_id="call_1")
    assert call.success is False and call.name == "probe"
    # The model read the refusal back in its next request.
    answer = fake.requests[1].json["messages"][-1]
    assert answer["role"] == "tool" and "not available" in answer["content"]
    await tab.close()


async def test_a_member_of_the_allowed_group_is_offered_the_tool_and_it_runs_as_them(
    user: Any, other_user: Any, probe_tools: None, fake: FakeProvider, hub: Any
) -> None:
    auditors = await Group.objects.acreate(name="auditors")
    policy = await ToolPolicy.objects.acreate(tool_name="probe")
    await sync_to_async(policy.allowed_groups.add)(auditors)
    await sync_to_async(other_user.groups.add)(auditors)
    fake.add(tool_script("call_1", "probe", {"word": "hello"}), text_script(["Done."]))
    tab = await Tab(other_user).open()
    await tab.send(type="send", conversationId=None, text="Use probe.")
    await _finished(tab)

    assert "probe" in _offered(fake.requests[0].json)
    [result] = _results(tab)
    assert result["success"] is True and result["result"]["data"] == {"echo": "hello"}
    assert ws_tools.CALLS == [(other_user.pk, "hello")]
    await tab.close()


async def test_the_per_turn_call_cap_holds_in_a_live_turn_and_the_next_turn_starts_afresh(
    user: Any, probe_tools: None, fake: FakeProvider, hub: Any
) -> None:
    await ToolPolicy.objects.acreate(tool_name="probe", max_calls_per_turn=1)
    fake.add(tool_script("call_1", "probe", {"word": "one"}), tool_script("call_2", "probe", {"word": "two"}),
             text_script(["Enough."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Probe twice.")
    await _finished(tab)
    cid = tab.frames[0]["conversation"]["id"]

    first, second = _results(tab)
    assert first["success"] is True and second["success"] is False
    assert second["result"]["error"] == 'Tool "probe" may be called at most 1 time per turn; do not call it again'
    assert ws_tools.CALLS == [(user.pk, "one")]

    fake.add(tool_script("call_3", "probe", {"word": "three"}), text_script(["Again."]))
    await tab.send(type="send", conversationId=cid, text="Once more.")
    turn = (await tab.until_event("turn_end", outcome="complete"))
    assert turn and ws_tools.CALLS == [(user.pk, "one"), (user.pk, "three")]
    await tab.close()


# -- quotas and rate limits (docs/security.md, threat 3) ----------------------------------
async def test_quota_exhausted_mid_day_refuses_that_user_only_and_saves_nothing(
    user: Any, other_user: Any, fake: FakeProvider, hub: Any, noon: None, no_answer_reserve: None
) -> None:
    await UserLimits.objects.acreate(user=user, tokens_per_day=1000)
    await UserLimits.objects.acreate(user=other_user, tokens_per_day=1000)
    await sync_to_async(ratelimit.record_usage)(user, {"inputTokens": 700, "outputTokens": 300}, estimated=False)
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="One more question.")
    refusal = await tab.until(lambda f: f["type"] == "error")

    assert refusal["code"] == "quota-exceeded" and refusal["request"] == "send"
    assert refusal["problem"]["status"] == 429 and refusal["problem"]["retry_after"] == 12 * 3600
    assert "1000" in refusal["message"]
    assert await tab.quiet()
    assert not await Conversation.objects.filter(owner=user).aexists()
    assert fake.requests == []

    fake.add(text_script(["Sure."]))
    other = await Tab(other_user).open()
    await other.send(type="send", conversationId=None, text="My question.")
    assert (await _finished(other))["event"]["outcome"] == "complete"
    assert other.text() == "Sure." and len(fake.requests) == 1
    await tab.close()
    await other.close()


async def test_usage_of_a_live_turn_counts_and_the_next_send_is_refused(
    user: Any, fake: FakeProvider, hub: Any, noon: None, no_answer_reserve: None
) -> None:
    await UserLimits.objects.acreate(user=user, tokens_per_day=100)
    fake.add(text_script(["Long answer."], usage={"prompt_tokens": 80, "completion_tokens": 30}))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Tell me.")
    await _finished(tab)
    cid = tab.frames[0]["conversation"]["id"]
    row = await UsageLedger.objects.aget(user=user, day=TODAY)
    assert (row.input_tokens, row.output_tokens, row.estimated_tokens, row.requests) == (80, 30, 0, 1)

    before = await Message.objects.filter(conversation_id=cid).acount()
    await tab.send(type="send", conversationId=cid, text="And more?")
    refusal = await tab.until(lambda f: f["type"] == "error")
    assert refusal["code"] == "quota-exceeded" and refusal["conversationId"] == cid
    assert await Message.objects.filter(conversation_id=cid).acount() == before
    assert len(fake.requests) == 1
    await tab.close()


async def test_usage_is_recorded_per_provider_round_and_estimated_when_none_is_sent(
    user: Any, fake: FakeProvider, hub: Any, noon: None
) -> None:
    # Round 1 reports usage (50 + 10); round 2 reports none, like llama.cpp.
    fake.add(tool_script("call_1", "calculate", {"expression": "6 * 7"}), text_script(["It is 42, exactly."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="What is 6 * 7?")
    await _finished(tab)

    row = await UsageLedger.objects.aget(user=user, day=TODAY)
    assert row.requests == 2
    estimated_out = len("It is 42, exactly.") // 4 + 1  # ceil(18 / 4)
    assert row.output_tokens == 10 + estimated_out
    assert row.input_tokens > 50  # 50 reported + the estimate of the second request
    assert row.estimated_tokens == row.input_tokens - 50 + estimated_out
    saved = [m.usage async for m in Message.objects.filter(role="assistant").order_by("position")]
    assert saved[0] == {"inputTokens": 50, "outputTokens": 10}
    assert saved[1]["estimated"] is True and saved[1]["outputTokens"] == estimated_out
    assert saved[1]["inputTokens"] == row.input_tokens - 50  # the ledger and the message agree
    await tab.close()


async def test_turns_per_minute_refuse_a_send_and_a_retry_with_retry_after(
    settings: Any, user: Any, fake: FakeProvider, hub: Any, noon: None
) -> None:
    settings.JXAI_UPSTREAM_RETRIES = 0
    await UserLimits.objects.acreate(user=user, turns_per_minute=2)
    fake.add(json_response(500, {"error": {"message": "broken"}}), text_script(["fine"]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="First.")
    assert (await _finished(tab))["event"]["outcome"] == "error"
    cid = tab.frames[0]["conversation"]["id"]
    await tab.send(type="send", conversationId=cid, text="Second.")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    saved = [(m.role, m.content) async for m in Message.objects.filter(conversation_id=cid).order_by("position")]

    await tab.send(type="send", conversationId=cid, text="Third.")
    refusal = await tab.until(lambda f: f["type"] == "error")
    assert refusal["code"] == "rate-limited" and refusal["problem"]["retry_after"] == 60
    await tab.send(type="retry", conversationId=cid)
    refusal = await tab.until(lambda f: f["type"] == "error")
    assert refusal["code"] == "rate-limited" and refusal["request"] == "retry"
    assert await tab.quiet()
    after = [(m.role, m.content) async for m in Message.objects.filter(conversation_id=cid).order_by("position")]
    assert after == saved  # the retry kept the exchange it would have dropped
    assert len(fake.requests) == 2
    await tab.close()


async def test_a_conflicting_send_takes_no_turn_of_the_minute(
    user: Any, fake: FakeProvider, hub: Any, noon: None
) -> None:
    await UserLimits.objects.acreate(user=user, turns_per_minute=2)
    fake.add(text_script([f"w{i} " for i in range(30)], delay=0.02), text_script(["second"]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Long one.")
    await tab.until_event("delta")
    cid = tab.frames[0]["conversation"]["id"]
    for _ in range(3):
        await tab.send(type="send", conversationId=cid, text="Too soon.")
    for _ in range(3):
        assert (await tab.until(lambda f: f["type"] == "error"))["code"] == "conflict"
    await _finished(tab)
    await tab.send(type="send", conversationId=cid, text="Now.")  # the second turn of the minute
    assert (await tab.until_event("turn_end", outcome="complete")) is not None
    assert await sync_to_async(ratelimit.turns_in_last_minute)(user) == 2
    await tab.close()


# -- retries (docs/security.md, threat 11) ------------------------------------------------
async def test_a_provider_429_then_success_gives_one_answer(user: Any, fake: FakeProvider, hub: Any) -> None:
    fake.add(json_response(429, {"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "0"}),
             text_script(["after ", "retry"]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Hello?")
    end = await _finished(tab)
    assert end["event"]["outcome"] == "complete"
    items = tab.events()
    assert_in_order(items)
    kinds = [i["event"]["type"] for i in items]
    assert "error" not in kinds and kinds.count("round_start") == 1
    assert tab.text() == "after retry"
    assert len(fake.requests) == 2 and fake.requests[0].json == fake.requests[1].json
    cid = tab.frames[0]["conversation"]["id"]
    rows = [(m.role, m.content) async for m in Message.objects.filter(conversation_id=cid).order_by("position")]
    assert rows == [("user", "Hello?"), ("assistant", "after retry")]
    await tab.close()


async def test_a_500_after_output_began_is_not_retried(user: Any, fake: FakeProvider, hub: Any) -> None:
    failing = [openai_chunk({"role": "assistant", "content": ""}), openai_chunk({"content": "partial"}),
               sse(json.dumps({"error": {"message": "server exploded", "code": 500}}))]
    fake.add(Script(writes=failing), text_script(["never"]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Hello?")
    end = await _finished(tab)
    assert end["event"]["outcome"] == "error"
    errors = [i["event"] for i in tab.events() if i["event"]["type"] == "error"]
    assert len(errors) == 1 and tab.text() == "partial"
    assert len(fake.requests) == 1
    cid = tab.frames[0]["conversation"]["id"]
    conversation = await Conversation.objects.aget(pk=cid)
    assert conversation.status == "error" and "server exploded" in conversation.last_error
    assert [m.role async for m in Message.objects.filter(conversation_id=cid)] == ["user"]  # partial dropped
    await tab.close()


async def test_a_5xx_beyond_the_retries_is_one_error_event(settings: Any, user: Any, fake: FakeProvider,
                                                          hub: Any) -> None:
    settings.JXAI_UPSTREAM_RETRIES = 1
    fake.add(json_response(503, {"error": {"message": "busy"}}), json_response(503, {"error": {"message": "busy"}}),
             text_script(["never"]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Hello?")
    await _finished(tab)
    errors = [i["event"] for i in tab.events() if i["event"]["type"] == "error"]
    assert len(errors) == 1 and errors[0]["code"] == "503"
    assert len(fake.requests) == 2
    await tab.close()

