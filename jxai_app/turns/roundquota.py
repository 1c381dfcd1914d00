"""Each round of a turn that its admission did not reserve reserves its tokens before its
request (docs/security.md "Quota reservations").

:class:`RoundQuota` wraps the turn's streaming client. A send's admission reserved its first
round (:attr:`jxai_app.policy.budget.TurnBudget.prepaid_rounds`); before every later round
(after tool results) it reserves that round's prompt estimate and answer allowance
(:meth:`jxai_app.policy.budget.TurnBudget.reserve_round`). A turn resumed after an approval
(docs/approval.md "Resuming") made no send and its paused turn's reservation ended at the
pause, so there its first round reserves too. When that no longer fits in the user's day,
the round sends nothing and ends with an ``error`` event carrying the ``quota-exceeded``
problem, so the turn ends as an error with that problem (its completed rounds kept, like
any failed turn).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from jxai_app.core.errors import ProblemError
from jxai_app.core.streaming.events import ErrorEvent, StreamEvent
from jxai_app.core.tokens import estimate_tokens
from jxai_app.db import db_call
from jxai_app.policy.budget import TurnBudget

__all__ = ["RoundQuota"]


class RoundQuota:
    """A streaming client that reserves each round ``budget`` has not paid for before calling
    ``client`` (module docstring)."""

    def __init__(self, client: Any, budget: TurnBudget) -> None:
        self.client, self.budget = client, budget
        self.rounds = 0

    async def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                          system_prompt: str | None, *, signal: Any = None) -> AsyncIterator[StreamEvent]:
        """``client.stream_chat`` (same arguments and events), or one ``error`` event
        (``quota-exceeded``) when the round's reservation does not fit."""
        self.rounds += 1
        if self.rounds > self.budget.prepaid_rounds:
            prompt = estimate_tokens(list(messages)) + estimate_tokens(system_prompt or "")
            try:
                await db_call(self.budget.reserve_round, prompt)
            except ProblemError as refusal:
                doc = refusal.problem
                yield ErrorEvent(message=str(doc.get("detail") or "Quota exceeded."), code="quota-exceeded",
                                 problem=doc)
                return
        async with aclosing(self.client.stream_chat(messages, tools, system_prompt, signal=signal)) as events:
            async for event in events:
                yield event
