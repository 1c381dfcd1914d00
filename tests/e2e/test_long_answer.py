"""A 2 MB answer in the browser: it streams in, and a reload shows it whole; an
answer cut at a length limit says so, live and after a reload.

The server sends no websocket message over 256 KiB (docs/websocket.md "Frame size"): the
answer's ``round_end`` event, its ``message_saved`` and, after the reload, the ``snapshot``
arrive as ``chunk`` frames which the page joins (``socket.js``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.scripted_model import long_words
from tests.e2e.steps import assert_clean, assistant_text, reload, send, wait_idle

pytestmark = pytest.mark.browser

CUT_NOTE = "The answer was cut off (length limit)."


def test_a_two_megabyte_answer_shows_live_and_after_a_reload(logged_in: Any) -> None:
    recorded = logged_in()
    page = recorded.page
    answer = long_words()
    last_word = answer.split()[-1]
    send(recorded, "[long] Write two megabytes.")
    wait_idle(recorded, timeout=60_000)
    assert assistant_text(recorded).split() == answer.split()

    reload(recorded)
    page.get_by_test_id("message-assistant").get_by_text(last_word).wait_for(timeout=30_000)
    assert assistant_text(recorded).split() == answer.split()
    assert page.get_by_test_id("message-user").count() == 1
    assert_clean(recorded)


def test_a_cut_answer_says_so_live_and_after_a_reload(logged_in: Any) -> None:
    recorded = logged_in()
    answer = recorded.page.get_by_test_id("message-assistant").first
    send(recorded, "[cut] Write until the limit.")
    wait_idle(recorded)
    assert assistant_text(recorded) == "This answer stops in the mid"
    answer.get_by_text(CUT_NOTE).wait_for()
    reload(recorded)
    answer.get_by_text(CUT_NOTE).wait_for()
    assert_clean(recorded)
