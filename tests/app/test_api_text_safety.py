"""``POST /ai/chat`` and text no boundary can carry (docs/api.md "Checks, in order"): a NUL or a lone
surrogate anywhere in the body is a clear 400 before the provider is contacted, and model
output holding a lone surrogate streams on, escaped, to the end.

Real parts: the view through Django's async client, a FakeProvider on 127.0.0.1.
"""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient

from tests.app.apisupport import bearer, fake, frames, post_chat, problem_of, read_all, token  # noqa: F401
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream, sse

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(("body", "where"), [
    ('{"messages":[{"role":"user","content":"a\\u0000b"}]}', "messages[0].content"),
    ('{"messages":[{"role":"user","content":"x\\ud800y"}]}', "messages[0].content"),
    ('{"messages":[{"role":"user","content":[{"type":"text","text":"\\udfff"}]}]}', "messages[0].content[0].text"),
    ('{"systemPrompt":"be \\u0000 brief"}', "systemPrompt"),
    ('{"messages":[{"role":"user","content":"hi"}],"model":"fa\\ud83dst"}', "model"),
    ('{"tools":[{"type":"function","function":{"name":"f","description":"\\u0000"}}]}', "tools[0].function.description"),
])
async def test_a_nul_or_lone_surrogate_in_the_body_is_a_400_naming_where(
    fake: FakeProvider, token: str, body: str, where: str,
) -> None:
    response = await post_chat(AsyncClient(), body.encode(), bearer(token))
    assert response.status_code == 400
    doc = problem_of(response)
    assert doc["type"].endswith("/invalid-request")
    assert doc["detail"] == f"{where} holds a NUL character or a lone surrogate; send valid Unicode text."
    assert fake.requests == []


async def test_a_valid_surrogate_pair_passes(fake: FakeProvider, token: str) -> None:
    fake.add(Script(writes=openai_text_stream(["ok"])))
    body = b'{"messages":[{"role":"user","content":"\\ud83d\\ude00"}]}'
    raw = await read_all(await post_chat(AsyncClient(), body, bearer(token)))
    assert frames(raw)[-1] == {"type": "done", "stopReason": "stop"}
    assert fake.requests[0].json["messages"][-1]["content"] == "\U0001F600"


async def test_model_output_with_a_lone_surrogate_streams_escaped_to_the_end(fake: FakeProvider, token: str) -> None:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "bad \ud800 here"}, "finish_reason": None}]}
    writes = openai_text_stream(["before "])
    fake.add(Script(writes=[*writes[:2], sse(json.dumps(chunk)), *openai_text_stream([" after"])[1:]]))
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "hi"}]}, bearer(token))
    raw = await read_all(response)
    assert b'"bad \\ud800 here"' in raw
    events = frames(raw)
    assert "".join(e["content"] for e in events if e["type"] == "delta") == "before bad \ud800 here after"
    assert events[-1] == {"type": "done", "stopReason": "stop"}
