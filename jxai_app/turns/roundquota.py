"""Each further round of a turn reserves its tokens before its request (docs/security.md
"Quota reservations"; issue 14 item 4).

:class:`RoundQuota` wraps the turn's streaming client. The first round's reservation was
made with the send; before every later round (after tool results) it reserves that
round's prompt estimate and answer allowance (:func:`jxai_app.policy.reservations.reserve_round`).
A turn resumed after an approval (docs/approval.md "Resuming") made no send and its paused
turn's reservation ended at the pause, so there its first round reserves too.
When that no longer fits in the user's day, the round sends nothing and ends with an
``error`` event carrying the ``quota-exceeded`` problem, so the turn ends as an error with
that problem (its completed rounds kept, like any failed turn).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from jxai_app.core.errors import ProblemError
from jxai_app.core.streaming.events import ErrorEvent, StreamEvent
from jxai_app.policy import reservations
from jxai_app.store.dbsync import db_thread_call
from jxai_app.store.usage import estimate_tokens

__all__ = ["RoundQuota"]


class RoundQuota:
    """A streaming client that reserves each round after the first before calling ``client``.

    Args:
        client: the model's streaming client.
        user: the turn's user.
        turn_id: the turn (its reservation row's ``turn_id``).
        reserved: the first round was reserved already (a send's admission); ``False``: every
            round reserves (a resumed turn).
    """

    def __init__(self, client: Any, *, user: Any, turn_id: uuid.UUID, reserved: bool = True) -> None:
        self.client, self.user, self.turn_id, self.reserved = client, user, turn_id, reserved
        self.rounds = 0

    async def stream_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                          system_prompt: str | None, *, signal: Any = None) -> AsyncIterator[StreamEvent]:
        """``client.stream_chat`` (same arguments and events), or one ``error`` event
        (``quota-exceeded``) when the round's reservation does not fit."""
        self.rounds += 1
        if self.rounds > 1 or not self.reserved:
            prompt = estimate_tokens(list(messages)) + estimate_tokens(system_prompt or "")
            try:
                await db_thread_call(reservations.reserve_round)(self.user, self.turn_id, prompt)
            except ProblemError as refusal:
                doc = refusal.problem
                yield ErrorEvent(message=str(doc.get("detail") or "Quota exceeded."), code="quota-exceeded",
                                 problem=doc)
                return
        async with aclosing(self.client.stream_chat(messages, tools, system_prompt, signal=signal)) as events:
            async for event in events:
                yield event
