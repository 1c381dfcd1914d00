"""Edges of sending from the page.

Two tabs of one conversation send at the same moment: the server starts one turn and refuses
the other with ``conflict``. The refused tab must lose nothing and show nothing false: its
text goes back into its composer, its transcript shows only what was saved, and the conflict
banner goes away once the other tab's turn is over.

The race is made certain by holding the refused tab's ``send`` frame (Playwright's websocket
routing) until that tab has received the other tab's ``message_saved``: exactly the order in
which a new-user test saw the page take the other tab's message for its own, clear its
composer and keep its refused message on screen.

A paste longer than the message limit is cut by the composer's ``maxlength``; the page says so.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jxai_app.models import Message
from tests.e2e.steps import ask_for_echo, assert_clean, conversation_id, wait_connected, wait_idle

SOCKET = re.compile(r".*/ws/chat/$")


def hold_send_until_other_message(recorded: Any) -> dict[str, Any]:
    """Route the page's websocket through Playwright: its ``send`` frame is held until a
    ``message_saved`` of a user message reaches the page, then forwarded."""
    seen: dict[str, Any] = {"held": [], "released": False}

    def route(ws: Any) -> None:
        server = ws.connect_to_server()

        def from_page(message: Any) -> None:
            if not seen["released"] and json.loads(message).get("type") == "send":
                seen["held"].append(message)
            else:
                server.send(message)

        def from_server(message: Any) -> None:
            ws.send(message)
            frame = json.loads(message)
            if (frame.get("type") == "message_saved" and frame["message"]["role"] == "user"
                    and seen["held"] and not seen["released"]):
                seen["released"] = True
                for held in seen["held"]:
                    server.send(held)

        ws.on_message(from_page)
        server.on_message(from_server)

    recorded.page.route_web_socket(SOCKET, route)
    return seen


def test_the_refused_tab_keeps_its_text_and_shows_only_what_was_saved(open_page: Any, logged_in: Any) -> None:
    first = logged_in()
    ask_for_echo(first, "hello from the first tab")
    cid = conversation_id(first)

    second = open_page(context=first.page.context)  # same user, second tab
    seen = hold_send_until_other_message(second)
    second.page.goto(f"/c/{cid}")
    wait_connected(second)
    second.page.get_by_test_id("composer").fill("my words must not be lost")
    second.page.get_by_test_id("composer").press("Enter")  # held in the route for now
    first.page.get_by_test_id("composer").fill("[slow] the first tab wins")
    first.page.get_by_test_id("composer").press("Enter")

    banner = second.page.get_by_test_id("error")
    banner.wait_for(state="visible")
    assert seen["released"]
    assert "already running" in banner.inner_text()
    assert second.page.get_by_test_id("composer").input_value() == "my words must not be lost"
    shown = second.page.get_by_test_id("message-user").all_inner_texts()
    assert not any("my words must not be lost" in text for text in shown), shown
    assert any("the first tab wins" in text for text in shown), shown

    first.page.get_by_test_id("stop").click()  # end the first tab's turn
    wait_idle(first, timeout=5_000)
    wait_idle(second, timeout=5_000)
    banner.wait_for(state="hidden")  # the conflict is over: the banner goes with it
    saved = list(Message.objects.filter(conversation_id=cid, role="user").order_by("position")
                 .values_list("content", flat=True))
    assert saved == ["hello from the first tab", "[slow] the first tab wins"]
    for recorded in (first, second):
        texts = recorded.page.get_by_test_id("message-user").locator(".message-body").all_inner_texts()
        assert texts == saved, texts
    assert_clean(first, second)


def test_a_paste_longer_than_the_limit_is_announced(logged_in: Any) -> None:
    from django.conf import settings

    recorded = logged_in()
    limit = settings.JXAI_MAX_MESSAGE_CHARS
    composer = recorded.page.get_by_test_id("composer")
    composer.focus()
    recorded.page.evaluate(
        """(size) => {
            const data = new DataTransfer();
            data.setData("text/plain", "x".repeat(size));
            document.querySelector("[data-testid=composer]").dispatchEvent(
                new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
        }""", limit + 500)
    banner = recorded.page.get_by_test_id("error")
    banner.wait_for(state="visible")
    assert f"limited to {limit} characters" in banner.inner_text()
    assert_clean(recorded)


def test_a_send_pressed_while_connecting_goes_once_the_socket_opens(logged_in: Any) -> None:
    """Enter pressed before the socket is open (the page has just loaded, or it is reconnecting)
    is held, not refused: the text stays in the composer under a "Connecting…" notice and goes
    when the socket opens (docs/websocket.md "Connecting"). The socket is kept from opening by
    closing every connection in Playwright's websocket route until the test lets them through."""
    recorded = logged_in()
    gate = {"open": False}

    def route(ws: Any) -> None:
        if not gate["open"]:
            ws.close()
            return
        server = ws.connect_to_server()
        ws.on_message(server.send)
        server.on_message(ws.send)

    recorded.page.route_web_socket(SOCKET, route)
    recorded.page.reload()
    recorded.page.locator("html[data-connection='closed']").wait_for(state="attached")
    composer = recorded.page.get_by_test_id("composer")
    composer.fill("sent before the socket was up")
    composer.press("Enter")
    banner = recorded.page.get_by_test_id("error")
    banner.wait_for(state="visible")
    assert "Connecting" in banner.inner_text()
    assert composer.input_value() == "sent before the socket was up"

    gate["open"] = True
    recorded.page.get_by_text("You said: sent before the socket was up").wait_for(timeout=15_000)
    wait_idle(recorded)
    assert composer.input_value() == "" and banner.is_hidden()
    cid = conversation_id(recorded)
    saved = list(Message.objects.filter(conversation_id=cid).order_by("position").values_list("role", "content"))
    assert [role for role, _ in saved] == ["user", "assistant"], saved
    assert saved[0][1] == "sent before the socket was up" and "You said: sent before" in saved[1][1], saved


def test_an_enter_pressed_before_the_page_script_runs_is_sent_once_it_does(logged_in: Any) -> None:
    """chat.js runs only after the vendored libraries have loaded; an Enter pressed before that
    (a fast paste and Enter as the page appears) is remembered by early.js, not typed as a
    newline, and the message goes once chat.js starts (docs/websocket.md "Connecting"). The
    wait is made certain by holding highlight.min.js until the Enter was pressed."""
    recorded = logged_in()
    page = recorded.page
    held: list[Any] = []
    page.route("**/vendor/highlight.min.js", lambda route: held.append(route))
    page.reload(wait_until="commit")
    composer = page.get_by_test_id("composer")
    composer.fill("pressed before the script ran")
    composer.press("Enter")
    assert held and composer.input_value() == "pressed before the script ran"  # no newline typed
    for route in held:
        route.continue_()
    page.get_by_text("You said: pressed before the script ran").wait_for(timeout=15_000)
    wait_idle(recorded)
    assert composer.input_value() == ""
    cid = conversation_id(recorded)
    assert list(Message.objects.filter(conversation_id=cid, role="user").values_list("content", flat=True)) == [
        "pressed before the script ran"]
