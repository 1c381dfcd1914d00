"""Token counts from a provider's usage object, shared by the OpenAI-shaped clients.

The rule that needs care is reasoning tokens (docs/providers.md, "Token counts"): OpenAI
counts them inside ``completion_tokens`` / ``output_tokens``, but some providers (xAI is the
documented one) report them beside it and bill them on top. Such a provider's ``total_tokens``
is ``input + output + reasoning`` (and a reasoning count larger than the output count cannot be
part of it); the numbers, not a provider name, tell the two apart, so the rule also holds for a
gateway relaying such a provider and for any client that meets it.
"""

from __future__ import annotations

from typing import Any

from jxai_app.core.streaming.events import DoneEvent, ErrorEvent, UsageEvent
from jxai_app.core.tokens import token_count


def usage_event(*, input_tokens: int, output: Any, cached: Any, reasoning: Any, total: Any) -> UsageEvent:
    """A :class:`UsageEvent` from a provider's raw numbers.

    Args:
        input_tokens: prompt tokens (already checked to be a count).
        output: the provider's completion/output count (anything; not a count means 0).
        cached: prompt tokens served from cache (``cachedInputTokens`` when a count).
        reasoning: reasoning tokens (``reasoningTokens`` when a count).
        total: the provider's total, used only to see whether reasoning is billed on top.

    Returns:
        The event. ``outputTokens`` is ``output + reasoning`` when ``reasoning > 0`` is reported
        beside the output and billed on top (docs/providers.md "Token counts"): ``total`` equals
        ``input + output + reasoning``, or ``reasoning`` exceeds ``output`` (so it cannot be part
        of it); else ``output``.
    """
    out = token_count(output) or 0
    thought = token_count(reasoning)
    if thought and (token_count(total) == input_tokens + out + thought or thought > out):
        out += thought
    return UsageEvent(input_tokens=input_tokens, output_tokens=out, cached_input_tokens=token_count(cached),
                      reasoning_tokens=thought)


def usage_from(usage: Any, input_name: str, output_name: str) -> UsageEvent | None:
    """A provider's usage object whose members are named ``<input_name>_tokens``,
    ``<output_name>_tokens``, ``<input_name>_tokens_details.cached_tokens``,
    ``<output_name>_tokens_details.reasoning_tokens`` and ``total_tokens`` (``"prompt"`` /
    ``"completion"`` for chat completions, ``"input"`` / ``"output"`` for the Responses API)
    → :func:`usage_event` (docs/providers.md "Token counts"); ``None`` when ``usage`` is not an
    object or its input count is not a count."""
    if type(usage) is not dict:
        return None
    prompt = token_count(usage.get(input_name + "_tokens"))
    if prompt is None:
        return None
    input_details = usage.get(input_name + "_tokens_details")
    output_details = usage.get(output_name + "_tokens_details")
    return usage_event(
        input_tokens=prompt,
        output=usage.get(output_name + "_tokens"),
        cached=input_details.get("cached_tokens") if type(input_details) is dict else None,
        reasoning=output_details.get("reasoning_tokens") if type(output_details) is dict else None,
        total=usage.get("total_tokens"),
    )


def reached_provider(terminal: DoneEvent | ErrorEvent | None) -> bool:
    """Whether a model request ending with ``terminal`` counts as having reached the provider
    (docs/security.md "Quota reservations"): every request does — finished, stopped, cut off,
    timed out, failed on the network — except one the provider refused with an HTTP status
    (an ``error`` whose code is a number: nothing was generated or billed) and one jxai
    refused itself before sending it (``quota-exceeded``)."""
    if not isinstance(terminal, ErrorEvent):
        return True
    code = terminal.code or ""
    return not (code.isdigit() or code == "quota-exceeded")
