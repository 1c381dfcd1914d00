"""Credentials out of streamed model output, across chunk boundaries (docs/security.md,
"Secret leakage in streamed text").

A provider (or a model that was shown a key) may echo a configured credential in its answer,
its reasoning or a tool call's arguments. Masking each fragment on its own misses a key split
over two of them, which rejoins at the client. :class:`SecretMask` masks one stream of text
fed piece by piece, each piece tagged with its kind: it holds back the longest end of what it
has seen that could still grow into a secret — at most ``len(longest secret) − 1``
characters — and releases it once the next text shows it is not one, or when the stream ends
(:meth:`SecretMask.flush`). Every whole secret becomes ``[redacted]``; released text keeps
the kind it came with (a secret spanning two kinds is masked as the kind it started in).

:class:`MaskingClient` wraps a streaming client (docs/streaming.md "The client interface")
with one mask over the visible output (the answer text, ``delta``, and the reasoning
together, so a key split between the end of the reasoning and the start of the answer is
still one key) and one mask per tool call's arguments: what it yields, and so what the
sockets, the SSE stream, the saved message, the tool call's saved arguments, the approval
request and the tool itself get, never holds a secret. The held text goes out before the
next event that is not more of it (a tool call, ``done``, ``error``; ``usage`` passes without
releasing it; a call's held arguments go out before its ``tool_call_end``). When a stream ends
with text still held, that text is masked whole when it is at least :data:`MIN_SECRET`
characters long (most of a key is as good as the key), else it goes out as it is (a short
tail such as ``s`` or ``sk-`` tells nothing and is ordinary text).

Framework-free.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Final, TypeAlias

from jxai_app.core.logsafety import REDACTED
from jxai_app.core.streaming.base import ChatClient, Signal
from jxai_app.core.streaming.events import (
    DeltaEvent, DoneEvent, ErrorEvent, ReasoningEvent, StreamEvent, ToolCallDeltaEvent, ToolCallEndEvent, UsageEvent,
)
from jxai_app.core.streaming.wrapper import WrapperClient

__all__ = ["MIN_SECRET", "MaskingClient", "Piece", "SecretMask"]

MIN_SECRET: Final[int] = 8
"""Shorter values are not secrets to mask (they would mangle ordinary words); also the
shortest held tail masked at the end of a stream."""

Piece: TypeAlias = tuple[str, str]
"""``(kind, text)``: a run of text and the kind of output it belongs to (an event ``type``)."""


class SecretMask:
    """Masks ``secrets`` in one stream of text fed piece by piece (module docstring).

    Args:
        secrets: credential values; those under :data:`MIN_SECRET` characters are ignored.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets: tuple[str, ...] = tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET},
                                                     key=len, reverse=True))
        self._pattern = re.compile("|".join(map(re.escape, self.secrets))) if self.secrets else None
        self._held: list[Piece] = []

    @property
    def held(self) -> str:
        """Text seen but not yet released (a proper prefix of a secret, or empty)."""
        return "".join(text for _, text in self._held)

    def _hold_length(self, text: str) -> int:
        """Length of the longest end of ``text`` that is a proper prefix of a secret."""
        longest = 0
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(text)), longest, -1):
                if text.endswith(secret[:size]):
                    longest = size
                    break
        return longest

    def feed(self, text: str, kind: str = "") -> list[Piece]:
        """Take the next piece of ``kind``; return the pieces that may be released now (in
        order, secrets masked, adjacent text of one kind joined), which with :attr:`held` are
        everything seen so far."""
        if self._pattern is None:
            return [(kind, text)] if text else []
        pending = [*self._held, (kind, text)]
        joined = "".join(t for _, t in pending)
        spans, start = [], 0
        for piece_kind, piece in pending:
            spans.append((start, start + len(piece), piece_kind))
            start += len(piece)
        out: list[Piece] = []
        done = 0
        for match in self._pattern.finditer(joined):
            _copy(out, joined, spans, done, match.start())
            _append(out, next(k for s, e, k in spans if s <= match.start() < e), REDACTED)
            done = match.end()
        _copy(out, joined, spans, done, len(joined))
        self._held = _cut_tail(out, self._hold_length("".join(t for _, t in out)))
        return out

    def flush(self) -> list[Piece]:
        """The stream ended: release the held text, masked whole (as the kind it started in)
        when it is at least :data:`MIN_SECRET` characters long."""
        held, self._held = self._held, []
        if sum(len(text) for _, text in held) >= MIN_SECRET:
            return [(held[0][0], REDACTED)]
        return held


