"""Secrets and faults on websocket turns (docs/security.md, threat 7; docs/turns.md "Faults an operator can rely on").

- a sentinel provider key echoed by a 401 provider reaches no websocket frame, no saved row
  and no log line;
- a provider that stalls mid-answer hits the idle timeout: an ``error`` event, the partial
  message dropped, the conversation usable;
- a turn whose worker died is recovered when a socket opens the conversation;
- the channel layer failing mid-turn (Redis down) loses no saved message and the owner's
  sockets on the turn's worker still get every event. The Redis case (``scaleout``) runs
  when ``REDIS_URL`` is set; the same test runs everywhere on a layer that always fails.

Real parts: the consumer through WebsocketCommunicator, the real database, a FakeProvider
on 127.0.0.1, Channels' layers (Redis at a closed port in the scale-out pass).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer
from django.utils import timezone

from jxai_app import conf, store
from jxai_app.consumers import ChatConsumer
from jxai_app.core.streaming.fault import MAX_MESSAGE
from jxai_app.models import Conversation, Message
from channels.layers import get_channel_layer

from jxai_app.turns.hub import TurnHub
from jxai_app.turns.delivery import LayerDelivery
from tests.app.test_secrets_logs import SENTINEL, _assert_no_key_in_logs, _echo, _echo_in_stream, capture  # noqa: F401
from tests.app.turns_support import (  # noqa: F401  (fixtures)
    MODEL, Tab, assert_in_order, closed_port, fake, hub, text_script,
)
from tests.support.fake_provider import FakeProvider, Handler, Request, Script, json_response, openai_chunk

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = os.environ.get("REDIS_URL", "")


def _saved(conversation_id: Any) -> list[tuple[str, str, str]]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("position")
                .values_list("role", "content", "status"))


saved = sync_to_async(_saved)


async def _final(tab: Tab) -> dict[str, Any]:
    """Wait for ``turn_end`` and the conversation's final state; return that conversation."""
    await tab.until_event("turn_end")
    frame = await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] != "streaming")
    return dict(frame["conversation"])


