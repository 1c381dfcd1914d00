"""Quota reservations: the daily token quota holds against parallel sends and long turns
(docs/security.md "Quota reservations"; issue 14 item 4).

Usage is known only when a model request ends, so checking today's ledger alone lets any
number of parallel sends through while it is still under the quota. Instead each request
**reserves** its worst case before it is sent, and the quota counts ledger tokens plus the
user's reservations of the UTC day:

- **Size**: the request's prompt estimate (characters / 4 of its messages and system prompt)
  plus ``JXAI_RESERVE_OUTPUT_TOKENS`` for the answer (:func:`size`).
- **Admission**: inside the send's transaction (the ``/ai/chat`` request's own), with the
  user's row locked (:func:`jxai_app.policy.ratelimit.check_turn_allowed`), the request is
  admitted only when ``used + reserved + size <= tokens_per_day``; then its
  :class:`~jxai_app.models.TokenReservation` row is inserted (:func:`hold`).
- **Each further round** of a websocket turn reserves again before its request, the same
  way (:func:`reserve_round`); one that does not fit ends the turn with ``quota-exceeded``.
  So does the first round of a turn resumed after an approval: the pause deleted the paused
  turn's reservation (:func:`end_turn`), so a waiting call holds none.
- **Settling**: when a round's usage is recorded, in the same transaction, the turn's row
  goes back to 0 tokens (:func:`release_round`); the turn's end deletes it (:func:`end_turn`);
  ``/ai/chat`` deletes its row when its usage is recorded (:func:`settle`).
- **A dead worker**: recovering the turn counts the prompt of a request that was in flight
  as estimated usage and deletes the row (:func:`forfeit_turn`).

Rows of earlier days no longer count; they are deleted with the user's next settled one.
Every function runs in the caller's transaction when there is one.
"""

from __future__ import annotations

import uuid
from datetime import date
from typing import Any

from django.db import transaction
from django.db.models import Q, Sum

from jxai_app import conf
from jxai_app.policy import usage as ledger
from jxai_app.policy.cost import request_cost

__all__ = ["adopt", "end_turn", "forfeit_turn", "held_on", "hold", "release_round", "reserve_round", "settle", "size"]


def size(prompt_tokens: int) -> int:
    """Tokens to reserve for one model request: ``prompt_tokens`` + ``JXAI_RESERVE_OUTPUT_TOKENS``,
    at least 1 (a request always costs something, so a spent quota admits nothing)."""
    return max(1, max(0, int(prompt_tokens)) + conf.get_limits().reserve_output_tokens)


def held_on(user_id: Any, day: date, *, besides: uuid.UUID | None = None) -> int:
    """Tokens the user's reservations of ``day`` hold (``besides``: leave that turn's out)."""
    from jxai_app.models import TokenReservation

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
    from jxai_app.models import TokenReservation

    row = TokenReservation.objects.create(user_id=user_id, day=day, tokens=size(prompt_tokens),
                                          prompt_tokens=max(0, int(prompt_tokens)), turn_id=turn_id)
    return int(row.pk)


def adopt(reservation_id: int, turn_id: uuid.UUID, *, prompt_tokens: int) -> None:
    """Hand a reservation made before its turn existed (a ``retry``'s, admitted before the
    exchange is dropped) to turn ``turn_id``, sized for the turn's real prompt."""
    from jxai_app.models import TokenReservation

    TokenReservation.objects.filter(pk=reservation_id).update(
        turn_id=turn_id, tokens=size(prompt_tokens), prompt_tokens=max(0, int(prompt_tokens)))


def reserve_round(user: Any, turn_id: uuid.UUID, prompt_tokens: int) -> None:
    """Reserve the next round of turn ``turn_id`` before its request (one transaction).

    Raises:
        ProblemError: ``quota-exceeded`` when ``used + reserved + size`` passes the user's
            allowance (the turn must end; the caller turns it into an ``error`` event).
        django.db.DatabaseError: the database failed.
    """
    from jxai_app.models import TokenReservation
    from jxai_app.policy import ratelimit

    with transaction.atomic():
        at = ratelimit.now()
        allowance = ratelimit.allowance_for(user)
        if allowance.tokens_per_day <= 0 and allowance.cost_per_day <= 0:
            return
        ratelimit.lock_user(user)
        need = size(prompt_tokens)
        refusal = ratelimit.quota_refusal(user, allowance, need, at, besides=turn_id)
        if refusal is not None:
            raise refusal
        if allowance.tokens_per_day <= 0:  # only the cost is limited: nothing to hold
            return
        day = ratelimit.today(at)
        fields = {"day": day, "tokens": need, "prompt_tokens": max(0, int(prompt_tokens))}
        if not TokenReservation.objects.filter(turn_id=turn_id).update(**fields):
            TokenReservation.objects.create(user_id=user.pk, turn_id=turn_id, **fields)


def release_round(turn_id: uuid.UUID) -> None:
    """The round's usage was recorded: the turn's reservation holds nothing until the next round."""
    from jxai_app.models import TokenReservation

    TokenReservation.objects.filter(turn_id=turn_id).update(tokens=0, prompt_tokens=0)


def _drop(user_id: Any, mine: Q) -> None:
    """Delete the reservations ``mine`` selects and the user's rows of earlier days (one DELETE)."""
    from jxai_app.models import TokenReservation
    from jxai_app.policy import ratelimit

    stale = Q(user_id=user_id, day__lt=ratelimit.today(ratelimit.now())) if user_id is not None else Q(pk__in=[])
    TokenReservation.objects.filter(mine | stale).delete()


def end_turn(turn_id: uuid.UUID, user_id: Any = None) -> None:
    """The turn ended: delete its reservation (and ``user_id``'s rows of earlier days)."""
    _drop(user_id, Q(turn_id=turn_id))


def settle(reservation_id: int | None, user_id: Any = None) -> None:
    """An ``/ai/chat`` request's usage was recorded: delete its reservation (``None``: none
    was made), and ``user_id``'s rows of earlier days."""
    if reservation_id is not None:
        _drop(user_id, Q(pk=reservation_id))


def forfeit_turn(turn_id: uuid.UUID | None, *, model: str = "") -> None:
    """A turn ended without its runner (recovered after its worker died, or stopped with no
    runner answering): the prompt of a request still in flight reached the provider, so it
    counts as estimated usage of ``model`` (the conversation's alias; priced like any request,
    :func:`jxai_app.policy.cost.request_cost`); then the reservation is deleted."""
    from jxai_app.models import TokenReservation
    from jxai_app.policy import ratelimit

    if turn_id is None:
        return
    with transaction.atomic():
        for row in TokenReservation.objects.filter(turn_id=turn_id, tokens__gt=0):
            counts = ledger.UsageCounts(input_tokens=int(row.prompt_tokens), estimated=True)
            ledger.ledger_add(row.user_id, ratelimit.today(ratelimit.now()), counts, model=model,
                              cost=request_cost(model, counts))
        end_turn(turn_id)