def _append(out: list[Piece], kind: str, text: str) -> None:
    """Add ``text`` of ``kind`` to ``out``, joined to the last piece when it is of that kind."""
    if not text:
        return
    if out and out[-1][0] == kind:
        out[-1] = (kind, out[-1][1] + text)
    else:
        out.append((kind, text))


def _copy(out: list[Piece], joined: str, spans: list[tuple[int, int, str]], start: int, end: int) -> None:
    """Add ``joined[start:end]`` to ``out`` with the kinds ``spans`` (start, end, kind) give it."""
    for lo, hi, kind in spans:
        _append(out, kind, joined[max(lo, start):min(hi, end)])


def _cut_tail(out: list[Piece], size: int) -> list[Piece]:
    """Remove the last ``size`` characters from ``out`` and return them as pieces."""
    tail: list[Piece] = []
    while size:
        kind, text = out.pop()
        if len(text) > size:
            out.append((kind, text[:-size]))
            text = text[-size:]
        tail.insert(0, (kind, text))
        size -= len(text)
    return tail


_TEXT_EVENTS: Final[dict[str, type[DeltaEvent] | type[ReasoningEvent]]] = {
    "delta": DeltaEvent, "reasoning": ReasoningEvent}


class MaskingClient(WrapperClient):
    """A streaming client that masks ``secrets`` in ``inner``'s text, reasoning and tool-call
    arguments (module docstring); every other event passes unchanged and in order.

    Args:
        inner: the client to call.
        secrets: the credential values to mask (none: the events pass as they are).
    """

    def __init__(self, inner: ChatClient, secrets: Sequence[str]) -> None:
        super().__init__(inner)
        self.secrets = tuple(secrets)

    async def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                          system_prompt: str | None, *, signal: Signal | None = None) -> AsyncIterator[StreamEvent]:
        """``inner.stream_chat`` with the secrets masked; the same events otherwise (a
        ``delta``, ``reasoning`` or ``tool_call_delta`` may come later, split or joined
        differently, never with a secret)."""
        stream = self.inner_stream(messages, tools, system_prompt, signal=signal)
        visible = SecretMask(self.secrets)
        calls: dict[str, SecretMask] = {}
        async with aclosing(stream) as events:
            async for event in events:
                if type(event) is DeltaEvent or type(event) is ReasoningEvent:
                    released = visible.feed(event.content, event.type)
                    if released == [(event.type, event.content)]:
                        yield event
                    else:
                        for masked in _text_events(released):
                            yield masked
                    continue
                if type(event) is UsageEvent:
                    yield event
                    continue
                for held in _text_events(visible.flush()):
                    yield held
                if type(event) is ToolCallDeltaEvent:
                    args = _joined(calls.setdefault(event.id, SecretMask(self.secrets)).feed(event.args))
                    if args:
                        yield event if args == event.args else ToolCallDeltaEvent(id=event.id, args=args)
                    continue
                ending = [event.id] if type(event) is ToolCallEndEvent else (
                    list(calls) if type(event) is DoneEvent or type(event) is ErrorEvent else [])
                for call_id in ending:
                    for held in _args_events(call_id, calls):
                        yield held
                yield event
            for held in _text_events(visible.flush()):  # a stream that ended without done/error
                yield held
            for call_id in list(calls):
                for held in _args_events(call_id, calls):
                    yield held


def _joined(pieces: list[Piece]) -> str:
    """The text of ``pieces``, kinds dropped."""
    return "".join(text for _, text in pieces)


def _text_events(pieces: list[Piece]) -> list[StreamEvent]:
    """Released pieces of the visible output as ``delta`` / ``reasoning`` events."""
    return [_TEXT_EVENTS[kind](content=text) for kind, text in pieces]


def _args_events(call_id: str, calls: dict[str, SecretMask]) -> list[StreamEvent]:
    """The held arguments of call ``call_id`` (its mask dropped) as a ``tool_call_delta``, if any."""
    mask = calls.pop(call_id, None)
    args = _joined(mask.flush()) if mask is not None else ""
    return [ToolCallDeltaEvent(id=call_id, args=args)] if args else []
