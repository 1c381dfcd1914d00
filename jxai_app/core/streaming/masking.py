"""Credentials out of streamed model output, across chunk boundaries (docs/security.md,
"Secret leakage in streamed text").

A provider (or a model that was shown a key) may echo a configured credential in its answer.
Masking each ``delta`` on its own misses a key split over two chunks, which rejoins at the
client. :class:`SecretMask` masks one stream of text: it holds back the longest end of what
it has seen that could still grow into a secret — at most ``len(longest secret) − 1``
characters — and releases it once the next text shows it is not one, or when the stream
ends (:meth:`SecretMask.flush`). Every whole secret becomes ``[redacted]``.

:class:`MaskingClient` wraps a streaming client (docs/streaming.md "The client interface")
with one mask for the answer text (``delta``) and one for the reasoning: what it yields, and
so what the sockets, the SSE stream and the saved message get, never holds a secret. The
held text goes out, as one more event of its kind, before the next event of another kind
(a tool call, ``done``, ``error``); ``usage`` passes without releasing it. When the stream
ends with text still held, that text is masked whole when it is at least
:data:`MIN_SECRET` characters long (most of a key is as good as the key), else it goes out
as it is (a short tail such as ``s`` or ``sk-`` tells nothing and is ordinary text).

Framework-free.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Final

from jxai_app.core.logsafety import REDACTED
from jxai_app.core.streaming.base import ChatClient, Signal
from jxai_app.core.streaming.events import DeltaEvent, ReasoningEvent, StreamEvent, UsageEvent
from jxai_app.core.streaming.wrapper import WrapperClient

__all__ = ["MIN_SECRET", "MaskingClient", "SecretMask"]

MIN_SECRET: Final[int] = 8
"""Shorter values are not secrets to mask (they would mangle ordinary words); also the
shortest held tail masked at the end of a stream."""


class SecretMask:
    """Masks ``secrets`` in one stream of text fed piece by piece (module docstring).

    Args:
        secrets: credential values; those under :data:`MIN_SECRET` characters are ignored.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets: tuple[str, ...] = tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET},
                                                     key=len, reverse=True))
        self._held = ""

    @property
    def held(self) -> str:
        """Text seen but not yet released (a proper prefix of a secret, or empty)."""
        return self._held

    def _hold_length(self, text: str) -> int:
        """Length of the longest end of ``text`` that is a proper prefix of a secret."""
        longest = 0
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(text)), longest, -1):
                if text.endswith(secret[:size]):
                    longest = size
                    break
        return longest

    def feed(self, text: str) -> str:
        """Take the next piece; return what may be released now (secrets masked), which
        with :attr:`held` is everything seen so far."""
        if not self.secrets:
            return text
        pending = self._held + text
        for secret in self.secrets:
            if secret in pending:
                pending = pending.replace(secret, REDACTED)
        keep = self._hold_length(pending)
        self._held = pending[len(pending) - keep:] if keep else ""
        return pending[: len(pending) - keep]

    def flush(self) -> str:
        """The stream ended: release the held text, masked whole when it is at least
        :data:`MIN_SECRET` characters long."""
        held, self._held = self._held, ""
        return REDACTED if len(held) >= MIN_SECRET else held


class MaskingClient(WrapperClient):
    """A streaming client that masks ``secrets`` in ``inner``'s text and reasoning
    (module docstring); every other event passes unchanged and in order.

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
        ``delta`` may come later, split or joined differently, never with a secret)."""
        stream = self.inner_stream(messages, tools, system_prompt, signal=signal)
        text, reasoning = SecretMask(self.secrets), SecretMask(self.secrets)
        async with aclosing(stream) as events:
            async for event in events:
                if type(event) is DeltaEvent or type(event) is ReasoningEvent:
                    released = (text if type(event) is DeltaEvent else reasoning).feed(event.content)
                    if released == event.content:
                        yield event
                    elif released:
                        yield type(event)(content=released)
                    continue
                if type(event) is not UsageEvent:
                    for held in _released(text, reasoning):
                        yield held
                yield event
            for held in _released(text, reasoning):  # a stream that ended without done/error
                yield held


def _released(text: SecretMask, reasoning: SecretMask) -> list[StreamEvent]:
    """The held text of both masks as events (reasoning first, as models write it)."""
    out: list[StreamEvent] = []
    thought, said = reasoning.flush(), text.flush()
    if thought:
        out.append(ReasoningEvent(content=thought))
    if said:
        out.append(DeltaEvent(content=said))
    return out
