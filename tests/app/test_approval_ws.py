"""Tool approval over the websocket, embedded configuration: a tool call that waits for the owner's
approval pauses the turn (no provider request open, no lease), every tab and every reload
shows it, the answer resumes the turn from the saved history, and denial, expiry, Stop, the
per-turn cap and another user's attempts behave as docs/approval.md says.

Real parts: the consumer through ``WebsocketCommunicator``, the real database, a FakeProvider
on 127.0.0.1 (its requests are what the model received), the deployment's tool registry plus
``probe`` (``tests.app.ws_tools``) with a ``ToolPolicy`` row requiring approval.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from jxai_app.models import ApprovalState, Conversation, Message, ToolCall
from tests.app import ws_tools
from tests.app.approval_support import calls_script, tool_replies, tools  # noqa: F401  (fixture)
from tests.app.turns_support import Tab, fake, hub, probe_tools, text_script, tool_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)



def _paused(cid: str) -> Any:
    def match(frame: dict[str, Any]) -> bool:
        return (frame["type"] == "conversation" and frame["conversation"]["id"] == cid
                and frame["conversation"]["status"] == "awaiting_approval")
    return match


def _idle(frame: dict[str, Any]) -> bool:
    return frame["type"] == "conversation" and frame["conversation"]["status"] == "idle"


async def _pause(tab: Tab, fake: FakeProvider, text: str = "Probe it.") -> str:
    """Send ``text``; the model calls ``probe`` (needs approval) and ``calculate`` (does not)
    in one round; return the conversation id once the turn paused."""
    fake.add(calls_script(("call_p", "probe", {"word": "secret"}), ("call_c", "calculate", {"expression": "6*7"})))
    await tab.send(type="send", conversationId=None, text=text)
    first = await tab.until(lambda f: f["type"] == "conversation")
    cid = str(first["conversation"]["id"])
    await tab.until(_paused(cid))
    return cid


def _call(call_id: str) -> ToolCall:
    return ToolCall.objects.select_related("decided_by", "approver").get(call_id=call_id)


call_row = sync_to_async(_call)


# -- pause, every tab, approve from another tab --------------------------------------------
async def test_the_turn_pauses_and_a_second_tab_approves_it(user: Any, tools: None, fake: FakeProvider,
                                                            hub: Any) -> None:
    owner = await Tab(user).open()
    cid = await _pause(owner, fake)

    [request] = [i["event"] for i in owner.events() if i["event"]["type"] == "tool_approval_request"]
    assert (request["callId"], request["name"], request["arguments"]) == ("call_p", "probe", '{"word": "secret"}')
    assert ws_tools.CALLS == []  # it did not run
    calc = next(i["event"] for i in owner.events() if i["event"]["type"] == "tool_result")
    assert calc["callId"] == "call_c" and calc["result"]["data"]["result"] == 42  # the other call of the round ran
    assert len(fake.requests) == 1  # no request open while it waits
    conversation = await Conversation.objects.aget(pk=cid)
    assert conversation.status == "awaiting_approval" and conversation.turn_id is None
    assert conversation.turn_heartbeat is None  # no lease: the watch never takes it for dead
    row = await call_row("call_p")
    assert row.approval_state == ApprovalState.AWAITING and row.approver_id == user.pk
    assert row.approval_requested_at is not None and row.finished_at is None

    # A send is refused while it waits; nothing is saved.
    before = await Message.objects.filter(conversation_id=cid).acount()
    await owner.send(type="send", conversationId=cid, text="Anything else?")
    refusal = await owner.until(lambda f: f["type"] == "error")
    assert refusal["code"] == "conflict" and refusal["problem"]["code"] == "approval_pending"
    await owner.send(type="retry", conversationId=cid)
    refusal = await owner.until(lambda f: f["type"] == "error")
    assert refusal["request"] == "retry" and refusal["problem"]["code"] == "approval_pending"
    assert await Message.objects.filter(conversation_id=cid).acount() == before

    # A new tab (a reload) gets the pending card from the snapshot.
    second = await Tab(user).open()
    await second.send(type="subscribe", conversationId=cid)
    snapshot = await second.until(lambda f: f["type"] == "snapshot")
    assert snapshot["turn"] is None and snapshot["conversation"]["status"] == "awaiting_approval"
    calls = {c["id"]: c for m in snapshot["messages"] for c in m["toolCalls"]}
    assert calls["call_p"]["approval"]["state"] == "awaiting_approval" and calls["call_p"]["result"] is None
    assert calls["call_c"]["approval"] is None and calls["call_c"]["success"] is True

    fake.add(text_script(["The probe said secret."]))
    await second.send(type="approve", conversationId=cid, callId="call_p")
    for tab in (owner, second):
        saved = await tab.until(lambda f: f["type"] == "message_saved" and any(
            c["id"] == "call_p" and (c["approval"] or {}).get("state") == "approved" for c in f["message"]["toolCalls"]))
        assert saved["message"]["toolCalls"][0]["approval"]["decidedBy"] == "alice"
        await tab.until_event("turn_end", outcome="complete")
        await tab.until(_idle)

    assert ws_tools.CALLS == [(user.pk, "secret")]
    replies = tool_replies(fake, 1)
    assert replies["call_p"] == {"success": True, "data": {"echo": "secret"}}
    assert replies["call_c"]["data"]["result"] == 42
    row = await call_row("call_p")
    assert (row.approval_state, row.decided_by.username, row.success) == ("approved", "alice", True)
    assert row.decided_at is not None
    roles = [m.role async for m in Message.objects.filter(conversation_id=cid).order_by("position")]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    assert (await Conversation.objects.aget(pk=cid)).status == "idle"

    # The first decision won: a second one is a conflict.
    await owner.send(type="deny", conversationId=cid, callId="call_p", reason="too late")
    late = await owner.until(lambda f: f["type"] == "error")
    assert late["code"] == "conflict" and (await call_row("call_p")).approval_state == "approved"
    await owner.close()
    await second.close()


async def test_a_denial_reaches_the_model_with_its_reason(user: Any, tools: None, fake: FakeProvider,
                                                          hub: Any) -> None:
    tab = await Tab(user).open()
    cid = await _pause(tab, fake)
    fake.add(text_script(["Understood, I will not probe."]))
    await tab.send(type="deny", conversationId=cid, callId="call_p", reason="  not today  ")
    await tab.until_event("turn_end", outcome="complete")
    await tab.until(_idle)

    assert ws_tools.CALLS == []
    assert tool_replies(fake, 1)["call_p"] == {"success": False, "error": "The user denied this call: not today"}
    row = await call_row("call_p")
    assert (row.approval_state, row.decision_reason, row.decided_by.username, row.success) == (
        "denied", "not today", "alice", False)
    await tab.close()


async def test_an_unanswered_call_expires_and_the_model_hears_it(user: Any, tools: None, fake: FakeProvider,
                                                                 hub: Any, settings: Any) -> None:
    settings.JXAI_APPROVAL_TIMEOUT_SECONDS = 1
    tab = await Tab(user).open()
    cid = await _pause(tab, fake)
    fake.add(text_script(["Nobody answered."]))
    await tab.until_event("turn_end", outcome="complete", timeout=15)
    await tab.until(_idle)

    assert ws_tools.CALLS == []
    expired = tool_replies(fake, 1)["call_p"]
    assert expired == {"success": False, "error": "The user did not answer the approval request within 1 seconds; "
                                                  "the call was not run."}
    row = await call_row("call_p")
    assert row.approval_state == "expired" and row.decided_by is None and row.decided_at is not None
    assert (await Conversation.objects.aget(pk=cid)).status == "idle"
    await tab.close()


async def test_stop_while_waiting_ends_the_turn_and_denies_the_call(user: Any, tools: None, fake: FakeProvider,
                                                                     hub: Any) -> None:
    tab = await Tab(user).open()
    cid = await _pause(tab, fake)
    await tab.send(type="cancel", conversationId=cid)
    snapshot = await tab.until(lambda f: f["type"] == "snapshot")
    assert snapshot["conversation"]["status"] == "idle" and snapshot["turn"] is None
    calls = {c["id"]: c for m in snapshot["messages"] for c in m["toolCalls"]}
    assert calls["call_p"]["approval"]["state"] == "denied" and calls["call_p"]["success"] is False

    row = await call_row("call_p")
    assert (row.approval_state, row.decision_reason) == ("denied", "the turn was stopped")
    assert len(fake.requests) == 1 and ws_tools.CALLS == []

    # The conversation takes a new send; its history has the denied call answered.
    fake.add(text_script(["Fine."]))
    await tab.send(type="send", conversationId=cid, text="Never mind.")
    await tab.until_event("turn_end", outcome="complete")
    assert tool_replies(fake, 1)["call_p"]["error"] == "The user denied this call: the turn was stopped"
    await tab.close()


async def test_another_user_cannot_decide_or_stop_the_call(user: Any, other_user: Any, tools: None,
                                                           fake: FakeProvider, hub: Any) -> None:
    tab = await Tab(user).open()
    cid = await _pause(tab, fake)
    intruder = await Tab(other_user).open()
    for frame in ({"type": "approve", "conversationId": cid, "callId": "call_p"},
                  {"type": "deny", "conversationId": cid, "callId": "call_p", "reason": "mine now"}):
        await intruder.send(**frame)
        refusal = await intruder.until(lambda f: f["type"] == "error")
        assert refusal["code"] == "not-found" and refusal["request"] == frame["type"]
    await intruder.send(type="cancel", conversationId=cid)
    assert (await intruder.until(lambda f: f["type"] == "error"))["code"] == "not-found"
    await intruder.send(type="subscribe", conversationId=cid)
    assert (await intruder.until(lambda f: f["type"] == "error"))["code"] == "not-found"

    row = await call_row("call_p")
    assert row.approval_state == "awaiting_approval" and row.decided_by is None
    assert (await Conversation.objects.aget(pk=cid)).status == "awaiting_approval"
    assert ws_tools.CALLS == [] and len(fake.requests) == 1
    # A call id that does not wait is not-found too, for the owner.
    await tab.send(type="approve", conversationId=cid, callId="call_c")
    assert (await tab.until(lambda f: f["type"] == "error"))["code"] == "not-found"
    await tab.close()
    await intruder.close()


async def test_the_per_turn_cap_counts_approved_calls_only(user: Any, tools: None, fake: FakeProvider,
                                                           hub: Any) -> None:
    """probe capped at one call per turn: a denied call does not use the cap (the approved one
    after it runs), and the approved call does (a third call in the same turn is refused)."""
    from jxai_app.models import ToolPolicy

    await ToolPolicy.objects.filter(tool_name="probe").aupdate(max_calls_per_turn=1)
    tab = await Tab(user).open()
    fake.add(tool_script("call_1", "probe", {"word": "one"}))
    await tab.send(type="send", conversationId=None, text="Probe thrice.")
    cid = str((await tab.until(lambda f: f["type"] == "conversation"))["conversation"]["id"])
    await tab.until(_paused(cid))
    fake.add(tool_script("call_2", "probe", {"word": "two"}))
    await tab.send(type="deny", conversationId=cid, callId="call_1", reason="no")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "streaming")
    await tab.until(_paused(cid))
    fake.add(tool_script("call_3", "probe", {"word": "three"}), text_script(["Done."]))
    await tab.send(type="approve", conversationId=cid, callId="call_2")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "streaming")
    await tab.until(_paused(cid))
    await tab.send(type="approve", conversationId=cid, callId="call_3")
    await tab.until_event("turn_end", outcome="complete", timeout=15)

    assert ws_tools.CALLS == [(user.pk, "two")]
    assert tool_replies(fake, 3)["call_3"]["error"] == (
        'Tool "probe" may be called at most 1 time per turn; do not call it again')
    await tab.close()
