"""What a model request cost in USD (docs/operations.md "Cost").

The price comes from the first of:

1. the model's ``price`` in the model registry (USD per million tokens; the embedded local
   model has 0, and so should any self-hosted one);
2. the ``genai-prices`` package's table of providers' published prices, bundled with the
   package and read offline (no price download at run time), looked up by the model's
   provider id and its provider's base URL, then by the model id alone;
3. otherwise 0, logged once per model as unpriced.

Prices are ``Decimal`` throughout; a cost is rounded to :data:`COST_PLACES` places.
"""

from __future__ import annotations

import functools
import logging
from decimal import Decimal
from typing import Any, Mapping

from genai_prices import Usage, calc_price

from jxai_app import conf
from jxai_app.core.errors import ConfigurationError, UnknownModelError
from jxai_app.policy.usage import UsageCounts

__all__ = ["COST_PLACES", "request_cost"]

logger = logging.getLogger("jxai_app.policy")

COST_PLACES = Decimal("0.0000000001")
"""Costs are kept to 10 decimal places of a dollar (the ledger's column)."""
_MILLION = Decimal(1_000_000)


def _override(price: Mapping[str, float], counts: UsageCounts) -> Decimal:
    per_input = Decimal(str(price["input_per_mtok"]))
    per_cached = Decimal(str(price.get("cached_input_per_mtok", price["input_per_mtok"])))
    per_output = Decimal(str(price["output_per_mtok"]))
    uncached = counts.input_tokens - counts.cached_input_tokens
    return (uncached * per_input + counts.cached_input_tokens * per_cached + counts.output_tokens * per_output) \
        / _MILLION


@functools.cache
def _warn_unpriced(model_ref: str) -> None:
    logger.warning("model %s has no price in the model registry or the genai-prices table; its usage costs 0",
                   model_ref)


def _model_and_url(alias: str) -> tuple[Any, str | None]:
    """The registry's model for ``alias`` and its provider's base URL; ``(None, None)`` for
    a model the registry does not know (``/ai/chat`` with the caller's own provider)."""
    registry = conf.get_model_registry()
    try:
        model = registry.get(alias)
    except UnknownModelError:
        return None, None
    try:
        return model, registry.provider(model.provider).base_url
    except ConfigurationError:
        return model, None


@functools.cache
def _table_lookup(model_ref: str, base_url: str | None) -> tuple[tuple[str, str], ...] | None:
    """How the bundled table finds ``model_ref`` (by its provider's base URL, else by the model
    id alone), or ``None`` when it does not. Asked once per model and URL: the table is read
    offline and does not change while the process runs, and a miss searches all of it."""
    attempts: list[tuple[tuple[str, str], ...]] = [(("provider_api_url", base_url),)] if base_url else []
    for where in (*attempts, ()):
        try:
            calc_price(Usage(), model_ref, **dict(where))
        except LookupError:
            continue
        return where
    return None


def _table_price(model_ref: str, base_url: str | None, counts: UsageCounts) -> Decimal | None:
    where = _table_lookup(model_ref, base_url)
    if where is None:
        return None
    usage = Usage(input_tokens=counts.input_tokens, output_tokens=counts.output_tokens,
                  cache_read_tokens=counts.cached_input_tokens)
    return calc_price(usage, model_ref, **dict(where)).total_price


def request_cost(model_alias: str | None, counts: UsageCounts) -> Decimal:
    """The USD cost of one model request's tokens (module docstring for where prices come from).

    Args:
        model_alias: the registry alias the request used (for ``/ai/chat`` with a caller's
            provider, the model id it named); ``None`` or ``""``: unpriced (0).
        counts: its tokens (``cached_input_tokens`` is part of ``input_tokens``).

    Returns:
        The cost, ≥ 0, rounded to :data:`COST_PLACES`.
    """
    if not model_alias or (counts.input_tokens == 0 and counts.output_tokens == 0):
        return Decimal(0)
    model, base_url = _model_and_url(model_alias)
    if model is not None and model.price is not None:
        cost: Decimal | None = _override(model.price, counts)
    else:
        model_ref = model.model_id if model is not None else model_alias
        cost = _table_price(model_ref, base_url, counts)
        if cost is None:
            _warn_unpriced(model_ref)
    return max(Decimal(0), cost or Decimal(0)).quantize(COST_PLACES)
