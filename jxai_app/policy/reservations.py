"""Quota reservations: the daily token quota holds against parallel sends and long turns
(docs/security.md "Quota reservations").

Usage is known only when a model request ends, so checking today's ledger alone lets any
number of parallel sends through while it is still under the quota. Instead each request
**reserves** its worst case before it is sent, and the quota counts ledger tokens plus the
user's reservations of the UTC day:

- **Size**: the request's prompt estimate (characters / 4, rounded up, of its messages and
  system prompt: :func:`jxai_app.core.tokens.estimate_tokens`) plus
  ``JXAI_RESERVE_OUTPUT_TOKENS`` for the answer (:func:`size`).
- **Admission**: inside the send's transaction (the ``/ai/chat`` request's own), with the
  user's row locked (:func:`jxai_app.policy.ratelimit.check_turn_allowed`), the request is
  admitted only when ``used + reserved + size <= tokens_per_day``; then its
  :class:`~jxai_app.models.TokenReservation` row is inserted (:func:`hold`).
- **Each further round** of a websocket turn reserves again before its request, the same
  way (:meth:`jxai_app.policy.budget.TurnBudget.reserve_round`, which writes :func:`put`);
  one that does not fit ends the turn with ``quota-exceeded``. So does the first round of a
  turn resumed after an approval: the pause deleted the paused turn's reservation
  (:func:`end_turn`), so a waiting call holds none.
- **Settling**: when a round's usage is recorded, in the same transaction, the turn's row
  goes back to 0 tokens (:func:`release_round`); the turn's end deletes it (:func:`end_turn`);
  ``/ai/chat`` deletes its row when its usage is recorded (:func:`settle`).
- **A dead worker**: recovering the turn counts the prompt of a request that was in flight
  as estimated usage and deletes the row (:func:`forfeit_turn`).

Rows of earlier days no longer count; they are deleted with the user's next settled one
(``today``: the quota's current UTC day, :func:`jxai_app.policy.ratelimit.today`). Every
function runs in the caller's transaction when there is one. These are the rows only: the
rules that decide when to call them are :mod:`jxai_app.policy.budget`'s.
"""

from __future__ import annotations

import uuid
from datetime import date
from typing import Any

from django.db import transaction
from django.db.models import Q, Sum

from jxai_app import conf
from jxai_app.models import TokenReservation
from jxai_app.policy import usage as ledger
from jxai_app.policy.cost import request_cost

__all__ = ["end_turn", "forfeit_turn", "held_on", "hold", "put", "release_round", "settle", "size"]


def size(prompt_tokens: int) -> int:
    """Tokens to reserve for one model request: ``prompt_tokens`` + ``JXAI_RESERVE_OUTPUT_TOKENS``,
    at least 1 (a request always costs something, so a spent quota admits nothing)."""
    return max(1, max(0, int(prompt_tokens)) + conf.get_limits().reserve_output_tokens)


def held_on(user_id: Any, day: date, *, besides: uuid.UUID | None = None) -> int:
    """Tokens the user's reservations of ``day`` hold (``besides``: leave that turn's out)."""
    rows = TokenReservation.objects.filter(user_id=user_id, day=day)
    if besides is not None:
        rows = rows.exclude(turn_id=besides)
    return int(rows.aggregate(total=Sum("tokens"))["total"] or 0)


def hold(user_id: Any, day: date, *, prompt_tokens: int, turn_id: uuid.UUID | None) -> int:
    """Insert the reservation of an admitted request (the caller checked that it fits, under
    the user's lock).

    Returns:
        The reservation's primary key (for :func:`settle`).
    """
    row = TokenReservation.objects.create(user_id=user_id, day=day, tokens=size(prompt_tokens),
                                          prompt_tokens=max(0, int(prompt_tokens)), turn_id=turn_id)
    return int(row.pk)


def put(user_id: Any, turn_id: uuid.UUID, day: date, *, prompt_tokens: int) -> None:
    """Make turn ``turn_id``'s reservation the next round's (1 UPDATE, or an INSERT when the
    turn holds none); the caller checked that it fits, under the user's lock."""
    fields = {"day": day, "tokens": size(prompt_tokens), "prompt_tokens": max(0, int(prompt_tokens))}
    if not TokenReservation.objects.filter(turn_id=turn_id).update(**fields):
        TokenReservation.objects.create(user_id=user_id, turn_id=turn_id, **fields)


def release_round(turn_id: uuid.UUID) -> None:
    """The round's usage was recorded: the turn's reservation holds nothing until the next round."""
    TokenReservation.objects.filter(turn_id=turn_id).update(tokens=0, prompt_tokens=0)


def _drop(user_id: Any, mine: Q, today: date | None) -> None:
    """Delete the reservations ``mine`` selects and the user's rows before ``today`` (one DELETE)."""
    stale = Q(user_id=user_id, day__lt=today) if user_id is not None and today is not None else Q(pk__in=[])
    TokenReservation.objects.filter(mine | stale).delete()


def end_turn(turn_id: uuid.UUID, user_id: Any = None, today: date | None = None) -> None:
    """The turn ended: delete its reservation (and ``user_id``'s rows before ``today``)."""
    _drop(user_id, Q(turn_id=turn_id), today)


def settle(reservation_id: int | None, user_id: Any = None, today: date | None = None) -> None:
    """An ``/ai/chat`` request's usage was recorded: delete its reservation (``None``: none
    was made), and ``user_id``'s rows before ``today``."""
    if reservation_id is not None:
        _drop(user_id, Q(pk=reservation_id), today)


def forfeit_turn(turn_id: uuid.UUID | None, today: date, *, model: str = "") -> None:
    """A turn ended without its runner (recovered after its worker died, or stopped with no
    runner answering): the prompt of a request still in flight reached the provider, so it
    counts as estimated usage of ``model`` on ``today`` (the conversation's alias; priced
    like any request, :func:`jxai_app.policy.cost.request_cost`); then the reservation is
    deleted."""
    if turn_id is None:
        return
    with transaction.atomic(savepoint=False):
        for row in TokenReservation.objects.filter(turn_id=turn_id, tokens__gt=0):
            counts = ledger.UsageCounts(input_tokens=int(row.prompt_tokens), estimated=True)
            ledger.ledger_add(row.user_id, today, counts, model=model, cost=request_cost(model, counts))
        end_turn(turn_id)
