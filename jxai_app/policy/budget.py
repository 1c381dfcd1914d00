"""One turn's budget: its admission, each round's reservation, each round's usage, its end
(docs/security.md "Quota reservations"; the estimate and count rules: docs/store.md "Usage
and context tokens").

A :class:`TurnBudget` is opened in the transaction that starts the turn (a websocket send,
edit, regenerate or retry: :meth:`TurnBudget.admit`; a turn resumed after an approval:
:meth:`TurnBudget.resumed`; a ``POST /ai/chat`` request: :meth:`TurnBudget.admit` with no
turn). Then, for every model request:

1. before it, :meth:`~TurnBudget.reserve_round` (the admission already reserved the
   first round of a send, :attr:`~TurnBudget.prepaid_rounds`);
2. after it, :meth:`~TurnBudget.settle` with the round's usage, in the same transaction as
   the round's saved message when there is one;

and when the turn ends, :meth:`~TurnBudget.close` in the transaction that ends it. A turn
that ends without its runner (its worker died; Stop with no runner answering) is settled by
:func:`forfeit`. Every method is sync and runs in the caller's transaction when there is one
(from async code: :func:`jxai_app.db.db_call`).
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping

from django.db import transaction

from jxai_app.policy import ratelimit, reservations
from jxai_app.policy.entitlements import Entitlements

__all__ = ["TurnBudget", "forfeit"]


class TurnBudget:
    """The budget of one turn of ``user`` (module docstring).

    Args:
        user: whose allowance it is.
        turn_id: the websocket turn (``None``: a ``POST /ai/chat`` request).
        model: the model alias its requests use (prices the usage).
        reservation: the request's reservation row (``/ai/chat``; a turn's row is found by
            its ``turn_id``).
        prepaid_rounds: rounds the admission reserved already (1 for an admitted send, 0 for
            a resumed turn).
    """

    __slots__ = ("user", "turn_id", "model", "reservation", "prepaid_rounds")

    def __init__(self, user: Any, *, turn_id: uuid.UUID | None = None, model: str = "",
                 reservation: int | None = None, prepaid_rounds: int = 0) -> None:
        self.user, self.turn_id, self.model = user, turn_id, model
        self.reservation, self.prepaid_rounds = reservation, prepaid_rounds

    @classmethod
    def admit(cls, user: Any, *, prompt_tokens: int, turn_id: uuid.UUID | None = None,
              model: str = "", granted: Entitlements | None = None) -> TurnBudget:
        """Admit a new turn (or ``/ai/chat`` request) and reserve its first round, in the
        caller's transaction (:func:`jxai_app.policy.ratelimit.check_turn_allowed`).

        Args:
            prompt_tokens: the first request's prompt estimate (history and system prompt).
            granted: the user's entitlements when the caller read them already (its model
                check did: docs/security.md "Group entitlements"), so they are not read again.

        Raises:
            ProblemError: ``quota-exceeded`` or ``rate-limited`` (429, with ``retry_after``);
                nothing was written.
        """
        reservation = ratelimit.check_turn_allowed(user, prompt_tokens=prompt_tokens, turn_id=turn_id,
                                                   granted=granted)
        return cls(user, turn_id=turn_id, model=model, reservation=reservation, prepaid_rounds=1)

    @classmethod
    def resumed(cls, user: Any, *, turn_id: uuid.UUID, model: str) -> TurnBudget:
        """The budget of a turn resumed after an approval: not admitted again (it is the same
        turn), but its reservation ended at the pause, so its first round reserves too."""
        return cls(user, turn_id=turn_id, model=model)

    def reserve_round(self, prompt_tokens: int) -> None:
        """Reserve the next round of the turn before its request (one transaction, the
        user's row locked).

        Raises:
            ProblemError: ``quota-exceeded`` when today's tokens + the other reservations +
                this one pass the user's allowance, or today's cost reached its allowance
                (the turn must end; the caller turns it into an ``error`` event).
            django.db.DatabaseError: the database failed.
        """
        assert self.turn_id is not None, "a /ai/chat request makes one request, reserved at admission"
        with transaction.atomic():
            at = ratelimit.now()
            allowance = ratelimit.allowance_for(self.user)
            if allowance.tokens_per_day <= 0 and allowance.cost_per_day <= 0:
                return
            ratelimit.lock_user(self.user)
            refusal = ratelimit.quota_refusal(self.user, allowance, reservations.size(prompt_tokens), at,
                                              besides=self.turn_id)
            if refusal is not None:
                raise refusal
            if allowance.tokens_per_day > 0:  # only the cost is limited: nothing to hold
                reservations.put(self.user.pk, self.turn_id, ratelimit.today(at), prompt_tokens=prompt_tokens)

    def settle(self, usage: Mapping[str, Any] | None, *, estimated: bool, failed: bool = False) -> None:
        """One model request ended: its tokens and cost into the user's ledger (nothing when
        ``usage`` is ``None`` and it did not fail) and its reservation released, in the
        caller's transaction (:func:`jxai_app.policy.ratelimit.record_usage`).

        Args:
            usage: ``{"inputTokens", "outputTokens", …}`` (the saved shape), or ``None``.
            estimated: the counts are an estimate (the provider sent none).
            failed: the request ended in an error (the ledger's ``failed_requests``).
        """
        if self.turn_id is None:
            ratelimit.record_usage(self.user, usage, estimated=estimated, model=self.model, failed=failed,
                                   reservation=self.reservation)
            return
        with transaction.atomic(savepoint=False):
            if usage or failed:
                ratelimit.record_usage(self.user, usage, estimated=estimated, model=self.model, failed=failed)
            reservations.release_round(self.turn_id)

    def close(self) -> None:
        """The turn ended (also a pause for approval: the resumed turn reserves afresh):
        delete its reservation, and the user's rows of earlier days."""
        if self.turn_id is not None:
            reservations.end_turn(self.turn_id, getattr(self.user, "pk", None), ratelimit.today(ratelimit.now()))
        else:
            reservations.settle(self.reservation, getattr(self.user, "pk", None), ratelimit.today(ratelimit.now()))


def forfeit(turn_id: uuid.UUID | None, *, model: str) -> None:
    """A turn ended without its runner: the prompt of a request still in flight counts as
    estimated usage of ``model`` today, then its reservation is deleted
    (:func:`jxai_app.policy.reservations.forfeit_turn`). ``None``: nothing to do."""
    reservations.forfeit_turn(turn_id, ratelimit.today(ratelimit.now()), model=model)
