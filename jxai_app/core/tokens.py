"""Token arithmetic without a tokenizer: the one estimate rule and the one count rule
(docs/store.md "Usage and context tokens").

- **Estimate**: a text (or a JSON value, as its JSON text) of ``n`` characters is
  ``ceil(n / 4)`` tokens (:data:`CHARS_PER_TOKEN`, OpenAI's rule of thumb for English). It
  sizes quota reservations before a request and stands in for the usage of a request whose
  provider reported none (marked ``estimated``).
- **Count**: a token count read from outside (a provider's usage, a saved usage object) is
  a non-negative whole number: an ``int``, or a ``float`` holding one; ``True``/``False``,
  negatives, fractions, NaN and infinities are not counts.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

__all__ = ["CHARS_PER_TOKEN", "estimate_tokens", "token_count", "tokens_for_chars"]

CHARS_PER_TOKEN: Final[int] = 4
"""Characters per token of the estimate."""


def tokens_for_chars(chars: int) -> int:
    """``ceil(chars / 4)``: the estimated tokens of ``chars`` characters (0 for none)."""
    return math.ceil(max(0, chars) / CHARS_PER_TOKEN)


def estimate_tokens(value: Any) -> int:
    """The estimated tokens of a string, or of any other JSON value as its JSON text
    (non-ASCII kept as is)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return tokens_for_chars(len(text))


def token_count(value: Any) -> int | None:
    """``value`` as a token count (module rule), else ``None``."""
    if type(value) is int:
        return value if value >= 0 else None
    if type(value) is float and value >= 0 and value.is_integer():
        return int(value)
    return None
