"""Websocket hardening (docs/security.md, threats 1, 4, 9 and 10): cross-site handshakes, sockets that
outlive a logout, conversation list paging, and bad frames of every kind while a valid
stream runs in another tab.

Real parts: ``project.asgi.application`` (origin check, session cookie) or the consumer
through WebsocketCommunicator, the real database, a FakeProvider on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from jxai_app import conf, store
from jxai_app.models import Conversation, Message
from tests.app.turns_support import MODEL, Tab, assert_in_order, fake, hub, text_script  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

LOCAL = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]


def _login(user: Any) -> tuple[Client, bytes]:
    client = Client()
    client.force_login(user)
    return client, f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}".encode()


async def _socket(cookie: bytes | None, headers: list[tuple[bytes, bytes]] = LOCAL) -> WebsocketCommunicator:
    from project.asgi import application

    extra = [(b"cookie", cookie)] if cookie else []
    return WebsocketCommunicator(application, "/ws/chat/", headers=[*headers, *extra])


async def _answers_list(comm: WebsocketCommunicator) -> bool:
    await comm.send_json_to({"type": "list"})
    frame = await comm.receive_json_from(5)
    return frame["type"] == "conversations"


# -- cross-site websocket hijacking (threat 9) --------------------------------------------
async def _handshake(user: Any, headers: list[tuple[bytes, bytes]], scheme: str = "ws") -> WebsocketCommunicator | None:
    """Open the real application's socket with ``user``'s session cookie and ``headers``;
    the open communicator, or ``None`` once the handshake was refused (closed, code 1000,
    before the consumer ran)."""
    _, cookie = await sync_to_async(_login)(user)
    comm = await _socket(cookie, headers)
    comm.scope["scheme"] = scheme
    connected, code = await comm.connect()
    if connected:
        return comm
    assert code == 1000
    await comm.wait()
    return None


@pytest.mark.parametrize("origin", [
    b"https://evil.example", b"http://127.0.0.1.evil.example", b"http://evil.example:8000", b"null", None,
    b"http://127.0.0.1:18902",  # another port on the same host: another site
    b"https://127.0.0.1:8000",  # another scheme on the same host and port
    b"http://127.0.0.1",  # the default port, 80, is another port too
    b"http://localhost:8000",  # an allowed host, but not the one the socket was opened on
    b"http://127.0.0.1:8000/path", b"http://user@127.0.0.1:8000", b"ws://127.0.0.1:8000",
])
async def test_a_foreign_or_missing_origin_is_refused_at_the_handshake(user: Any, origin: bytes | None) -> None:
    headers = [(b"host", b"127.0.0.1:8000")] + ([(b"origin", origin)] if origin is not None else [])
    assert await _handshake(user, headers) is None


async def test_the_page_s_own_origin_is_accepted(user: Any) -> None:
    for host in (b"127.0.0.1:8000", b"localhost:8000", b"[::1]:8000", b"localhost"):
        comm = await _handshake(user, [(b"origin", b"http://" + host), (b"host", host)])
        assert comm is not None and await _answers_list(comm)
        await comm.disconnect()


async def test_over_tls_only_the_https_origin_is_the_site_s_own(settings: Any, user: Any) -> None:
    settings.ALLOWED_HOSTS = ["chat.example.com"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    host = (b"host", b"chat.example.com")
    for scheme, extra in (("wss", []), ("ws", [(b"x-forwarded-proto", b"https")])):
        comm = await _handshake(user, [(b"origin", b"https://chat.example.com"), host, *extra], scheme)
        assert comm is not None and await _answers_list(comm)
        await comm.disconnect()
        assert await _handshake(user, [(b"origin", b"http://chat.example.com"), host, *extra], scheme) is None
        assert await _handshake(user, [(b"origin", b"https://chat.example.com:8443"), host, *extra], scheme) is None
    assert await _handshake(user, [(b"origin", b"https://chat.example.com"), host]) is None  # plain ws, no proxy word


async def test_trusted_origins_are_accepted_scheme_host_and_port_alike(settings: Any, user: Any) -> None:
    settings.CSRF_TRUSTED_ORIGINS = ["https://app.example.com", "https://*.example.org"]
    local = (b"host", b"127.0.0.1:8000")
    for origin in (b"https://app.example.com", b"https://app.example.com:443", b"https://a.example.org",
                   b"https://example.org"):
        comm = await _handshake(user, [(b"origin", origin), local])
        assert comm is not None, origin
        await comm.disconnect()
    for origin in (b"http://app.example.com", b"https://app.example.com:8443", b"https://evil.app.example.com",
                   b"http://a.example.org", b"https://a.example.org:8443", b"https://example.org.evil"):
        assert await _handshake(user, [(b"origin", origin), local]) is None, origin


# -- stale sessions (threat 10) -----------------------------------------------------------
async def _closed_with(comm: WebsocketCommunicator, timeout: float = 3.0) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        output = await comm.receive_output(max(0.01, deadline - loop.time()))
        if output["type"] == "websocket.close":
            return int(output["code"])


async def test_a_logout_closes_the_open_socket_with_4401(settings: Any, user: Any) -> None:
    settings.JXAI_WS_SESSION_CHECK_SECONDS = 0.1
    client, cookie = await sync_to_async(_login)(user)
    comm = await _socket(cookie)
    assert (await comm.connect())[0] and await _answers_list(comm)
    await asyncio.sleep(0.35)  # a few checks pass while the session is valid
    assert await _answers_list(comm)

    await sync_to_async(client.logout)()  # flushes the session in the database
    assert await _closed_with(comm) == 4401
    await comm.wait()


async def test_a_password_change_elsewhere_closes_the_socket(settings: Any, user: Any) -> None:
    settings.JXAI_WS_SESSION_CHECK_SECONDS = 0.1
    _, cookie = await sync_to_async(_login)(user)
    comm = await _socket(cookie)
    assert (await comm.connect())[0] and await _answers_list(comm)
    user.set_password("a brand new secret 42")
    await user.asave()  # the session's auth hash no longer matches (Django logs other sessions out)
    assert await _closed_with(comm) == 4401
    await comm.wait()


async def test_deactivating_the_user_closes_every_socket_of_theirs_only(settings: Any, user: Any,
                                                                     other_user: Any) -> None:
    settings.JXAI_WS_SESSION_CHECK_SECONDS = 0.1
    _, cookie = await sync_to_async(_login)(user)
    by_cookie = await _socket(cookie)
    assert (await by_cookie.connect())[0]
    direct = await Tab(user).open()  # a socket without a session: checked on the user alone
    bystander = await Tab(other_user).open()

    user.is_active = False
    await user.asave()
    assert await _closed_with(by_cookie) == 4401
    assert await _closed_with(direct.comm) == 4401
    await bystander.send(type="list")
    assert (await bystander.recv())["type"] == "conversations"
    await bystander.close()
    await by_cookie.wait()
    await direct.comm.wait()


async def test_the_default_check_interval_is_within_a_minute() -> None:
    assert 0 < conf.ws_session_check_seconds() <= 60


# -- conversation list paging (threat 4) --------------------------------------------------
async def test_list_pages_through_every_conversation_once_most_recent_first(settings: Any, user: Any,
                                                                          other_user: Any) -> None:
    settings.JXAI_CONVERSATIONS_PAGE_SIZE = 2
    create = sync_to_async(store.conversation_create)
    mine = [await create(user=user, model=MODEL) for _ in range(5)]
    for _ in range(3):
        await create(user=other_user, model=MODEL)
    expected = [str(pk) async for pk in Conversation.objects.filter(owner=user)
                .order_by("-updated_at", "-pk").values_list("pk", flat=True)]
    assert sorted(expected) == sorted(str(c.pk) for c in mine)

    tab = await Tab(user).open()
    seen: list[str] = []
    pages = 0
    cursor: str | None = None
    while True:
        await tab.send(type="list", **({"before": cursor} if cursor else {}))
        page = await tab.recv()
        assert page["type"] == "conversations" and len(page["items"]) <= 2
        seen += [c["id"] for c in page["items"]]
        pages += 1
        cursor = page.get("next")
        if cursor is None:
            break
    assert seen == expected and pages == 3

    await tab.send(type="list", before=None)  # null: the first page
    assert [c["id"] for c in (await tab.recv())["items"]] == expected[:2]
    await tab.close()


@pytest.mark.parametrize("before", ["garbage", "2025-01-01T00:00:00+00:00|not-a-uuid",
                                    f"2025-01-01T00:00:00|{uuid.uuid4()}", 12, ["x"]])
async def test_a_bad_cursor_is_an_invalid_request(user: Any, before: Any) -> None:
    tab = await Tab(user).open()
    await tab.send(type="list", before=before)
    frame = await tab.recv()
    assert frame["type"] == "error" and frame["code"] == "invalid-request" and frame.get("request") in ("list", None)
    assert await _answers_list(tab.comm)
    await tab.close()


# -- bad frames of every kind beside a valid stream (threats 1 and 4) ---------------------
def _bad_frames(cid: str, foreign: str, frame_limit: int, text_limit: int) -> list[tuple[str | bytes, str]]:
    """(frame, expected error code) pairs: every way a frame can be wrong."""
    def j(**frame: Any) -> str:
        return json.dumps(frame)

    frames: list[tuple[str | bytes, str]] = [
        (b"\x00\x01binary", "invalid-request"),
        (b"{\"type\": \"list\"}", "invalid-request"),  # JSON, but in a binary frame
        ("not json {", "invalid-request"),
        ("", "invalid-request"),
        ("[" * 50_000, "invalid-request"),  # nested past the parser's recursion limit
        ('{"type": "list", "before": ' + "[" * 50_000 + "]" * 50_000 + "}", "invalid-request"),
        ("[1, 2]", "invalid-request"), ("42", "invalid-request"), ("null", "invalid-request"),
        ('"send"', "invalid-request"),
        (j(type="nope"), "invalid-request"), (j(no="type"), "invalid-request"), (j(type=5), "invalid-request"),
        (j(type="send", text=5), "invalid-request"),
        (j(type="send", conversationId=7, text="x"), "invalid-request"),
        (j(type="send", conversationId=None), "invalid-request"),
        (j(type="send", conversationId=None, text="   "), "invalid-request"),
        (j(type="send", conversationId=None, text="hi", model=["m"]), "invalid-request"),
        (j(type="send", conversationId=None, text="hi", model="no-such-model"), "invalid-request"),
        (j(type="cancel"), "invalid-request"),
        (j(type="resync", conversationId=cid, turnId="t", afterSeq=-1), "invalid-request"),
        (j(type="resync", conversationId=cid, turnId="t", afterSeq=True), "invalid-request"),
        (j(type="rename", conversationId=cid, title=None), "invalid-request"),
        (j(type="rename", conversationId=cid, title=""), "invalid-request"),
        (j(type="rename", conversationId=cid, title="x" * 201), "invalid-request"),
        (j(type="list", before=5), "invalid-request"),
        ('{"type": "send", "conversationId": null, "text": "\\ud800 lone surrogate"}', "invalid-request"),
        ('{"type": "rename", "conversationId": "' + cid + '", "title": "\\udfff"}', "invalid-request"),
        ("x" * (frame_limit + 1), "payload-too-large"),
        (json.dumps({"type": "send", "conversationId": None, "text": "é" * (frame_limit // 2 + 1)},
                    ensure_ascii=False), "payload-too-large"),  # fewer characters than bytes
        (j(type="send", conversationId=cid, text="y" * (text_limit + 1)), "payload-too-large"),
        (j(type="send", conversationId=cid, text="while it runs"), "conflict"),
        (j(type="retry", conversationId=cid), "conflict"),
    ]
    for kind in ("subscribe", "cancel", "retry", "delete"):
        frames.append((j(type=kind, conversationId=foreign), "not-found"))
        frames.append((j(type=kind, conversationId="not-a-uuid"), "not-found"))
    frames += [
        (j(type="send", conversationId=foreign, text="let me in"), "not-found"),
        (j(type="rename", conversationId=foreign, title="mine now"), "not-found"),
        (j(type="resync", conversationId=foreign, turnId=str(uuid.uuid4()), afterSeq=0), "not-found"),
        (j(type="send", conversationId=str(uuid.uuid4()), text="nobody's"), "not-found"),
    ]
    frames += [(j(type="flood", n=i), "invalid-request") for i in range(300)]  # a rapid flood
    return frames


async def test_bad_frames_of_every_kind_beside_a_valid_stream(settings: Any, user: Any, other_user: Any,
                                                             fake: Any, hub: Any) -> None:
    parts = [f"[{i:03d}é]" for i in range(300)]
    fake.add(text_script(parts, delay=0.004))
    foreign = await sync_to_async(store.conversation_create)(user=other_user, model=MODEL)
    await sync_to_async(store.conversation_rename)(user=other_user, conversation_id=foreign.pk, title="Private")

    streaming = await Tab(user).open()
    await streaming.send(type="send", conversationId=None, text="Count for me.")
    await streaming.until_event("delta")
    cid = streaming.frames[0]["conversation"]["id"]
    limits = (settings.JXAI_WS_MAX_FRAME_BYTES, settings.JXAI_MAX_MESSAGE_CHARS)
    bad = _bad_frames(cid, str(foreign.pk), *limits)

    attacker = await Tab(user).open()  # the same user, another tab
    for frame, _ in bad:
        member = "bytes" if isinstance(frame, bytes) else "text"
        await attacker.comm.send_input({"type": "websocket.receive", member: frame})
    errors: list[dict[str, Any]] = []
    while len(errors) < len(bad):
        frame = await attacker.recv(timeout=15)
        assert frame["type"] in ("error", "conversation"), frame  # list notices of the running turn are fine
        if frame["type"] == "error":
            errors.append(frame)
    assert [e["code"] for e in errors] == [code for _, code in bad]
    assert all(e["problem"]["type"].endswith("/" + e["code"]) and e["message"] for e in errors)
    assert not any("Private" in json.dumps(e) for e in errors)
    assert await _answers_list(attacker.comm)  # still open and serving

    end = await streaming.until_event("turn_end", timeout=30)
    assert end["event"]["outcome"] == "complete"
    items = streaming.events()
    assert_in_order(items)
    assert streaming.text() == "".join(parts)  # every character, once, in order
    saved = [(m.role, m.content) async for m in Message.objects.filter(conversation_id=cid).order_by("position")]
    assert saved == [("user", "Count for me."), ("assistant", "".join(parts))]
    # Nothing the attacker sent changed anything saved.
    assert await Conversation.objects.filter(owner=user).acount() == 1
    still = await Conversation.objects.aget(pk=foreign.pk)
    assert still.title == "Private" and not await Message.objects.filter(conversation_id=foreign.pk).aexists()
    assert len(fake.requests) == 1
    await attacker.close()
    await streaming.close()


async def test_the_sse_endpoint_answers_json_nested_past_the_parser_with_a_400(user: Any) -> None:
    """The same parser limit on ``POST /ai/chat`` (found by the frame test above): a 400
    problem, not a server error."""
    from django.test import AsyncClient

    from jxai_app.models import ApiToken
    from tests.app.apisupport import bearer, post_chat, problem_of

    key = (await sync_to_async(ApiToken.issue)(user=user, name="tests"))[1]
    body = b'{"messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    response = await post_chat(AsyncClient(), body, bearer(key))
    assert response.status_code == 400
    assert problem_of(response)["detail"] == "Invalid JSON body"
