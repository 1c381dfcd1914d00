"""Credentials masked in streamed text across chunk boundaries (docs/security.md
"Secret leakage in streamed text"): :class:`SecretMask` over every way of
cutting a text, and :class:`MaskingClient` in front of a real client and a real HTTP server."""

from __future__ import annotations

import itertools

import pytest

from jxai_app.core.logsafety import REDACTED
from jxai_app.core.streaming import OpenAIChatClient
from jxai_app.core.streaming.masking import MIN_SECRET, MaskingClient, SecretMask
from tests.core.streaming.conftest import USER, collect
from tests.support.echo_key import echo_stream, echoed_text
from tests.support.fake_provider import FakeProvider, Script

KEY = "sk-proj-Zq81mA7cW0xLk3Pe"
OTHER = "ghp_8aLm2Qw9Zx7Rt5Yu"


def feed_all(mask: SecretMask, pieces: list[str]) -> list[str]:
    out = [mask.feed(p) for p in pieces]
    return [*out, mask.flush()]


@pytest.mark.parametrize("text", [
    f"a {KEY} b", f"{KEY}", f"x{KEY}{KEY}y", f"{OTHER} and {KEY}.", f"sk-proj- is public; {KEY[:-1]}! then {KEY}",
])
def test_every_cut_into_three_pieces_masks_every_key_and_loses_nothing(text: str) -> None:
    expected = text.replace(KEY, REDACTED).replace(OTHER, REDACTED)
    for i, j in itertools.combinations_with_replacement(range(len(text) + 1), 2):
        out = feed_all(SecretMask([KEY, OTHER]), [text[:i], text[i:j], text[j:]])
        assert "".join(out) == expected, (i, j)


def test_at_most_the_longest_secret_minus_one_is_held() -> None:
    mask = SecretMask([KEY, OTHER])
    assert mask.feed("hello " + KEY[:-1]) == "hello "
    assert mask.held == KEY[:-1] and len(mask.held) == len(KEY) - 1
    assert mask.feed("?") == KEY[:-1] + "?"  # not the key after all: released whole
    assert mask.held == ""
    assert mask.feed("plain text") == "plain text"


def test_a_held_tail_at_the_end_is_masked_when_long_enough_else_released() -> None:
    mask = SecretMask([KEY])
    assert mask.feed("ends with " + KEY[:MIN_SECRET]) == "ends with "
    assert mask.flush() == REDACTED
    assert mask.feed("it's") == "it'" and mask.flush() == "s"


def test_short_values_are_not_secrets() -> None:
    mask = SecretMask(["short", ""])
    assert mask.secrets == () and mask.feed("short") == "short"


async def test_the_client_masks_text_and_reasoning_split_at_every_offset_by_a_real_server() -> None:
    with FakeProvider([Script(writes=echo_stream(KEY, reasoning=True))]) as fake:
        client = MaskingClient(OpenAIChatClient(base_url=fake.url, model="m", api_key=KEY), [KEY])
        events = await collect(client.stream_chat(USER, None, ""))
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert "".join(e["content"] for e in events if e["type"] == "delta") == echoed_text(KEY, REDACTED)
    assert "".join(e["content"] for e in events if e["type"] == "reasoning") == echoed_text(KEY, REDACTED)
    assert events[-1] == {"type": "done", "stopReason": "stop"}
    assert all(KEY[:-1] not in str(e) for e in events)
    # Reasoning is flushed before the first text delta, never after it.
    kinds = [e["type"] for e in events]
    assert kinds.index("delta") > max(i for i, k in enumerate(kinds) if k == "reasoning")


async def test_without_secrets_events_pass_unchanged() -> None:
    with FakeProvider([Script(writes=echo_stream(KEY))]) as fake:
        plain = await collect(OpenAIChatClient(base_url=fake.url, model="m").stream_chat(USER, None, ""))
    with FakeProvider([Script(writes=echo_stream(KEY))]) as fake:
        masked = await collect(MaskingClient(OpenAIChatClient(base_url=fake.url, model="m"), []).stream_chat(
            USER, None, ""))
    assert masked == plain
