"""The page's side of the websocket protocol in a real browser (notes/ws-protocol.md):
re-subscribing after a dropped socket, and asking for a ``resync`` when events go missing.

Playwright's ``route_web_socket`` puts a :class:`SocketTap` between the page and the real
server: frames pass through unchanged unless the test drops some or cuts the connection.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

import pytest

from tests.e2e.conftest import BrowserPage
from tests.e2e.steps import (
    ask, assert_clean, conversation_id, login, reload, stop_and_read_words, wait_connected, wait_idle,
)

pytestmark = pytest.mark.browser


class SocketTap:
    """Relays ``ws/chat/`` between page and server, recording every frame both ways.

    Attributes:
        to_server: frames the page sent, per connection (a list of lists).
        to_page: frames the server sent and the page received.
        dropped: server frames withheld from the page.
        drop: a predicate; a server frame for which it returns True is withheld.
    """

    def __init__(self) -> None:
        self.to_server: list[list[dict[str, Any]]] = []
        self.to_page: list[dict[str, Any]] = []
        self.dropped: list[dict[str, Any]] = []
        self.drop: Callable[[dict[str, Any]], bool] | None = None
        self._pairs: list[tuple[Any, Any]] = []

    def __call__(self, page_side: Any) -> None:
        server_side = page_side.connect_to_server()
        sent: list[dict[str, Any]] = []
        self.to_server.append(sent)
        self._pairs.append((page_side, server_side))

        def from_page(message: str | bytes) -> None:
            sent.append(json.loads(message))
            server_side.send(message)

        def from_server(message: str | bytes) -> None:
            frame = json.loads(message)
            if self.drop is not None and self.drop(frame):
                self.dropped.append(frame)
                return
            self.to_page.append(frame)
            page_side.send(message)

        page_side.on_message(from_page)
        server_side.on_message(from_server)

    @property
    def connections(self) -> int:
        return len(self._pairs)

    def cut(self) -> None:
        """Drop the current connection, as a network fault would."""
        page_side, server_side = self._pairs[-1]
        server_side.close(code=1001, reason="tap cut")
        page_side.close(code=4000, reason="tap cut")


@pytest.fixture
def tapped(open_page: Any) -> tuple[BrowserPage, SocketTap]:
    tab = open_page()
    tap = SocketTap()
    tab.page.route_web_socket(re.compile(r"/ws/chat/$"), tap)
    return tab, tap


def test_a_dropped_socket_reconnects_resubscribes_and_catches_up(tapped: Any, make_user: Any) -> None:
    tab, tap = tapped
    login(tab, make_user())
    page = tab.page
    ask(tab, "[slow] keep going through a network fault", until="word8")
    cid = conversation_id(tab)

    tap.cut()
    page.wait_for_function("document.documentElement.dataset.connection !== 'open'")
    wait_connected(tab)                                              # reconnected on its own
    assert tap.connections == 2
    assert {"type": "subscribe", "conversationId": cid} in tap.to_server[1]
    answer = page.get_by_test_id("message-assistant").first
    answer.get_by_text("word40").wait_for()                          # the stream goes on
    assert len(stop_and_read_words(tab)) >= 40                       # no gap, no duplicate
    assert page.get_by_test_id("message-user").count() == 1
    assert_clean(tab)


def test_missing_events_are_asked_for_again_with_resync(tapped: Any, make_user: Any) -> None:
    tab, tap = tapped
    login(tab, make_user())
    page = tab.page
    withheld = {6, 7}

    def lose_seq_6_and_7(frame: dict[str, Any]) -> bool:
        return frame.get("type") == "events" and any(item.get("seq") in withheld for item in frame["items"])

    tap.drop = lose_seq_6_and_7
    ask(tab, "[slow] lose a few events", until="word30")
    assert tap.dropped                                               # the page really missed them
    resyncs = [f for f in tap.to_server[0] if f["type"] == "resync"]
    assert resyncs, tap.to_server[0]
    first = resyncs[0]
    assert first["conversationId"] == conversation_id(tab) and first["afterSeq"] < min(withheld)
    replays = [f for f in tap.to_page if f["type"] == "replay"]
    assert replays and replays[0]["turnId"] == first["turnId"]
    assert {item["seq"] for item in replays[0]["items"]} >= withheld
    assert len(stop_and_read_words(tab)) >= 30                       # no gap, no duplicate
    assert_clean(tab)


def test_reasoning_is_shown_folded_apart_from_the_answer(logged_in: Any) -> None:
    tab = logged_in()
    page = tab.page
    answer = ask(tab, "[think] what is the capital of France?", until="Paris is the capital of France.")
    wait_idle(tab)
    reasoning = answer.get_by_test_id("reasoning")
    assert reasoning.is_visible() and reasoning.get_attribute("open") is None       # folded
    assert reasoning.locator("summary").inner_text() == "Reasoning"
    assert not reasoning.locator(".reasoning-text").is_visible()
    assert "France's capital is Paris." not in answer.locator(".message-body").inner_text()
    reasoning.locator("summary").click()
    assert reasoning.locator(".reasoning-text").inner_text() == "The user asks for a capital. France's capital is Paris."
    reload(tab)                                                      # saved with the message
    saved = page.get_by_test_id("message-assistant").first.get_by_test_id("reasoning")
    saved.wait_for()
    assert saved.locator(".reasoning-text").text_content() == "The user asks for a capital. France's capital is Paris."
    assert_clean(tab)
