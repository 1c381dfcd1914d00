"""Long answers reach every tab (docs/websocket.md "Frame size").

Real ``daphne`` workers (``tests.support.workers.start_workers``) on the test database, real
websocket clients (``WsClient``, the ``websockets`` library), the FakeProvider as the model.
On the embedded default both tabs are on one worker; in the scale-out pass (PostgreSQL and
Redis) the second tab is on a second worker, so the answer also crosses the channel layer.

The workers keep the default ``JXAI_MAX_ANSWER_CHARS`` (4,000,000): the 2 MB answer passes
whole, the 10 MB one is cut there (saved with ``stopReason`` ``length``).

Before the fix the ``round_end`` event of a 1.5 MB answer made one 1.5 MB message: autobahn
refuses to *send* a message over daphne's ``websocket_max_message_size`` (1 MiB) and raised
``PayloadExceededError`` into the socket's session task, which died: the socket stayed open
and silent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync_to_async

from tests.app.cluster_support import SCALEOUT, provider, saved_messages, subscribe  # noqa: F401 (fixture)
from tests.app.turns_support import MODEL, models_config, text_script
from tests.support.database import database_url
from tests.support.fake_provider import FakeProvider
from tests.support.workers import ROOT, Worker, WsClient, session_cookie, start_workers

pytestmark = pytest.mark.django_db(transaction=True)

PIECE = 'Line "quoted" \\ back-slashed, accented é, emoji 😀, tab\t.\n'
"""One line of the long answers: quotes, a backslash, non-ASCII and a non-BMP character,
so JSON escaping and slicing are exercised."""


def long_answer(chars: int, part: int = 4000) -> list[str]:
    """About ``chars`` characters of :data:`PIECE` lines, as ``part``-character deltas."""
    text = (PIECE * (chars // len(PIECE) + 1))[:chars]
    return [text[i:i + part] for i in range(0, len(text), part)]


@pytest.fixture
def workers(provider: FakeProvider, tmp_path: Path) -> Iterator[tuple[Worker, Worker]]:
    """(the asking tab's worker, the second tab's worker): the same one on the embedded default."""
    from django.db import connection

    env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict),
           "JXAI_MODELS_JSON": json.dumps(models_config(provider.url)), "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "PYTHONUNBUFFERED": "1", "JXAI_TOKENS_PER_DAY": str(10**9)}  # a 10 MB answer is ~2.5 M tokens
    env.pop("JXAI_MODELS_FILE", None)
    started = start_workers(["a", "b"] if SCALEOUT else ["a"], env, tmp_path)
    try:
        yield started[0], started[-1]
    finally:
        for worker in started:
            worker.stop()
        print("\n".join(worker.log()[-3000:] for worker in started))


async def _turn_done(client: WsClient, turn_timeout: float) -> str:
    item = await client.until_event("turn_end", timeout=turn_timeout, outcome="complete")
    await client.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    return next(t for t, items in client.items.items() if item in items)


@pytest.mark.parametrize("chars", [2_000_000, 10_000_000], ids=["2MB", "10MB"])
async def test_a_long_answer_reaches_both_tabs_in_bounded_frames(
        user: Any, provider: FakeProvider, workers: tuple[Worker, Worker], chars: int) -> None:
    from django.conf import settings

    from jxai_app import store
    from jxai_app.turns.framing import MAX_FRAME_BYTES

    worker_a, worker_b = workers
    cookie = await sync_to_async(session_cookie)(user)
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    cid = str(conversation.pk)
    parts = long_answer(chars)
    answer = "".join(parts)[: settings.JXAI_MAX_ANSWER_CHARS]
    stop_reason = "stop" if chars <= settings.JXAI_MAX_ANSWER_CHARS else "length"
    provider.add(text_script(parts), text_script(["short ", "one"]))

    async with WsClient(worker_a.port, cookie) as asking, WsClient(worker_b.port, cookie) as second:
        await subscribe([asking, second], cid)
        await asking.send(type="send", conversationId=cid, text="Write a lot.")
        for client in (asking, second):
            turn = await _turn_done(client, turn_timeout=120)
            seqs = [item["seq"] for item in client.items[turn]]
            assert seqs == list(range(1, len(seqs) + 1))
            assert client.text(turn) == answer
            saved = [f["message"] for f in client.of_type("message_saved") if f["message"]["role"] == "assistant"]
            assert [(m["content"], m["stopReason"]) for m in saved] == [(answer, stop_reason)]
            assert client.largest <= MAX_FRAME_BYTES
            assert client.chunked >= 2  # round_end (it carries the message) and message_saved

        # the asking socket answers the next send, and a reload (subscribe) shows the answer
        await asking.send(type="send", conversationId=cid, text="Now a short one.")
        second_turn = await _turn_done(asking, turn_timeout=30)
        assert asking.text(second_turn) == "short one"
        await asking.send(type="subscribe", conversationId=cid)
        snapshot = await asking.until(lambda f: f["type"] == "snapshot")
        assert [m["content"] for m in snapshot["messages"]] == ["Write a lot.", answer, "Now a short one.", "short one"]
        assert asking.largest <= MAX_FRAME_BYTES

    saved_rows = await sync_to_async(saved_messages)(cid)
    assert [content for _, content, _ in saved_rows] == ["Write a lot.", answer, "Now a short one.", "short one"]
    assert all(status == "complete" for _, _, status in saved_rows)
