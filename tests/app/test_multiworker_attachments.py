"""Attachments across two daphne workers sharing PostgreSQL, Redis and one storage (marker
``scaleout``; docs/attachments.md "Storage"): a question sent with an image on one worker
reaches the tab on the other with its files (through the channel layer), its snapshot there
carries them, the model gets the image's exact bytes, and the other worker serves the file.
Skipped in the embedded default (one process; the same paths run in
``test_attachments_turns.py``)."""

from __future__ import annotations

import asyncio
import base64
import urllib.request
from typing import Any

from channels.db import database_sync_to_async as sync_to_async

from tests.app.attachment_support import media_root, png  # noqa: F401  (fixture)
from tests.app.cluster_support import SCALEOUT_MARKS, cluster, provider, subscribe  # noqa: F401
from tests.app.turns_support import MODEL, text_script
from tests.support.fake_provider import FakeProvider
from tests.support.workers import Cluster, WsClient, session_cookie

pytestmark = SCALEOUT_MARKS


def _get(port: int, path: str, cookie: str) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Cookie": cookie})
    with urllib.request.urlopen(request, timeout=10) as response:
        body: bytes = response.read()
    return body


async def test_a_question_with_an_image_shows_on_the_other_worker(user: Any, provider: FakeProvider,
                                                                 cluster: Cluster, media_root: Any) -> None:
    from jxai_app import store

    worker_a, worker_b = cluster.start("a", "b", DJANGO_MEDIA_ROOT=str(media_root))
    cookie = await sync_to_async(session_cookie)(user)
    conversation = await sync_to_async(store.conversation_create)(user=user, model=MODEL)
    cid = str(conversation.pk)
    data = png(7, 5, (40, 200, 90))
    image = await sync_to_async(store.attachment_upload)(user=user, name="plot.png", data=data, quota=None)
    provider.add(text_script(["Green."]))

    async with WsClient(worker_a.port, cookie) as a, WsClient(worker_b.port, cookie) as b:
        await subscribe([a, b], cid)
        await a.send(type="send", conversationId=cid, text="Colour?", attachments=[str(image.pk)])
        saved = await b.until(lambda f: f["type"] == "message_saved" and f["message"]["role"] == "user",
                              what="the question on worker b")
        [shown] = saved["message"]["attachments"]
        assert (shown["id"], shown["name"], shown["width"], shown["height"]) == (str(image.pk), "plot.png", 7, 5)
        await b.until_event("turn_end")
        await b.send(type="subscribe", conversationId=cid)
        snapshot = await b.until(lambda f: f["type"] == "snapshot", what="snapshot on worker b")
        assert snapshot["messages"][0]["attachments"] == saved["message"]["attachments"]

    url = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    assert provider.requests[0].json["messages"][-1]["content"][1] == {"type": "image_url", "image_url": {"url": url}}
    assert await asyncio.to_thread(_get, worker_b.port, shown["url"], cookie) == data