# -- secrets (threat 7) -------------------------------------------------------------------
@pytest.fixture
def sentinel_provider(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[FakeProvider]:
    """The default model's key is a sentinel named by JXAI_MODELS_JSON's ``api_key_env``."""
    with FakeProvider(handler=_echo) as provider:
        settings.JXAI_MODELS = None
        monkeypatch.setenv("JXAI_TEST_PROVIDER_KEY", SENTINEL)
        monkeypatch.setenv("JXAI_MODELS_JSON", json.dumps({
            "providers": {"p": {"kind": "openai", "base_url": provider.url, "api_key_env": "JXAI_TEST_PROVIDER_KEY"}},
            "models": {"sentinel-model": {"provider": "p", "model_id": "m", "supports_tools": True}},
            "roles": {"default": "sentinel-model"}}))
        conf.reset_caches()
        yield provider
    conf.reset_caches()


def _every_saved_row() -> str:
    rows = [*Conversation.objects.values(), *Message.objects.values()]
    return json.dumps(rows, default=str, ensure_ascii=False)


@pytest.mark.parametrize("handler", [_echo, _echo_in_stream], ids=["401-echo", "error-in-200-stream"])
async def test_a_provider_echoing_the_key_never_gets_it_onto_the_websocket_the_rows_or_the_logs(
    user: Any, sentinel_provider: FakeProvider, hub: Any, capture: pytest.LogCaptureFixture, handler: Handler
) -> None:
    sentinel_provider.handler = handler
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Hello?")
    final = await _final(tab)
    await tab.send(type="subscribe", conversationId=final["id"])  # the saved state, read back
    await tab.until(lambda f: f["type"] == "snapshot")
    await tab.send(type="list")
    await tab.until(lambda f: f["type"] == "conversations")

    assert sentinel_provider.requests[0].headers["authorization"] == f"Bearer {SENTINEL}", "the key was really sent"
    error = next(i["event"] for i in tab.events() if i["event"]["type"] == "error")
    assert "[redacted]" in error["message"]
    assert final["status"] == "error" and "[redacted]" in final["lastError"]["message"]
    assert all(SENTINEL not in json.dumps(frame, ensure_ascii=False) for frame in tab.frames)
    rows = await sync_to_async(_every_saved_row)()
    assert "[redacted]" in rows and SENTINEL not in rows
    _assert_no_key_in_logs(capture, SENTINEL)
    await tab.close()


def _echo_at_the_cut(request: Request) -> Script:
    """401 echoing the key so that all of it but its last character comes before the cut
    at ``MAX_MESSAGE - 1`` characters (the leak of a "mask after cutting" order)."""
    sent = request.headers.get("authorization", "")
    echo = f"Incorrect API key provided: {sent}"
    return json_response(401, {"error": {"message": "." * (MAX_MESSAGE - len(echo)) + echo + "; see the docs."}})


async def test_a_key_straddling_the_message_cut_reaches_no_frame_row_or_log(
    user: Any, sentinel_provider: FakeProvider, hub: Any, capture: pytest.LogCaptureFixture
) -> None:
    sentinel_provider.handler = _echo_at_the_cut
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Hello?")
    final = await _final(tab)

    error = next(i["event"] for i in tab.events() if i["event"]["type"] == "error")
    assert error["message"].endswith("Bearer [redacted]; see the docs.") and final["lastError"]["message"] == error["message"]
    piece = SENTINEL[:8]  # "sk-SENTI": any start of the key
    assert all(piece not in json.dumps(frame, ensure_ascii=False) for frame in tab.frames)
    assert piece not in await sync_to_async(_every_saved_row)()
    _assert_no_key_in_logs(capture, piece)
    await tab.close()


# -- stalls (threat 12) -------------------------------------------------------------------
async def test_a_provider_stalling_mid_answer_hits_the_idle_timeout(settings: Any, user: Any, fake: FakeProvider,
                                                                    hub: Any) -> None:
    settings.JXAI_IDLE_TIMEOUT = 0.5
    fake.add(text_script(["par", "tial", " never sent"], stall_after=3))  # role chunk, "par", "tial"
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Talk to me.")
    final = await _final(tab)
    cid = final["id"]

    items = tab.events()
    assert_in_order(items)
    assert tab.text() == "partial"
    error = next(i["event"] for i in items if i["event"]["type"] == "error")
    assert error["code"] == "timeout" and error["problem"]["type"].endswith("/upstream-timeout")
    assert items[-1]["event"]["type"] == "turn_end" and items[-1]["event"]["outcome"] == "error"
    assert await asyncio.to_thread(fake.wait_closed, 2.0), "the stalled connection was closed"
    assert final["status"] == "error" and final["lastError"]["code"] == "timeout"
    assert final["lastError"]["problem"]["type"].endswith("/upstream-timeout")
    assert await saved(cid) == [("user", "Talk to me.", "complete")]  # the partial answer was dropped

    fake.add(text_script(["Back again."]))
    await tab.send(type="send", conversationId=cid, text="Still there?")
    assert (await _final(tab))["status"] == "idle"
    assert (await saved(cid))[-2:] == [("user", "Still there?", "complete"), ("assistant", "Back again.", "complete")]
    await tab.close()


# -- worker death (threat 13) -------------------------------------------------------------
async def test_a_turn_whose_worker_died_is_recovered_and_its_tabs_told(user: Any, fake: FakeProvider, hub: Any,
                                                                     settings: Any) -> None:
    settings.JXAI_TURN_LEASE_SECONDS = 1.0

    def orphan() -> Any:  # a turn whose worker died: rows say streaming, its lease long lapsed
        conversation = store.conversation_create(user=user, model=MODEL)
        store.message_send(user=user, conversation_id=conversation.pk, text="Lost in a crash.")
        past = timezone.now() - timedelta(seconds=60)
        Conversation.objects.filter(pk=conversation.pk).update(turn_heartbeat=past)
        return conversation.pk

    cid = str(await sync_to_async(orphan)())
    tab = await Tab(user).open()
    await tab.send(type="subscribe", conversationId=cid)
    await tab.until(lambda f: f["type"] == "snapshot")
    recovered = await tab.until(lambda f: f["type"] == "snapshot" and f["conversation"]["status"] != "streaming",
                                timeout=10)  # unasked: the lease watch recovered the turn and told the tab
    assert recovered["turn"] is None and recovered["conversation"]["status"] == "error"
    assert recovered["conversation"]["lastError"]["code"] == "turn_interrupted"
    assert [(m["role"], m["status"]) for m in recovered["messages"]] == [("user", "complete")]
    assert await saved(cid) == [("user", "Lost in a crash.", "complete")]

    fake.add(text_script(["Here now."]))
    await tab.send(type="send", conversationId=cid, text="Again.")
    assert (await _final(tab))["status"] == "idle"
    assert (await saved(cid))[-1] == ("assistant", "Here now.", "complete")
    await tab.close()


async def test_a_send_takes_over_a_turn_whose_lease_lapsed(user: Any, fake: FakeProvider, hub: Any) -> None:
    def orphan() -> Any:
        conversation = store.conversation_create(user=user, model=MODEL)
        store.message_send(user=user, conversation_id=conversation.pk, text="Lost in a crash.")
        Conversation.objects.filter(pk=conversation.pk).update(turn_heartbeat=timezone.now() - timedelta(seconds=60))
        return conversation.pk

    cid = str(await sync_to_async(orphan)())
    tab = await Tab(user).open()
    fake.add(text_script(["Taken over."]))
    await tab.send(type="send", conversationId=cid, text="Hello again?")
    assert (await _final(tab))["status"] == "idle"
    assert [r[0] for r in await saved(cid)] == ["user", "user", "assistant"]
    await tab.close()


# -- the channel layer failing (threat 14) ------------------------------------------------
class DownLayer(InMemoryChannelLayer):
    """A channel layer whose every operation fails, like Redis when it is unreachable."""

    async def _down(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("channel layer unreachable (test)")

    new_channel = send = receive = group_add = group_discard = group_send = _down  # type: ignore[assignment]


_LAYERS = [
    pytest.param({"BACKEND": "tests.app.test_ws_faults.DownLayer"}, id="failing-layer"),
    pytest.param("redis-closed-port", id="redis", marks=[
        pytest.mark.scaleout,
        pytest.mark.skipif(not REDIS_URL, reason="needs Redis (REDIS_URL): the scale-out pass points a "
                                                 "channels_redis layer at a closed port; the failing-layer case "
                                                 "covers the same path here"),
    ]),
]


@pytest.mark.parametrize("down", _LAYERS)
async def test_with_the_layer_down_sockets_connect_and_their_worker_s_turns_lose_nothing(
    settings: Any, user: Any, fake: FakeProvider, caplog: pytest.LogCaptureFixture, down: Any
) -> None:
    if down == "redis-closed-port":
        assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.pubsub.RedisPubSubChannelLayer"
        down = {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                "CONFIG": {"hosts": [f"redis://127.0.0.1:{closed_port()}/0"]}}
    settings.CHANNEL_LAYERS = {**settings.CHANNEL_LAYERS, "down": down}
    caplog.set_level(logging.WARNING, logger="jxai_app")
    worker = TurnHub(delivery=LayerDelivery(get_channel_layer("down"), worker_id="down-worker", reply_timeout=0.3))

    class Worker(ChatConsumer):
        def get_hub(self) -> TurnHub:
            return worker

    parts = [f"<{i}>" for i in range(120)]
    fake.add(text_script(parts, delay=0.005))
    owner = await Tab(user, Worker).open()  # connects although the layer is unreachable
    await owner.send(type="send", conversationId=None, text="Count.")
    await owner.until_event("delta")
    cid = owner.frames[0]["conversation"]["id"]
    other_tab = await Tab(user, Worker).open()
    await other_tab.send(type="subscribe", conversationId=cid)
    await other_tab.until(lambda f: f["type"] == "snapshot")
    final = await _final(owner)
    await other_tab.until_event("turn_end")

    assert final["status"] == "idle"
    assert_in_order(owner.events())
    assert owner.text() == "".join(parts)
    assert other_tab.text() == "".join(parts)  # snapshot items + live events, each once
    assert await saved(cid) == [("user", "Count.", "complete"), ("assistant", "".join(parts), "complete")]
    assert any(r.name == "jxai_app.turns" and "channel layer" in r.getMessage() for r in caplog.records)

    await other_tab.send(type="rename", conversationId=cid, title="Still works")  # notices while down
    await other_tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["title"] == "Still works")
    await owner.close()
    await other_tab.close()
    await worker.shutdown(timeout=5.0)


# -- text no database can store (docs/store.md "Rows") ---------------------------------------
async def test_nul_and_lone_surrogates_from_the_provider_are_saved_replaced_and_the_socket_works(
        user: Any, fake: FakeProvider, hub: Any) -> None:
    fake.add(Script(writes=[openai_chunk({"role": "assistant", "content": ""}),
                            b'data: {"choices":[{"index":0,"delta":{"content":"nul\\u0000 and \\ud800 lone"}}]}\n\n',
                            openai_chunk(None, "stop"), b"data: [DONE]\n\n"]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Say something odd.")
    assert (await _final(tab))["status"] == "idle"
    assert tab.text() == "nul\x00 and \ud800 lone"  # streamed as sent, the surrogate escaped on the wire
    assert hub.delivery.up  # the channel layer carried it too (replaced there: it encodes UTF-8 strictly)
    cid = tab.frames[0]["conversation"]["id"]
    assert (await saved(cid))[-1] == ("assistant", "nul\ufffd and \ufffd lone", "complete")

    for bad in ("a\x00b", "a\ud800b"):  # the same from a client is refused, and the socket stays
        await tab.send_raw(json.dumps({"type": "send", "conversationId": cid, "text": bad}))
        refusal = await tab.until(lambda f: f["type"] == "error")
        assert refusal["code"] == "invalid-request" and "no NUL" in refusal["message"]
    fake.add(text_script(["still here"]))
    await tab.send(type="send", conversationId=cid, text="Again.")
    assert (await _final(tab))["status"] == "idle"
    assert (await saved(cid))[-1] == ("assistant", "still here", "complete")
    await tab.close()
