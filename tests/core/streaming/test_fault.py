"""Credentials in a provider's error text are masked before the text is cut, and any start of
a credential left at a cut is masked too: through the real client's error boundary
(``OpenAIChatClient`` over ``httpx.MockTransport``), for every place the cut can fall."""

from __future__ import annotations

import json

import httpx
import pytest

from jxai_app.core.logsafety import REDACTED
from jxai_app.core.streaming import OpenAIChatClient
from jxai_app.core.streaming.fault import MAX_ERROR_BODY, MAX_MESSAGE
from tests.core.streaming.conftest import USER, collect

KEY = "sk-proj-Q7v2LmX9aBcDeFgH1jKlMnOpQrStUvWx"
ECHO = "Incorrect API key provided: Bearer "


def _client(status: int, body: bytes, content_type: str) -> OpenAIChatClient:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        return httpx.Response(status, headers={"Content-Type": content_type}, content=body)

    return OpenAIChatClient(base_url="https://llm.test/v1", model="m", api_key=KEY,
                            transport=httpx.MockTransport(answer))


async def _error(status: int, body: bytes, content_type: str = "application/json") -> dict[str, object]:
    events = await collect(_client(status, body, content_type).stream_chat(USER, None, None))
    assert [e["type"] for e in events] == ["error"]
    return events[0]


def _no_piece_of_the_key(text: str) -> bool:
    """True when not even the key's first two characters are left once the masks are taken out."""
    return KEY[:2] not in text.replace(REDACTED, "")


@pytest.mark.parametrize("kept", [1, 2, 9, len(KEY) // 2, len(KEY) - 1, len(KEY)])
async def test_a_key_straddling_the_message_cut_is_masked_whole(kept: int) -> None:
    # Cut at MAX_MESSAGE - 1 characters (then "…"): ``kept`` characters of the key come before it.
    filler = "." * (MAX_MESSAGE - 1 - len(ECHO) - kept)
    message = filler + ECHO + KEY + " — check your key"
    error = await _error(401, json.dumps({"error": {"message": message, "code": "invalid_api_key"}}).encode())

    assert _no_piece_of_the_key(str(error["message"])), error["message"]
    assert error["problem"]["detail"] == error["message"]  # type: ignore[index]
    assert str(error["message"]).startswith(filler + ECHO + REDACTED)
    assert len(str(error["message"])) <= MAX_MESSAGE + len(REDACTED)


@pytest.mark.parametrize("kept", [1, 5, len(KEY) - 1])
async def test_a_key_cut_where_the_error_body_was_cut_is_masked(kept: int) -> None:
    # An HTML error page read up to MAX_ERROR_BODY bytes: its text is short, and ends with
    # the first ``kept`` characters of the key.
    head = "<html><body><p>Key: </p>"
    markup = "<i></i>" * ((MAX_ERROR_BODY - len(head) - kept) // len("<i></i>"))
    page = head + markup
    page += " " * (MAX_ERROR_BODY - len(page) - kept) + KEY + "</body></html>" + "<i></i>" * 100
    error = await _error(502, page.encode(), "text/html")

    assert error["message"] == f"Key: {REDACTED}"


async def test_a_message_cut_inside_a_mask_keeps_the_mask_whole() -> None:
    # Masked first, the text is longer than the limit; the cut falls inside "[redacted]".
    message = "." * (MAX_MESSAGE - 1 - len(ECHO) - 4) + ECHO + KEY
    error = await _error(401, json.dumps({"error": {"message": message}}).encode())
    assert str(error["message"]).endswith(ECHO + REDACTED + "…")


async def test_short_messages_are_unchanged_and_long_ones_cut_with_an_ellipsis() -> None:
    error = await _error(400, json.dumps({"error": {"message": "Bad request: temperature"}}).encode())
    assert error["message"] == "Bad request: temperature"
    error = await _error(400, json.dumps({"error": {"message": "y" * 5000}}).encode())
    assert error["message"] == "y" * (MAX_MESSAGE - 1) + "…"
