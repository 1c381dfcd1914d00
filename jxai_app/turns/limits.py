"""A turn's limits on its model requests: each round's tokens reserved, and the answer's length
(docs/security.md "Quota reservations"; docs/turns.md "Settings").

:class:`TurnLimits` wraps the turn's streaming client (the runner builds one per turn and the
agent loop asks it once per round):

- **Tokens.** A send's admission reserved its first round
  (:attr:`jxai_app.policy.budget.TurnBudget.prepaid_rounds`); before every later round (after
  tool results) the round's prompt estimate and answer allowance are reserved
  (:meth:`jxai_app.policy.budget.TurnBudget.reserve_round`). A turn resumed after an approval
  (docs/approval.md "Resuming") made no send and its paused turn's reservation ended at the
  pause, so there its first round reserves too. When that no longer fits in the user's day,
  the round sends nothing and ends with an ``error`` event carrying the ``quota-exceeded``
  problem, so the turn ends as an error with that problem (its completed rounds kept, like
  any failed turn).
- **Length.** ``JXAI_MAX_ANSWER_CHARS`` counts the characters of ``delta`` and ``reasoning``
  events over the turn's rounds; the event that crosses the limit is cut to fit, and the
  round ends there with ``done`` ``stopReason: "length"``: the provider's stream is closed, the
  cut message is saved like any finished round, and the page says the answer was cut off.
  Once the limit is spent, a further round ends at once the same way, without a request.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from jxai_app.core.errors import ProblemError
from jxai_app.core.streaming.base import ChatClient, Signal
from jxai_app.core.streaming.events import DeltaEvent, DoneEvent, ErrorEvent, ReasoningEvent, StreamEvent
from jxai_app.core.streaming.wrapper import WrapperClient
from jxai_app.core.tokens import estimate_tokens
from jxai_app.db import db_call
from jxai_app.policy.budget import TurnBudget

__all__ = ["TurnLimits"]

logger = logging.getLogger("jxai_app.turns")


class TurnLimits(WrapperClient):
    """``inner``'s events within the turn's limits (module docstring).

    Args:
        inner: the model's streaming client.
        budget: the turn's budget (reserves each round it has not paid for).
        max_answer_chars: characters of text and reasoning the turn may stream (positive).
    """

    def __init__(self, inner: ChatClient, budget: TurnBudget, max_answer_chars: int) -> None:
        super().__init__(inner)
        self.budget, self.limit = budget, max_answer_chars
        self.left = max_answer_chars
        """Characters the turn may still stream."""
        self.rounds = 0

    async def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                          system_prompt: str | None, *, signal: Signal | None = None) -> AsyncIterator[StreamEvent]:
        """``inner.stream_chat`` (same arguments and events), or one ``error`` event
        (``quota-exceeded``) when the round's reservation does not fit, ending with ``done:
        length`` at the answer's limit."""
        self.rounds += 1
        if self.left <= 0:
            yield DoneEvent(stop_reason="length")
            return
        if self.rounds > self.budget.prepaid_rounds:
            prompt = estimate_tokens(list(messages)) + estimate_tokens(system_prompt or "")
            try:
                await db_call(self.budget.reserve_round, prompt)
            except ProblemError as refusal:
                doc = refusal.problem
                yield ErrorEvent(message=str(doc.get("detail") or "Quota exceeded."), code="quota-exceeded",
                                 problem=doc)
                return
        async with aclosing(self.inner_stream(messages, tools, system_prompt, signal=signal)) as events:
            async for event in events:
                if type(event) is DeltaEvent or type(event) is ReasoningEvent:
                    if len(event.content) > self.left:
                        if self.left:
                            yield type(event)(content=event.content[: self.left])
                        self.left = 0
                        logger.info("an answer reached JXAI_MAX_ANSWER_CHARS (%d characters): cut there", self.limit)
                        yield DoneEvent(stop_reason="length")
                        return
                    self.left -= len(event.content)
                yield event
