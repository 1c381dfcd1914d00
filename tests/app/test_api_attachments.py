"""Images on ``POST /ai/chat`` (docs/api.md "Attachments"): the stateless mode passes
``image_url`` parts through as sent, the conversation mode takes uploaded ids like the
websocket; an image counts ``IMAGE_TOKENS`` in the quota's reservation, not its data URL's
characters. Through Django's async client, the real views and a FakeProvider on 127.0.0.1."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from jxai_app import store
from jxai_app.core.tokens import IMAGE_TOKENS
from jxai_app.models import UsageLedger
from tests.app.apisupport import bearer, fake, post_chat, read_all, token  # noqa: F401  (fixtures)
from tests.app.attachment_support import media_root, png  # noqa: F401  (fixture)
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream

pytestmark = pytest.mark.django_db(transaction=True)

PNG = png(3, 3, (9, 9, 9))
URL = "data:image/png;base64," + base64.b64encode(PNG).decode("ascii")


async def test_stateless_image_parts_pass_through_and_count_as_images(fake: FakeProvider, token: str) -> None:
    fake.add(Script(writes=openai_text_stream(["Grey."])))  # no usage: the estimate is recorded
    parts = [{"type": "text", "text": "Colour?"}, {"type": "image_url", "image_url": {"url": URL, "detail": "low"}}]
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": parts}]}, bearer(token))
    assert response.status_code == 200
    await read_all(response)
    [sent] = fake.requests
    assert sent.json["messages"][-1] == {"role": "user", "content": parts}
    usage = await sync_to_async(UsageLedger.objects.get)()
    assert IMAGE_TOKENS < usage.input_tokens < IMAGE_TOKENS + 50  # not len(URL) / 4


async def test_conversation_mode_takes_uploaded_ids(fake: FakeProvider, token: str, user: Any,
                                                    media_root: Any) -> None:
    image = await sync_to_async(store.attachment_upload)(user=user, name="grey.png", data=PNG, quota=None)
    fake.add(Script(writes=openai_text_stream(["Grey."])))
    payload = {"messages": [{"role": "user", "content": "Colour?", "attachments": [str(image.pk)]}]}
    response = await AsyncClient().post("/ai/chat?conversation=new", data=payload, content_type="application/json",
                                        headers=bearer(token))
    assert response.status_code == 200, response.content
    await read_all(response)
    assert fake.requests[0].json["messages"][-1]["content"] == [
        {"type": "text", "text": "Colour?"}, {"type": "image_url", "image_url": {"url": URL}}]
    bad = {"messages": [{"role": "user", "content": "Again", "attachments": "grey.png"}]}
    refused = await AsyncClient().post("/ai/chat?conversation=new", data=bad, content_type="application/json",
                                       headers=bearer(token))
    assert refused.status_code == 400 and "attachments" in refused.json()["detail"]
