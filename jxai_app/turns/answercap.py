"""``JXAI_MAX_ANSWER_CHARS``: how much text one turn may stream (docs/turns.md "Settings").

:class:`AnswerCap` wraps the turn's streaming client (the runner builds one per turn and
the agent loop asks it once per round). It counts the characters of ``delta`` and
``reasoning`` events over the turn's rounds; the event that crosses the limit is cut to fit,
and the round ends there with ``done`` ``stopReason: "length"``: the provider's stream is
closed, the cut message is saved like any finished round (``stopReason`` ``length``), and
the page says the answer was cut off. Once the limit is spent, a further round (after a
tool call) ends at once the same way, without a request.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from jxai_app.core.streaming.events import DeltaEvent, DoneEvent, ReasoningEvent

__all__ = ["AnswerCap"]

logger = logging.getLogger("jxai_app.turns")


class AnswerCap:
    """A streaming client (``ChatClient``) that passes ``client``'s events on until the turn
    has streamed ``limit`` characters of text and reasoning (module docstring).

    Args:
        client: the model's streaming client.
        limit: characters per turn (a positive number).
    """

    def __init__(self, client: Any, limit: int) -> None:
        self.client, self.limit = client, limit
        self.left = limit
        """Characters the turn may still stream."""

    async def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                          system_prompt: str | None, *, signal: Any = None) -> AsyncIterator[Any]:
        """``client.stream_chat`` (same arguments and events), ending with ``done: length``
        at the limit."""
        if self.left <= 0:
            yield DoneEvent(stop_reason="length")
            return
        stream = self.client.stream_chat(messages, tools, system_prompt, signal=signal)
        if inspect.isawaitable(stream):
            stream = await stream
        try:
            async for event in stream:
                if isinstance(event, (DeltaEvent, ReasoningEvent)) and len(event.content) > self.left:
                    if self.left:
                        yield type(event)(content=event.content[: self.left])
                    self.left = 0
                    logger.info("an answer reached JXAI_MAX_ANSWER_CHARS (%d characters): cut there", self.limit)
                    yield DoneEvent(stop_reason="length")
                    return
                if isinstance(event, (DeltaEvent, ReasoningEvent)):
                    self.left -= len(event.content)
                yield event
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()
