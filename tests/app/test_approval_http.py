"""Tool approval over ``POST /ai/chat?conversation=…`` (docs/api.md "Conversation mode"): the
stream announces a waiting call (``tool_approval_request {id, name, args}``) and ends with
``done {stopReason: "approval_required"}``; the caller answers with a new request carrying the
decision, and the turn goes on from the saved history.

Real parts: Django's ASGI app (the HTTP view through ``AsyncClient``, and the unchanged
:class:`~jxai_app.core.streaming.proxy.ProxyChatClient` through httpx's ASGI transport), the real
database, a FakeProvider on 127.0.0.1 as the model, ``probe`` requiring approval.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from jxai_app.core.streaming.proxy import ProxyChatClient
from jxai_app.models import ApiToken, Conversation, ToolCall
from tests.app import ws_tools
from tests.app.apisupport import CHAT, bearer, fake, frames, problem_of, read_all, token  # noqa: F401  (fixtures)
from tests.app.approval_support import calls_script, tool_replies, tools  # noqa: F401  (fixture)
from tests.app.turns_support import hub, probe_tools, text_script, tool_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)



async def _post(conversation: str, payload: dict[str, Any], key: str) -> Any:
    return await AsyncClient().post(f"{CHAT}?conversation={conversation}", data=json.dumps(payload),
                                    content_type="application/json", headers=bearer(key))


def _user_message(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _decision(call_id: str, approved: bool, reason: str | None = None) -> dict[str, Any]:
    approval: dict[str, Any] = {"approved": approved}
    if reason is not None:
        approval["reason"] = reason
    return {"messages": [{"role": "tool", "tool_call_id": call_id, "approval": approval}]}


async def test_the_stream_ends_approval_required_and_a_denial_resumes_it(user: Any, token: str, tools: None,
                                                                         fake: FakeProvider, hub: Any) -> None:
    fake.add(calls_script(("call_p", "probe", {"word": "http"}), ("call_c", "calculate", {"expression": "1+1"})),
             text_script(["I will not, then."]))
    response = await _post("new", _user_message("Probe over HTTP."), token)
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    events = frames(await read_all(response))
    cid = events[0]["id"]
    assert events[0] == {"type": "conversation", "id": cid} and response["X-Conversation-Id"] == cid
    kinds = [e["type"] for e in events]
    assert kinds.count("done") == 1 and events[-1] == {"type": "done", "stopReason": "approval_required"}
    [request] = [e for e in events if e["type"] == "tool_approval_request"]
    assert request == {"type": "tool_approval_request", "id": "call_p", "name": "probe", "args": {"word": "http"}}
    [ran] = [e for e in events if e["type"] == "tool_result"]
    assert (ran["id"], ran["success"], ran["result"]["data"]["result"]) == ("call_c", True, 2)
    assert (await Conversation.objects.aget(pk=cid)).status == "awaiting_approval"

    # A new message is refused while the call waits.
    refused = await _post(cid, _user_message("Hello?"), token)
    assert refused.status_code == 409 and problem_of(refused)["code"] == "approval_pending"

    answer = await _post(cid, _decision("call_p", False, "not over HTTP"), token)
    assert answer.status_code == 200
    events = frames(await read_all(answer))
    assert events[0] == {"type": "conversation", "id": cid}
    [denied] = [e for e in events if e["type"] == "tool_result"]
    assert denied == {"type": "tool_result", "id": "call_p", "name": "probe", "success": False,
                      "result": {"success": False, "error": "The user denied this call: not over HTTP"}}
    assert "".join(e["content"] for e in events if e["type"] == "delta") == "I will not, then."
    assert events[-1] == {"type": "done", "stopReason": "stop"}
    assert tool_replies(fake, 1)["call_p"]["error"] == "The user denied this call: not over HTTP"
    assert ws_tools.CALLS == []
    call = await ToolCall.objects.select_related("decided_by").aget(call_id="call_p")
    assert (call.approval_state, call.decided_by.username, call.decision_reason) == ("denied", "alice",
                                                                                     "not over HTTP")

    again = await _post(cid, _decision("call_p", True), token)
    assert again.status_code == 409 and problem_of(again)["code"] == "approval_decided"


async def test_the_proxy_client_runs_the_flow_unchanged(user: Any, token: str, tools: None, fake: FakeProvider,
                                                        hub: Any) -> None:
    """The original proxy client, pointed at a conversation's URL: the first stream shows the
    model's call and ends ``approval_required``; a second stream carrying the approval (a
    ``tool`` message with ``approval``) runs the tool and streams the answer."""
    from project.asgi import application

    conversation = await Conversation.objects.acreate(owner=user, model="fast")
    fake.add(tool_script("call_p", "probe", {"word": "proxied"}), text_script(["It echoed proxied."]))
    client = ProxyChatClient(chat_url=f"http://testserver{CHAT}?conversation={conversation.pk}", model="fast",
                         api_key=token, transport=httpx.ASGITransport(app=application))
    first = [e.to_dict() async for e in client.stream_chat([{"role": "user", "content": "Probe via proxy."}], [], "")]
    assert first[-1] == {"type": "done", "stopReason": "approval_required"}
    assert {"type": "tool_call_start", "id": "call_p", "name": "probe"} in first
    assert ws_tools.CALLS == []

    second = [e.to_dict() async for e in client.stream_chat(
        [{"role": "tool", "tool_call_id": "call_p", "approval": {"approved": True}}], [], "")]
    assert "".join(e["content"] for e in second if e["type"] == "delta") == "It echoed proxied."
    assert second[-1] == {"type": "done", "stopReason": "stop"}
    assert ws_tools.CALLS == [(user.pk, "proxied")]
    assert tool_replies(fake, 1)["call_p"] == {"success": True, "data": {"echo": "proxied"}}


async def test_another_user_cannot_decide_over_http(user: Any, other_user: Any, token: str, tools: None,
                                                    fake: FakeProvider, hub: Any) -> None:
    fake.add(tool_script("call_p", "probe", {"word": "private"}))
    events = frames(await read_all(await _post("new", _user_message("Probe."), token)))
    cid = events[0]["id"]
    _, intruder = await sync_to_async(ApiToken.issue)(user=other_user, name="intruder")

    for payload in (_decision("call_p", True), _decision("call_p", False, "mine"), _user_message("Hi")):
        refused = await _post(cid, payload, intruder)
        assert refused.status_code == 404 and problem_of(refused)["status"] == 404
    call = await ToolCall.objects.aget(call_id="call_p")
    assert call.approval_state == "awaiting_approval" and call.decided_by_id is None
    assert ws_tools.CALLS == [] and len(fake.requests) == 1

    # Shapes that are not a turn or decisions are refused before anything happens.
    for payload in ({"messages": []}, {"messages": [{"role": "assistant", "content": "x"}]},
                    {"messages": [{"role": "tool", "tool_call_id": "call_p"}]},
                    {**_user_message("x"), "tools": [{"type": "function", "function": {"name": "f"}}]}):
        bad = await _post(cid, payload, token)
        assert bad.status_code == 400 and problem_of(bad)["status"] == 400
    assert (await ToolCall.objects.aget(call_id="call_p")).approval_state == "awaiting_approval"
