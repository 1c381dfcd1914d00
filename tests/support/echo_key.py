"""A provider answer that echoes a credential split over deltas at every offset:
the shared script of the streaming-mask tests (core client, websocket, ``/ai/chat``)."""

from __future__ import annotations

from tests.support.fake_provider import openai_chunk, openai_text_stream


def split_at_every_offset(key: str) -> list[str]:
    """Delta texts holding ``key`` once per offset 1 … len − 1 split over two deltas, then
    once a character per delta, with ordinary text between: ``"".join`` of them is
    :func:`echoed_text`."""
    parts = ["Your key: "]
    for cut in range(1, len(key)):
        parts[-1] += key[:cut]
        parts += [key[cut:] + f" ({cut}) "]
    parts[-1] += "then one by one: "
    parts += list(key) + [" done."]
    return parts


def echoed_text(key: str, mask: str) -> str:
    """The whole answer of :func:`split_at_every_offset` with each ``key`` replaced by ``mask``."""
    return "".join(split_at_every_offset(key)).replace(key, mask)


def echo_stream(key: str, *, reasoning: bool = False) -> list[bytes]:
    """OpenAI SSE events streaming :func:`split_at_every_offset` as text (and, with
    ``reasoning``, first as ``reasoning_content``)."""
    parts = split_at_every_offset(key)
    thinking = [openai_chunk({"reasoning_content": p}) for p in parts] if reasoning else []
    events = openai_text_stream(parts)
    return [events[0], *thinking, *events[1:]]
