"""Steps the browser tests share: log in, type, wait for the turn, read the transcript."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.e2e.conftest import PASSWORD, RESULTS, BrowserPage

CONVERSATION_URL = re.compile(r".*/c/([0-9a-f-]{36})$")


def login(recorded: BrowserPage, user: Any, next_path: str = "/") -> None:
    """Log in through the login page and wait for the chat page's socket to connect."""
    page = recorded.page
    page.goto(f"/accounts/login/?next={next_path}")
    page.get_by_test_id("login-username").fill(user.get_username())
    page.get_by_test_id("login-password").fill(PASSWORD)
    page.get_by_test_id("login-submit").click()
    page.wait_for_url(f"**{next_path}")
    page.get_by_test_id("composer").wait_for()
    wait_connected(recorded)


def admin_login(recorded: BrowserPage, username: str, next_path: str) -> None:
    """Log in through the admin's login form and wait for ``next_path``."""
    page = recorded.page
    page.goto(f"/admin/login/?next={next_path}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_path}")


def wait_connected(recorded: BrowserPage) -> None:
    """Wait until the page's websocket is open (``<html data-connection="open">``)."""
    recorded.page.locator("html[data-connection='open']").wait_for(state="attached")


def send(recorded: BrowserPage, text: str) -> None:
    """Type ``text`` and press Enter, as a person would."""
    composer = recorded.page.get_by_test_id("composer")
    composer.fill(text)
    composer.press("Enter")


def ask(recorded: BrowserPage, text: str, until: str) -> Any:
    """Send ``text``, then wait until the first assistant message shows ``until``; return that
    message (a Playwright locator). Times out after the context's default (10 s)."""
    send(recorded, text)
    answer = recorded.page.get_by_test_id("message-assistant").first
    answer.get_by_text(until).wait_for()
    return answer


def ask_for_echo(recorded: BrowserPage, text: str) -> None:
    """Send ``text`` and wait for the scripted model's plain answer (``You said: <text>``, see
    ``scripted_model.py``) and for the turn to end."""
    send(recorded, text)
    recorded.page.get_by_text(f"You said: {text}").wait_for()
    wait_idle(recorded)


def reload(recorded: BrowserPage) -> None:
    """Reload the page and wait until its websocket is open again."""
    recorded.page.reload()
    wait_connected(recorded)


def stop_and_read_words(recorded: BrowserPage) -> list[int]:
    """Click Stop on a ``[slow]`` answer, wait (5 s at most) for the turn to end, and return the
    numbers of the words shown, checked to be 0, 1, 2 … with no gap and no duplicate."""
    recorded.page.get_by_test_id("stop").click()
    wait_idle(recorded, timeout=5_000)
    words = slow_words(assistant_text(recorded))
    assert words == list(range(len(words))), words
    return words


def screenshot(recorded: BrowserPage, name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    recorded.page.screenshot(path=str(path))
    return path


def conversation_id(recorded: BrowserPage) -> str:
    match = CONVERSATION_URL.match(recorded.page.url)
    assert match, recorded.page.url
    return match.group(1)


def assistant_text(recorded: BrowserPage, index: int = -1) -> str:
    return str(recorded.page.get_by_test_id("message-assistant").nth(index).locator(".message-body").inner_text())


def wait_idle(recorded: BrowserPage, timeout: float = 15_000) -> None:
    """Wait until the turn is over (Send is back, Stop gone)."""
    recorded.page.get_by_test_id("send").wait_for(state="visible", timeout=timeout)
    recorded.page.get_by_test_id("stop").wait_for(state="hidden", timeout=timeout)


def slow_words(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"word(\d+)", text)]


def assert_clean(*pages: BrowserPage) -> None:
    for recorded in pages:
        assert recorded.errors == [], recorded.errors
        assert recorded.console_errors == [], recorded.console_errors
