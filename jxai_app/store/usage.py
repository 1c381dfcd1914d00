"""Token usage as saved on assistant messages, and the conversation's context figures.

Saved shape (camelCase like the ``usage`` event, without ``type``; docs/store.md
"Usage and context tokens")::

    {"inputTokens": 120, "outputTokens": 30[, "cachedInputTokens": 0][, "reasoningTokens": 8]
     [, "estimated": true]}

``estimated`` marks counts made up because the provider sent no usage.
"""

from __future__ import annotations

from typing import Any, Final, Mapping

from jxai_app.core.streaming.events import UsageEvent
from jxai_app.core.tokens import estimate_tokens, token_count, tokens_for_chars

CONTEXT_WARNING_RATIO: Final[float] = 0.8
"""The context warning turns on at this share of the model's context window (docs/store.md
"Usage and context tokens")."""

_OPTIONAL: Final[tuple[str, ...]] = ("cachedInputTokens", "reasoningTokens")


def usage_from(value: UsageEvent | Mapping[str, Any] | None) -> dict[str, int] | None:
    """Normalise provider usage to the saved shape.

    Args:
        value: a :class:`UsageEvent`, or a mapping in wire form (``inputTokens`` …, a
            ``type`` member is ignored), or ``None``.

    Returns:
        The saved dict, or ``None`` when ``value`` is ``None`` or its input/output counts are
        not finite non-negative numbers (the whole frame is ignored). A bad optional
        count is dropped (docs/store.md "Usage and context tokens").
    """
    if value is None:
        return None
    data = value.to_dict() if isinstance(value, UsageEvent) else value
    inp, out = token_count(data.get("inputTokens")), token_count(data.get("outputTokens"))
    if inp is None or out is None:
        return None
    doc = {"inputTokens": inp, "outputTokens": out}
    for key in _OPTIONAL:
        extra = token_count(data.get(key))
        if extra is not None:
            doc[key] = extra
    return doc


def usage_estimate(*, input_tokens: int, output_chars: int) -> dict[str, Any]:
    """Made-up usage for a round whose provider sent none, marked ``estimated: true``.

    Args:
        input_tokens: the caller's estimate of the request's tokens (0 when unknown).
        output_chars: characters the model produced (text + reasoning + call arguments);
            counted as ``ceil(chars / 4)`` tokens.
    """
    return {
        "inputTokens": max(0, int(input_tokens)),
        "outputTokens": tokens_for_chars(output_chars),
        "estimated": True,
    }


def context_tokens(usage: Mapping[str, Any], *, reasoning_replayed: bool) -> int:
    """Tokens the next request will carry: ``max(0, input + output − unreplayed reasoning)``.

    Reasoning counts as replayed (not subtracted) only when the message keeps reasoning text
    *and* has text or calls, i.e. when :func:`~jxai_app.store.wire.to_messages` sends it
    (docs/store.md "Usage and context tokens": 120+30−8 = 142; reasoning with answer
    100+40 = 140; reasoning-only 100+40−40 = 100).
    """
    total = int(usage.get("inputTokens", 0)) + int(usage.get("outputTokens", 0))
    if not reasoning_replayed:
        total -= int(usage.get("reasoningTokens", 0) or 0)
    return max(0, total)


def context_warning(tokens: int, context_window: int | None) -> bool:
    """True when ``tokens`` reached 80 % of ``context_window`` (never for an unknown window)."""
    return bool(context_window) and tokens >= CONTEXT_WARNING_RATIO * int(context_window or 0)


def round_usage(reported: UsageEvent | Mapping[str, Any] | None, *, produced_chars: int,
                input_estimate: int, reached: bool = False) -> tuple[dict[str, Any] | None, bool]:
    """The one rule for a model round's usage, saved on its message and added to the user's
    ledger alike (docs/store.md "Usage and context tokens"):

    - the provider's usage when it sent a valid one (:func:`usage_from`);
    - otherwise, when the round produced something, an estimate marked ``estimated``:
      ``input_estimate`` tokens in, ``produced_chars`` / 4 out (:func:`usage_estimate`);
    - otherwise, when the request ``reached`` the provider (:func:`~jxai_app.core.streaming.usage.reached_provider`; stopped
      or disconnected before its first output, say), its prompt: ``input_estimate`` tokens
      in, 0 out, estimated;
    - otherwise nothing (a refusal before any output).

    Returns:
        ``(usage, estimated)``; ``(None, False)`` when there is nothing to count.
    """
    doc = usage_from(reported)
    if doc is not None:
        return doc, False
    if produced_chars <= 0 and not (reached and input_estimate > 0):
        return None, False
    return usage_estimate(input_tokens=input_estimate, output_chars=produced_chars), True
