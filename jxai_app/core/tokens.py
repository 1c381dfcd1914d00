"""Token arithmetic without a tokenizer: the one estimate rule and the one count rule
(docs/store.md "Usage and context tokens").

- **Estimate**: a text (or a JSON value, as its JSON text) of ``n`` characters is
  ``ceil(n / 4)`` tokens (:data:`CHARS_PER_TOKEN`, OpenAI's rule of thumb for English). It
  sizes quota reservations before a request and stands in for the usage of a request whose
  provider reported none (marked ``estimated``). An image part (``{"type": "image_url"}``)
  is :data:`IMAGE_TOKENS` tokens whatever its size, not the characters of its data URL.
- **Count**: a token count read from outside (a provider's usage, a saved usage object) is
  a non-negative whole number: an ``int``, or a ``float`` holding one; ``True``/``False``,
  negatives, fractions, NaN and infinities are not counts.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

__all__ = ["CHARS_PER_TOKEN", "IMAGE_TOKENS", "estimate_tokens", "token_count", "tokens_for_chars", "without_images"]

CHARS_PER_TOKEN: Final[int] = 4
"""Characters per token of the estimate."""
IMAGE_TOKENS: Final[int] = 1600
"""Estimated tokens of one image part: the most Anthropic bills for an image (it scales larger
ones down to about 1.15 megapixels, ``width * height / 750`` tokens), above OpenAI's
high-detail cost of a 2048 x 768 image (1105). Reserving the upper bound never reserves too
little (docs/store.md "Usage and context tokens")."""


def tokens_for_chars(chars: int) -> int:
    """``ceil(chars / 4)``: the estimated tokens of ``chars`` characters (0 for none)."""
    return math.ceil(max(0, chars) / CHARS_PER_TOKEN)


def without_images(value: Any) -> tuple[Any, int]:
    """A JSON-like ``value`` with every image part (``{"type": "image_url"}``) replaced by
    ``None``, and how many there were."""
    if isinstance(value, dict):
        if value.get("type") == "image_url":
            return None, 1
        pairs = [(key, without_images(item)) for key, item in value.items()]
        return {key: kept for key, (kept, _) in pairs}, sum(n for _, (_, n) in pairs)
    if isinstance(value, list):
        items = [without_images(item) for item in value]
        return [kept for kept, _ in items], sum(n for _, n in items)
    return value, 0


def estimate_tokens(value: Any) -> int:
    """The estimated tokens of a string, or of any other JSON value as its JSON text
    (non-ASCII kept as is), each image part in it counted as :data:`IMAGE_TOKENS`."""
    if isinstance(value, str):
        return tokens_for_chars(len(value))
    rest, images = without_images(value)
    return tokens_for_chars(len(json.dumps(rest, ensure_ascii=False))) + images * IMAGE_TOKENS


def token_count(value: Any) -> int | None:
    """``value`` as a token count (module rule), else ``None``."""
    if type(value) is int:
        return value if value >= 0 else None
    if type(value) is float and value >= 0 and value.is_integer():
        return int(value)
    return None
