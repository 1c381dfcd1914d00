"""The provider's client as every request of jxai streams from it (docs/streaming.md "The
client interface"): a 429/5xx before any output retried with backoff
(:class:`~jxai_app.core.streaming.retry.RetryingClient`), then the credentials that must never
show masked in the streamed text (:class:`~jxai_app.core.streaming.masking.MaskingClient`).

A websocket turn (``jxai_app.turns.clients.turn_client``, which adds the turn's limits on top)
and ``POST /ai/chat`` (:func:`jxai_app.core.gateway.select_client`) both build it here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jxai_app.core.streaming.base import ChatClient
from jxai_app.core.streaming.events import ErrorEvent
from jxai_app.core.streaming.masking import MaskingClient
from jxai_app.core.streaming.retry import RetryingClient, RetryPolicy

__all__ = ["guarded"]


def guarded(client: ChatClient, *, retry: RetryPolicy, secrets: Sequence[str],
            on_retry: Callable[[int, ErrorEvent, float], None] | None = None) -> MaskingClient:
    """``client`` retried by ``retry`` before any output, with ``secrets`` masked in its text
    and reasoning (``on_retry(retry_number, error_event, delay_seconds)`` is told of each retry)."""
    return MaskingClient(RetryingClient(client, retry, on_retry=on_retry), secrets)
