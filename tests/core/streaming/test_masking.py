"""Credentials masked in streamed text across chunk boundaries (docs/security.md
"Secret leakage in streamed text"): :class:`SecretMask` over every way of
cutting a text, and :class:`MaskingClient` in front of a real client and a real HTTP server."""

from __future__ import annotations

import itertools
import json

import pytest

from jxai_app.core.logsafety import REDACTED
from jxai_app.core.streaming import OpenAIChatClient
from jxai_app.core.streaming.masking import MIN_SECRET, MaskingClient, SecretMask
from tests.core.streaming.conftest import USER, collect
from tests.support.echo_key import echo_stream, echoed_text
from tests.support.fake_provider import FakeProvider, Script, openai_chunk, openai_text_stream, openai_tool_call_stream

KEY = "sk-proj-Zq81mA7cW0xLk3Pe"
OTHER = "ghp_8aLm2Qw9Zx7Rt5Yu"


def text_of(pieces: list[tuple[str, str]]) -> str:
    return "".join(text for _, text in pieces)


def feed_all(mask: SecretMask, pieces: list[str]) -> list[str]:
    out = [text_of(mask.feed(p)) for p in pieces]
    return [*out, text_of(mask.flush())]


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
    assert text_of(mask.feed("hello " + KEY[:-1])) == "hello "
    assert mask.held == KEY[:-1] and len(mask.held) == len(KEY) - 1
    assert text_of(mask.feed("?")) == KEY[:-1] + "?"  # not the key after all: released whole
    assert mask.held == ""
    assert text_of(mask.feed("plain text")) == "plain text"


def test_a_held_tail_at_the_end_is_masked_when_long_enough_else_released() -> None:
    mask = SecretMask([KEY])
    assert text_of(mask.feed("ends with " + KEY[:MIN_SECRET])) == "ends with "
    assert text_of(mask.flush()) == REDACTED
    assert text_of(mask.feed("it's")) == "it'" and text_of(mask.flush()) == "s"


def test_short_values_are_not_secrets() -> None:
    mask = SecretMask(["short", ""])
    assert mask.secrets == () and mask.feed("short") == [("", "short")]


def test_a_key_split_between_two_kinds_is_masked_as_the_kind_it_started_in() -> None:
    for cut in range(1, len(KEY)):
        mask = SecretMask([KEY])
        thought = mask.feed("thinking: Bearer " + KEY[:cut], "reasoning")
        said = mask.feed(KEY[cut:] + " is the key", "delta")
        by_kind = {kind: text_of([p for p in [*thought, *said, *mask.flush()] if p[0] == kind])
                   for kind in ("reasoning", "delta")}
        assert by_kind == {"reasoning": "thinking: Bearer " + REDACTED, "delta": " is the key"}, cut


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


async def test_tool_call_arguments_are_masked_split_at_every_offset_by_a_real_server() -> None:
    for cut in range(1, len(KEY)):
        fragments = ['{"token": "' + KEY[:cut], KEY[cut:] + '", "n": 1}']
        with FakeProvider([Script(writes=openai_tool_call_stream("call_1", "lookup", fragments))]) as fake:
            client = MaskingClient(OpenAIChatClient(base_url=fake.url, model="m", api_key=KEY), [KEY])
            events = await collect(client.stream_chat(USER, None, ""))
        args = "".join(e["args"] for e in events if e["type"] == "tool_call_delta")
        assert json.loads(args) == {"token": REDACTED, "n": 1}, cut
        assert all(KEY[:MIN_SECRET] not in str(e) for e in events)
        kinds = [e["type"] for e in events]
        assert kinds.index("tool_call_end") > max(i for i, k in enumerate(kinds) if k == "tool_call_delta")


async def test_a_key_split_between_reasoning_and_answer_is_masked() -> None:
    head, tail = KEY[:7], KEY[7:]
    writes = [openai_chunk({"reasoning_content": "Bearer " + head}), *openai_text_stream([tail + " ok"])]
    with FakeProvider([Script(writes=writes)]) as fake:
        events = await collect(MaskingClient(OpenAIChatClient(base_url=fake.url, model="m"), [KEY]).stream_chat(
            USER, None, ""))
    assert "".join(e.get("content", "") for e in events) == "Bearer " + REDACTED + " ok"
    assert all(head not in str(e) for e in events)


async def test_without_secrets_events_pass_unchanged() -> None:
    with FakeProvider([Script(writes=echo_stream(KEY))]) as fake:
        plain = await collect(OpenAIChatClient(base_url=fake.url, model="m").stream_chat(USER, None, ""))
    with FakeProvider([Script(writes=echo_stream(KEY))]) as fake:
        masked = await collect(MaskingClient(OpenAIChatClient(base_url=fake.url, model="m"), []).stream_chat(
            USER, None, ""))
    assert masked == plain
