"""The streaming client of one turn: the model's client and the layers around it, built in
one place (docs/turns.md "The turn's client").

From the provider outwards::

    the model's client (conf.build_client: OpenAI-compatible, Anthropic Messages, Responses API, proxy)
    RetryingClient   a 429/5xx before any output is retried with backoff (JXAI_UPSTREAM_RETRIES)
    MaskingClient    the configured credentials masked in the streamed text (docs/security.md
                     "Secret leakage in streamed text")
    TurnLimits       each round the admission did not reserve reserves its tokens first
                     (docs/security.md "Quota reservations"), and JXAI_MAX_ANSWER_CHARS over
                     the turn's rounds

Each layer is a :class:`~jxai_app.core.streaming.wrapper.WrapperClient`; every delta passes
through three of them between the provider's client and the agent loop.

The first three are :func:`jxai_app.core.streaming.guarded.guarded`, which ``POST /ai/chat``
builds too (:func:`jxai_app.core.gateway.select_client`); it makes one request, reserved at
admission, so it needs no turn limits.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from jxai_app import conf
from jxai_app.core.streaming.events import ErrorEvent
from jxai_app.core.streaming.guarded import guarded
from jxai_app.core.streaming.retry import RetryPolicy
from jxai_app.ops import metrics
from jxai_app.policy.budget import TurnBudget
from jxai_app.turns.limits import TurnLimits

__all__ = ["turn_client"]

logger = logging.getLogger("jxai_app.turns")


def _log_retry(alias: str) -> Callable[[int, ErrorEvent, float], None]:
    provider = conf.get_model_registry().resolve(alias).provider

    def on_retry(retry: int, error: ErrorEvent, delay: float) -> None:
        logger.info("model %s answered %s before any output; retry %d in %.2f s", alias, error.code, retry, delay)
        metrics.PROVIDER_RETRIES.labels(provider, metrics.status_label(error.code)).inc()

    return on_retry


def turn_client(alias: str, budget: TurnBudget) -> TurnLimits:
    """The streaming client of one turn on model ``alias`` whose requests ``budget`` pays for
    (the stack in the module docstring).

    Raises:
        UnknownModelError: the alias is not configured.
        ConfigurationError: the provider's configuration is unusable (e.g. its key is missing).
    """
    limits = conf.get_limits()
    model = guarded(conf.build_client(alias), retry=RetryPolicy(retries=limits.upstream_retries),
                    secrets=conf.stream_secrets(), on_retry=_log_retry(alias))
    return TurnLimits(model, budget, limits.max_answer_chars)
