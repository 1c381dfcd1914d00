"""ws/chat/ end to end: real consumer, real database, a provider on 127.0.0.1 (docs/websocket.md)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from jxai_app import store
from jxai_app.models import Conversation, ConversationStatus, Message, MessageStatus
from tests.app.conftest import start_streaming, watch_one_turn
from tests.app.turns_support import (  # noqa: F401  (fixtures)
    DOWN_MODEL, MODEL, Tab, assert_in_order, fake, hub, text_script, tool_script,
)
from tests.support.fake_provider import FakeProvider, Script, Write, openai_chunk, openai_text_stream
from tests.app.store_support import TurnFeed

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(conversation_id: str) -> list[dict[str, Any]]:
    return [
        {"role": m.role, "content": m.content, "status": m.status, "tool_call_id": m.tool_call_id,
         "calls": [(c.call_id, c.name, c.arguments, c.result, c.success) for c in m.tool_calls.order_by("position")]}
        for m in Message.objects.filter(conversation_id=conversation_id).order_by("position")
    ]


rows = sync_to_async(_rows)
get_conversation = sync_to_async(lambda pk: Conversation.objects.get(pk=pk))


async def test_anonymous_socket_is_closed_with_4401() -> None:
    from django.contrib.auth.models import AnonymousUser

    tab = Tab(AnonymousUser())
    connected, _ = await tab.comm.connect()
    assert connected
    assert await tab.comm.receive_output(2) == {"type": "websocket.close", "code": 4401}
    await tab.comm.send_input({"type": "websocket.disconnect", "code": 4401})
    await tab.comm.wait(2)  # the consumer ends cleanly (raises what it raised, if anything)


async def test_send_streams_and_saves(user: Any, fake: FakeProvider, hub: Any) -> None:
    fake.add(text_script(["Hel", "lo", " there"], usage={"prompt_tokens": 12, "completion_tokens": 3}))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Hi!", model=None)
    end = await tab.until_event("turn_end")
    final = await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")

    first = tab.frames[0]
    assert first["type"] == "conversation" and first["conversation"]["status"] == "streaming"
    cid = first["conversation"]["id"]
    saved_user = tab.of_type("message_saved")[0]["message"]
    assert (saved_user["role"], saved_user["content"]) == ("user", "Hi!")
    items = tab.events()
    assert_in_order(items)
    kinds = [i["event"]["type"] for i in items]
    assert kinds == ["round_start", "delta", "delta", "delta", "usage", "done", "round_end", "turn_end"]
    assert tab.text() == "Hello there"
    assert end["event"]["outcome"] == "complete" and "appended" not in end["event"]
    assistant_id = items[1]["messageId"]
    assert all(i["messageId"] == assistant_id for i in items)
    saved = [f["message"] for f in tab.of_type("message_saved") if f["message"]["role"] == "assistant"]
    assert saved[0]["id"] == assistant_id and saved[0]["content"] == "Hello there"
    assert final["conversation"]["tokenCount"] == 15 and final["conversation"]["title"] == "Hi!"

    assert await rows(cid) == [
        {"role": "user", "content": "Hi!", "status": "complete", "tool_call_id": "", "calls": []},
        {"role": "assistant", "content": "Hello there", "status": "complete", "tool_call_id": "", "calls": []},
    ]
    conversation = await get_conversation(cid)
    assert conversation.status == ConversationStatus.IDLE and conversation.model == MODEL
    sent = fake.requests[0].json
    assert sent["messages"][-1] == {"role": "user", "content": "Hi!"} and sent["stream"] is True
    await tab.close()


async def test_tool_round_streams_cards_and_saves_the_call(user: Any, fake: FakeProvider, hub: Any) -> None:
    fake.add(tool_script("call_1", "calculate", {"expression": "2 + 3"}), text_script(["It is ", "5."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="What is 2 + 3?")
    await tab.until_event("turn_end", outcome="complete")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    cid = tab.frames[0]["conversation"]["id"]

    items = tab.events()
    assert_in_order(items)
    kinds = [i["event"]["type"] for i in items]
    assert kinds[:2] == ["round_start", "tool_call_start"]
    assert kinds.count("round_start") == 2 and kinds[-1] == "turn_end"
    start = next(i for i in items if i["event"]["type"] == "tool_start")
    result = next(i for i in items if i["event"]["type"] == "tool_result")
    assert start["event"]["name"] == "calculate" and start["event"]["callId"] == "call_1"
    assert result["event"]["success"] is True and result["event"]["result"]["data"]["result"] == 5
    first_round = items[1]["messageId"]
    assert start["messageId"] == result["messageId"] == first_round
    second_round = next(i["messageId"] for i in items if i["event"]["type"] == "delta")
    assert second_round != first_round
    tool_saved = [f["message"] for f in tab.of_type("message_saved") if f["message"]["role"] == "tool"]
    assert tool_saved and tool_saved[0]["toolCallId"] == "call_1"

    saved = await rows(cid)
    assert [r["role"] for r in saved] == ["user", "assistant", "tool", "assistant"]
    (call,) = saved[1]["calls"]
    assert call[:2] == ("call_1", "calculate") and call[4] is True and call[3]["data"]["result"] == 5
    assert saved[2]["tool_call_id"] == "call_1" and saved[3]["content"] == "It is 5."
    second_request = fake.requests[1].json["messages"]
    assert second_request[-1]["role"] == "tool" and second_request[-1]["tool_call_id"] == "call_1"
    await tab.close()


async def test_cancel_mid_stream_drops_the_partial_and_keeps_earlier_rounds(
    user: Any, fake: FakeProvider, hub: Any
) -> None:
    parts = [f"w{i} " for i in range(200)]
    fake.add(tool_script("call_1", "calculate", {"expression": "6 * 7"}),
             text_script(parts, delay=0.02, stall_after=30))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Compute, then talk.")
    await tab.until_event("round_start", round=2)
    await tab.until_event("delta")
    cid = tab.frames[0]["conversation"]["id"]
    loop = asyncio.get_running_loop()
    asked = loop.time()
    await tab.send(type="cancel", conversationId=cid)
    done = await tab.until_event("done", timeout=2)
    end = await tab.until_event("turn_end", timeout=2)
    assert loop.time() - asked < 1.0
    assert done["event"]["stopReason"] == "cancelled" and end["event"]["outcome"] == "cancelled"
    assert await asyncio.to_thread(fake.wait_closed, 2.0)
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    assert_in_order(tab.events())

    saved = await rows(cid)
    assert [r["role"] for r in saved] == ["user", "assistant", "tool"]
    assert all(r["status"] == MessageStatus.COMPLETE for r in saved)
    assert saved[1]["calls"][0][0] == "call_1"
    assert (await get_conversation(cid)).status == ConversationStatus.IDLE
    await tab.send(type="cancel", conversationId=cid)  # nothing runs: a no-op, no error
    assert await tab.quiet()
    await tab.close()


async def test_two_tabs_see_identical_events(user: Any, fake: FakeProvider, hub: Any) -> None:
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    cid = str(conversation.pk)
    fake.add(text_script([f"t{i}" for i in range(40)], delay=0.002))
    one, two = await Tab(user).open(), await Tab(user).open()
    snapshots = await watch_one_turn((one, two), cid, "Count.")
    assert all(snapshot["turn"] is None and snapshot["messages"] == [] for snapshot in snapshots)
    assert one.items == two.items
    assert_in_order(one.events())
    assert one.text() == "".join(f"t{i}" for i in range(40))
    assert [f["message"]["id"] for f in one.of_type("message_saved")] == [
        f["message"]["id"] for f in two.of_type("message_saved")]
    await one.close()
    await two.close()


async def test_subscribe_mid_turn_gets_text_so_far_then_live_events(user: Any, fake: FakeProvider, hub: Any) -> None:
    parts = [f"p{i}," for i in range(120)]
    fake.add(text_script(parts, delay=0.01))
    one = await Tab(user).open()
    cid = await start_streaming(one, "Stream slowly.", delta_frames=20)
    late = await Tab(user).open()
    await late.send(type="subscribe", conversationId=cid)
    snapshot = await late.until(lambda f: f["type"] == "snapshot")
    assert snapshot["turn"] is not None and snapshot["turn"]["lastSeq"] >= 20
    assert [m["role"] for m in snapshot["messages"]] == ["user"]
    assert snapshot["conversation"]["status"] == "streaming"
    for tab in (one, late):
        await tab.until_event("turn_end")
    assert_in_order(late.events())
    assert late.events() == one.events()
    assert late.text() == "".join(parts)
    await one.close()
    await late.close()


async def test_closing_the_tab_mid_turn_lets_the_turn_finish_and_save(user: Any, fake: FakeProvider, hub: Any) -> None:
    parts = [f"x{i}" for i in range(60)]
    fake.add(text_script(parts, delay=0.01))
    tab = await Tab(user).open()
    cid = await start_streaming(tab, "Go on without me.")
    await tab.close()
    assert await hub.wait_idle(10)
    saved = await rows(cid)
    assert [r["role"] for r in saved] == ["user", "assistant"]
    assert saved[1]["content"] == "".join(parts) and saved[1]["status"] == MessageStatus.COMPLETE
    assert (await get_conversation(cid)).status == ConversationStatus.IDLE


async def test_closing_the_last_tab_cancels_with_the_setting(user: Any, fake: FakeProvider, hub: Any,
                                                             settings: Any) -> None:
    settings.JXAI_CANCEL_ON_DISCONNECT = True
    fake.add(text_script([f"x{i}" for i in range(500)], delay=0.01))
    tab = await Tab(user).open()
    cid = await start_streaming(tab, "Stop when I leave.")
    await tab.close()
    assert await asyncio.to_thread(fake.wait_closed, 2.0)
    assert await hub.wait_idle(5)
    assert [r["role"] for r in await rows(cid)] == ["user"]
    assert (await get_conversation(cid)).status == ConversationStatus.IDLE


async def test_a_second_send_while_running_is_a_conflict(user: Any, fake: FakeProvider, hub: Any) -> None:
    fake.add(text_script(["slow"] * 50, delay=0.02))
    tab = await Tab(user).open()
    cid = await start_streaming(tab, "First.")
    await tab.send(type="send", conversationId=cid, text="Second.")
    error = await tab.until(lambda f: f["type"] == "error")
    assert error["code"] == "conflict" and error["request"] == "send" and error["problem"]["status"] == 409
    await tab.until_event("turn_end", outcome="complete")
    assert [r["content"] for r in await rows(cid)][0] == "First."
    await tab.close()


MALFORMED: list[tuple[str, Any, str]] = [
    ("not json", "{nope", "invalid-request"),
    ("a list", "[1, 2]", "invalid-request"),
    ("a string", '"send"', "invalid-request"),
    ("no type", '{"text": "hi"}', "invalid-request"),
    ("unknown type", '{"type": "explode"}', "invalid-request"),
    ("type not a string", '{"type": 7}', "invalid-request"),
    ("text missing", '{"type": "send", "conversationId": null}', "invalid-request"),
    ("text a number", '{"type": "send", "conversationId": null, "text": 5}', "invalid-request"),
    ("blank text", '{"type": "send", "conversationId": null, "text": "   "}', "invalid-request"),
    ("id a number", '{"type": "send", "conversationId": 12, "text": "hi"}', "invalid-request"),
    ("model a list", '{"type": "send", "conversationId": null, "text": "hi", "model": []}', "invalid-request"),
    ("temporary a string", '{"type": "send", "conversationId": null, "text": "hi", "temporary": "yes"}',
     "invalid-request"),
    ("unknown model", '{"type": "send", "conversationId": null, "text": "hi", "model": "nope"}', "invalid-request"),
    ("text too long", '{"type": "send", "conversationId": null, "text": "' + "x" * 101 + '"}', "payload-too-large"),
    ("frame too big", '{"type": "list", "pad": "' + "y" * 5000 + '"}', "payload-too-large"),
    ("malformed id", '{"type": "subscribe", "conversationId": "not-a-uuid"}', "not-found"),
    ("unknown id", '{"type": "subscribe", "conversationId": "%s"}' % uuid.uuid4(), "not-found"),
    ("cancel unknown id", '{"type": "cancel", "conversationId": "%s"}' % uuid.uuid4(), "not-found"),
    ("negative afterSeq", '{"type": "resync", "conversationId": "x", "turnId": "t", "afterSeq": -1}',
     "invalid-request"),
    ("boolean afterSeq", '{"type": "resync", "conversationId": "x", "turnId": "t", "afterSeq": true}',
     "invalid-request"),
    ("rename blank", '{"type": "rename", "conversationId": "%s", "title": " "}' % uuid.uuid4(), "invalid-request"),
]


async def test_malformed_frames_get_error_frames_and_the_socket_stays_open(
    user: Any, fake: FakeProvider, hub: Any, settings: Any
) -> None:
    settings.JXAI_MAX_MESSAGE_CHARS = 100
    settings.JXAI_WS_MAX_FRAME_BYTES = 4096
    tab = await Tab(user).open()
    for name, raw, code in MALFORMED:
        await tab.send_raw(raw)
        frame = await tab.recv()
        assert frame["type"] == "error", name
        assert frame["code"] == code, (name, frame)
        assert frame["problem"]["type"].endswith("/" + code) and frame["message"], name
    await tab.send_raw(data=b"\x00\x01")
    assert (await tab.recv())["code"] == "invalid-request"
    assert await sync_to_async(Conversation.objects.count)() == 0

    fake.add(text_script(["still ", "works"]))
    await tab.send(type="send", conversationId=None, text="Hello?")
    await tab.until_event("turn_end", outcome="complete")
    assert tab.text() == "still works"
    await tab.close()


async def test_another_users_conversation_is_answered_like_a_missing_one(
    user: Any, other_user: Any, fake: FakeProvider, hub: Any
) -> None:
    def theirs() -> str:
        conversation = store.conversation_create(user=other_user, model=MODEL, title="secret plans")
        turn = store.message_send(user=other_user, conversation_id=conversation.pk, text="top secret")
        recorder = TurnFeed(turn)
        recorder.add_delta("classified")
        recorder.end_turn()
        return str(conversation.pk)

    cid = await sync_to_async(theirs)()
    before = await rows(cid)
    missing = str(uuid.uuid4())
    tab = await Tab(user).open()
    requests = [
        {"type": "subscribe"}, {"type": "send", "text": "let me in"}, {"type": "cancel"}, {"type": "retry"},
        {"type": "rename", "title": "mine now"}, {"type": "delete"},
        {"type": "resync", "turnId": str(uuid.uuid4()), "afterSeq": 0},
    ]
    for request in requests:
        answers = []
        for target in (cid, missing):
            await tab.send(**request, conversationId=target)
            answers.append(await tab.recv())
        theirs_frame, missing_frame = answers
        assert theirs_frame["type"] == "error" and theirs_frame["code"] == "not-found", request
        assert {k: v for k, v in theirs_frame.items() if k != "conversationId"} == {
            k: v for k, v in missing_frame.items() if k != "conversationId"}
    await tab.send(type="list")
    listing = await tab.recv()
    assert listing == {"type": "conversations", "items": []}
    assert "secret" not in str(tab.frames) and "classified" not in str(tab.frames)
    assert await rows(cid) == before
    assert (await get_conversation(cid)).title == "secret plans"
    await tab.close()


async def test_five_thousand_deltas_reach_two_tabs_once_and_in_order(user: Any, fake: FakeProvider, hub: Any) -> None:
    parts = [f"{i}·" for i in range(5000)]
    fake.add(text_script(parts))
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    cid = str(conversation.pk)
    one, two = await Tab(user).open(), await Tab(user).open()
    await two.send(type="subscribe", conversationId=cid)
    await two.until(lambda f: f["type"] == "snapshot")
    await one.send(type="send", conversationId=cid, text="Count to 5000.")
    for tab in (one, two):
        await tab.until_event("turn_end", timeout=60)
    expected = "".join(parts)
    for tab in (one, two):
        items = tab.events()
        assert_in_order(items)
        assert tab.text() == expected
        assert sum(1 for i in items if i["event"]["type"] == "delta") == 5000
    saved = await rows(cid)
    assert saved[1]["content"] == expected
    await one.close()
    await two.close()


async def test_provider_down_gives_an_error_event_and_the_conversation_stays_usable(
    user: Any, fake: FakeProvider, hub: Any
) -> None:
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Anyone there?", model=DOWN_MODEL)
    error = await tab.until_event("error", timeout=15)
    assert error["event"]["code"] == "network_error"
    assert error["event"]["problem"]["type"].endswith("/upstream-failure")
    end = await tab.until_event("turn_end")
    assert end["event"]["outcome"] == "error"
    state = await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "error")
    assert state["conversation"]["lastError"]["code"] == "network_error"
    cid = state["conversation"]["id"]
    assert [r["role"] for r in await rows(cid)] == ["user"]

    fake.add(text_script(["Back ", "up."]))
    await tab.send(type="retry", conversationId=cid)
    snapshot = await tab.until(lambda f: f["type"] == "snapshot")
    # the failed exchange is gone; its question is sent again as a new branch, its turn at seq 0
    assert [(m["role"], m["content"]) for m in snapshot["messages"]] == [("user", "Anyone there?")]
    assert snapshot["conversation"]["status"] == "streaming" and snapshot["turn"]["lastSeq"] == 0
    await tab.until_event("error", timeout=15)  # retry keeps the model: still down
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "error")
    await tab.send(type="send", conversationId=cid, text="And now?", model=MODEL)
    await tab.until_event("turn_end", outcome="complete")
    saved = await rows(cid)
    assert [r["role"] for r in saved] == ["user", "user", "assistant"]
    assert saved[-1]["content"] == "Back up."
    assert (await get_conversation(cid)).status == ConversationStatus.IDLE
    await tab.close()


async def test_rename_delete_and_list_reach_every_tab(user: Any, fake: FakeProvider, hub: Any) -> None:
    make = sync_to_async(store.conversation_create)
    first, second = await make(user=user, model=MODEL, title="one"), await make(user=user, model=MODEL, title="two")
    one, two = await Tab(user).open(), await Tab(user).open()
    await one.send(type="subscribe", conversationId=str(first.pk))
    await one.until(lambda f: f["type"] == "snapshot")
    await two.send(type="list")
    listing = await two.until(lambda f: f["type"] == "conversations")
    assert [c["title"] for c in listing["items"]] == ["two", "one"]

    await two.send(type="rename", conversationId=str(first.pk), title="  renamed ")
    for tab in (one, two):
        frame = await tab.until(lambda f: f["type"] == "conversation")
        assert frame["conversation"]["title"] == "renamed"
    await two.send(type="delete", conversationId=str(first.pk))
    for tab in (one, two):
        frame = await tab.until(lambda f: f["type"] == "conversation_deleted")
        assert frame["conversationId"] == str(first.pk)
    assert not await sync_to_async(Conversation.objects.filter(pk=first.pk).exists)()
    await two.send(type="list")
    listing = await two.until(lambda f: f["type"] == "conversations")
    assert [c["id"] for c in listing["items"]] == [str(second.pk)]
    await one.close()
    await two.close()


async def test_the_real_asgi_application_authenticates_by_session_cookie(user: Any, fake: FakeProvider,
                                                                        hub: Any) -> None:
    from django.conf import settings as django_settings
    from django.test import Client

    from project.asgi import application

    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    headers = [(b"cookie", cookie.encode()), (b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    comm = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"type": "list"})
    assert await comm.receive_json_from(5) == {"type": "conversations", "items": []}
    await comm.disconnect()

    stranger = WebsocketCommunicator(application, "/ws/chat/", headers=headers[1:])
    connected, _ = await stranger.connect()
    assert connected
    assert await stranger.receive_output(2) == {"type": "websocket.close", "code": 4401}
    await stranger.wait()


async def test_text_after_a_silent_first_token_still_arrives(user: Any, fake: FakeProvider, hub: Any) -> None:
    writes = openai_text_stream(["late"])
    fake.add(Script(writes=[writes[0], Write(openai_chunk({"content": "so "}), 0.3), *writes[1:]]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Take your time.")
    await tab.until_event("turn_end", outcome="complete")
    assert tab.text() == "so late"
    await tab.close()


async def test_a_consumer_killed_without_disconnect_releases_its_session(user: Any, fake: FakeProvider,
                                                                        hub: Any) -> None:
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    tab = await Tab(user).open()
    await tab.send(type="subscribe", conversationId=str(conversation.pk))
    await tab.until(lambda f: f["type"] == "snapshot")
    assert hub.delivery.follower_count(conversation.pk) == 1
    tab.comm.future.cancel()  # what a server does to an application that outlived its close timeout
    await asyncio.gather(tab.comm.future, return_exceptions=True)
    assert hub.delivery.follower_count(conversation.pk) == 0
    assert not hub.delivery.sockets()
