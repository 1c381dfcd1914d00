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


def wait_connected(recorded: BrowserPage) -> None:
    """Wait until the page's websocket is open (``<html data-connection="open">``)."""
    recorded.page.locator("html[data-connection='open']").wait_for(state="attached")


def send(recorded: BrowserPage, text: str) -> None:
    """Type ``text`` and press Enter, as a person would."""
    composer = recorded.page.get_by_test_id("composer")
    composer.fill(text)
    composer.press("Enter")


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
