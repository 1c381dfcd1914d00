"""A provider that echoes its key inside deltas split at any point never
shows it to the client or gets it stored, on the websocket and on ``POST /ai/chat``.

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
from django.test import AsyncClient

from jxai_app import conf
from jxai_app.core.logsafety import REDACTED
from jxai_app.models import Conversation, Message
from tests.app.apisupport import SENTINEL_KEY, bearer, fake as api_fake, frames, post_chat, read_all, token  # noqa: F401
from tests.app.turns_support import MODEL, Tab, hub  # noqa: F401  (fixtures)
from tests.support.echo_key import echo_stream, echoed_text
from tests.support.fake_provider import FakeProvider, Request, Script

pytestmark = pytest.mark.django_db(transaction=True)

WS_KEY = "sk-ws-echo-7Hc2Vq9Lm4Zt8Rb1"
WS_KEY_ENV = "JXAI_TEST_ECHO_PROVIDER_KEY"


def echo_key(request: Request) -> Script:
    """Answer with the request's own key split over deltas at every offset."""
    return Script(writes=echo_stream(request.headers["authorization"].removeprefix("Bearer "), reasoning=True))


@pytest.fixture
def keyed(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    """The default model on a FakeProvider that needs ``WS_KEY`` and echoes it."""
    monkeypatch.setenv(WS_KEY_ENV, WS_KEY)
    with FakeProvider(handler=echo_key) as provider:
        settings.JXAI_MODELS = {
            "providers": {"fake": {"kind": "openai", "base_url": provider.url, "api_key_env": WS_KEY_ENV}},
            "models": {MODEL: {"provider": "fake", "model_id": "m", "context_window": 100000}},
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
