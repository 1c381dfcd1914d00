"""What each provider request of a turn costs, for the user's usage ledger (issue 6 item 3).

A :class:`RoundMeter` watches one turn's events: per round it keeps the provider's
``usage`` event and counts the characters the model produced; at the round's end the
runner calls :meth:`RoundMeter.record`, which adds the round's tokens to the user's
:class:`~jxai_app.models.UsageLedger` row (:func:`jxai_app.policy.ratelimit.arecord_usage`):

- the provider's usage when it sent a valid one (CS-25 rules, :func:`~jxai_app.store.usage.usage_from`);
- otherwise an estimate marked ``estimated`` (llama.cpp sends none): the request's size
  (:attr:`RoundMeter.input_estimate`, 4 characters a token, grown by every message the
  turn appends) in, produced characters / 4 out (:func:`~jxai_app.store.usage.usage_estimate`);
- nothing for a round that produced nothing and reported nothing (a refusal before output).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from jxai_app.policy import ratelimit
from jxai_app.store.usage import usage_estimate, usage_from
from jxai_app.core.streaming.events import DeltaEvent, ReasoningEvent, ToolCallDeltaEvent, ToolCallStartEvent, UsageEvent

__all__ = ["RoundMeter", "estimate_tokens"]

logger = logging.getLogger("jxai_app.turns")


def estimate_tokens(value: Any) -> int:
    """A rough size in tokens (4 characters a token) of a string or JSON value."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return len(text) // 4


def _produced_chars(event: Any) -> int:
    """Characters of model output in a stream event (text, reasoning, call names, arguments)."""
    if isinstance(event, (DeltaEvent, ReasoningEvent)):
        return len(event.content)
    if isinstance(event, ToolCallStartEvent):
        return len(event.name)
    if isinstance(event, ToolCallDeltaEvent):
        return len(event.args)
    return 0


class RoundMeter:
    """Usage of one turn's rounds (module docstring).

    Args:
        history: the wire messages of the first request.
        system_prompt: sent with every request.
    """

    def __init__(self, history: list[dict[str, Any]], system_prompt: str) -> None:
        self.input_estimate = estimate_tokens(history) + estimate_tokens(system_prompt)
        """Estimated tokens of the next request (grows with :meth:`grow`)."""
        self._usage: UsageEvent | None = None
        self._chars = 0

    def start_round(self) -> None:
        """A new provider request begins."""
        self._usage, self._chars = None, 0

    def see(self, event: Any) -> None:
        """A stream event of the current round."""
        if isinstance(event, UsageEvent):
            self._usage = event
        else:
            self._chars += _produced_chars(event)

    def grow(self, message: dict[str, Any] | None) -> None:
        """The following requests also carry ``message`` (an assistant round or tool reply)."""
        if message:
            self.input_estimate += estimate_tokens(message)

    def round_usage(self) -> tuple[dict[str, Any] | None, bool]:
        """``(usage, estimated)`` of the current round; ``(None, True)`` when there is nothing to count."""
        doc = usage_from(self._usage)
        if doc is not None:
            return doc, False
        if not self._chars:
            return None, True
        return usage_estimate(input_tokens=self.input_estimate, output_chars=self._chars), True

    async def record(self, user: Any, turn_id: str) -> None:
        """Add the current round's tokens to ``user``'s ledger; a failed write is logged and
        the turn goes on."""
        doc, estimated = self.round_usage()
        if doc is None:
            return
        try:
            await ratelimit.arecord_usage(user, doc, estimated=estimated)
        except Exception:
            logger.exception("turn %s: could not record usage", turn_id)
