"""Is this worker ready for traffic? (docs/operations.md "Health")

:func:`readiness` answers ``/readyz``: the database answers a query, the channel layer
carries this worker's own pings (always true for the in-process delivery), and the worker
is not draining (SIGTERM: :meth:`jxai_app.turns.hub.TurnHub.drain`). ``/healthz`` needs
none of these: it only shows the process serves requests.
"""

from __future__ import annotations

import asyncio
from typing import Any

from jxai_app.db import db_call
from jxai_app.models import Conversation

__all__ = ["DATABASE_TIMEOUT", "readiness"]

DATABASE_TIMEOUT = 2.0
"""Seconds the database gets to answer the readiness query (a hung one counts as down)."""


def _database_answers() -> None:
    Conversation.objects.only("pk").exists()


async def readiness(hub: Any) -> dict[str, str]:
    """The worker's checks, each ``"ok"`` or what is wrong.

    Args:
        hub: the worker's :class:`~jxai_app.turns.hub.TurnHub` (started here when no socket
            did yet, so the layer's pings run).

    Returns:
        ``{"database": "ok" | "unreachable", "channel_layer": "ok" | "unreachable",
        "drain": "ok" | "draining"}``; ready when every value is ``"ok"``.
    """
    try:
        await asyncio.wait_for(db_call(_database_answers), DATABASE_TIMEOUT)
        database = "ok"
    except Exception:  # any failure to answer (refused, reset, timeout) is the same to a probe
        database = "unreachable"
    await hub.ensure_started()
    return {"database": database, "channel_layer": "ok" if hub.delivery.up else "unreachable",
            "drain": "draining" if hub.draining else "ok"}
