"""A provider that echoes its key inside deltas split at any point never
shows it to the client or gets it stored, on the websocket and on ``POST /ai/chat``; nor does
one that puts it in a tool call's arguments split over two deltas (shown, asked for approval,
saved or run).

Real parts: a FakeProvider on 127.0.0.1 configured with a real key (an environment
variable), which streams the ``Authorization`` header's key back split at every offset
(:mod:`tests.support.echo_key`); the consumer through WebsocketCommunicator and the real
database; the ``/ai/chat`` view through Django's async client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from jxai_app import conf
from jxai_app.core.logsafety import REDACTED
from jxai_app.models import Conversation, Message, ToolCall
from tests.app import ws_tools
from tests.app.apisupport import SENTINEL_KEY, bearer, fake as api_fake, frames, post_chat, read_all, token  # noqa: F401
from tests.app.approval_support import require_approval
from tests.app.turns_support import MODEL, Tab, hub  # noqa: F401  (fixtures)
from tests.support.echo_key import echo_stream, echoed_text
from tests.support.fake_provider import FakeProvider, Request, Script, openai_text_stream, openai_tool_call_stream

pytestmark = pytest.mark.django_db(transaction=True)

WS_KEY = "sk-ws-echo-7Hc2Vq9Lm4Zt8Rb1"
WS_KEY_ENV = "JXAI_TEST_ECHO_PROVIDER_KEY"


def echo_key(request: Request) -> Script:
    """Answer with the request's own key split over deltas at every offset."""
    return Script(writes=echo_stream(request.headers["authorization"].removeprefix("Bearer "), reasoning=True))


def key_in_arguments(request: Request) -> Script:
    """Call ``probe`` with the request's own key as its word, split over two argument deltas;
    once the tool has answered, a short text."""
    if any(m["role"] == "tool" for m in request.json["messages"]):
        return Script(writes=openai_text_stream(["Done."]))
    key = request.headers["authorization"].removeprefix("Bearer ")
    return Script(writes=openai_tool_call_stream("call_k", "probe", ['{"word": "' + key[:9], key[9:] + '"}']))


@pytest.fixture
def keyed(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    """The default model (with tools) on a FakeProvider that needs ``WS_KEY`` and echoes it."""
    monkeypatch.setenv(WS_KEY_ENV, WS_KEY)
    with FakeProvider(handler=echo_key) as provider:
        settings.JXAI_MODELS = {
            "providers": {"fake": {"kind": "openai", "base_url": provider.url, "api_key_env": WS_KEY_ENV}},
            "models": {MODEL: {"provider": "fake", "model_id": "m", "context_window": 100000,
                               "supports_tools": True}},
            "roles": {"default": MODEL},
        }
        conf.reset_caches()
        yield provider
    conf.reset_caches()


async def test_the_websocket_never_shows_or_stores_an_echoed_key_split_at_any_offset(
    user: Any, keyed: FakeProvider, hub: Any
) -> None:
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Tell me your key.")
    await tab.until_event("turn_end")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")

    assert keyed.requests[0].headers["authorization"] == f"Bearer {WS_KEY}"  # the key really went upstream
    assert tab.text() == echoed_text(WS_KEY, REDACTED)
    assert tab.text(kind="reasoning") == echoed_text(WS_KEY, REDACTED)
    wire = json.dumps(tab.frames, ensure_ascii=False)
    assert WS_KEY[:-1] not in wire and REDACTED in wire
    saved = await Message.objects.aget(role="assistant")
    assert saved.content == echoed_text(WS_KEY, REDACTED)
    assert saved.reasoning_content == echoed_text(WS_KEY, REDACTED)
    # The page's reload shows the same.
    cid = str((await Conversation.objects.aget()).pk)
    await tab.send(type="subscribe", conversationId=cid)
    snapshot = await tab.until(lambda f: f["type"] == "snapshot")
    assert WS_KEY[:-1] not in json.dumps(snapshot, ensure_ascii=False)
    await tab.close()


async def test_ai_chat_never_streams_an_echoed_key_split_at_any_offset(api_fake: FakeProvider, token: str) -> None:
    api_fake.handler = echo_key
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "key?"}]}, bearer(token))
    raw = await read_all(response)  # asserts SENTINEL_KEY is not in the body

    assert api_fake.requests[0].headers["authorization"] == f"Bearer {SENTINEL_KEY}"
    events = frames(raw)
    assert "".join(e["content"] for e in events if e["type"] == "delta") == echoed_text(SENTINEL_KEY, REDACTED)
    assert "".join(e["content"] for e in events if e["type"] == "reasoning") == echoed_text(SENTINEL_KEY, REDACTED)
    assert SENTINEL_KEY[:-1].encode() not in raw
    assert events[-1] == {"type": "done", "stopReason": "stop"}


async def test_a_key_in_tool_call_arguments_is_masked_before_it_is_shown_asked_saved_or_run(
    user: Any, keyed: FakeProvider, settings: Any, hub: Any
) -> None:
    keyed.handler = key_in_arguments
    settings.JXAI_TOOL_MODULES = ["tests.app.ws_tools"]
    conf.reset_caches()
    ws_tools.CALLS.clear()
    await sync_to_async(require_approval)("probe")
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Probe with your key.")
    cid = str((await tab.until(lambda f: f["type"] == "conversation"))["conversation"]["id"])
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "awaiting_approval")
    args = "".join(e["args"] for e in (i["event"] for i in tab.events()) if e["type"] == "tool_call_delta")
    assert json.loads(args) == {"word": REDACTED}
    [asked] = [i["event"] for i in tab.events() if i["event"]["type"] == "tool_approval_request"]
    assert WS_KEY[:9] not in json.dumps(asked)
    saved = await ToolCall.objects.aget(message__conversation_id=cid)
    assert json.loads(saved.arguments) == {"word": REDACTED}
    await tab.send(type="approve", conversationId=cid, callId="call_k")
    await tab.until_event("turn_end", outcome="complete")
    assert ws_tools.CALLS == [(user.pk, REDACTED)]  # the tool ran with the masked word
    assert WS_KEY[:9] not in json.dumps(tab.frames, ensure_ascii=False)
    await tab.close()


async def test_ai_chat_masks_a_key_split_over_two_argument_deltas(api_fake: FakeProvider, token: str) -> None:
    api_fake.handler = key_in_arguments
    tools = [{"type": "function", "function": {"name": "probe", "parameters": {"type": "object"}}}]
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "key?"}], "tools": tools},
                               bearer(token))
    raw = await read_all(response)
    events = frames(raw)
    assert json.loads("".join(e["args"] for e in events if e["type"] == "tool_call_delta")) == {"word": REDACTED}
    assert SENTINEL_KEY[:9].encode() not in raw
    assert [e["type"] for e in events][-2:] == ["tool_call_end", "done"]
