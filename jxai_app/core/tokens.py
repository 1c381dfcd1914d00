"""Token arithmetic without a tokenizer: the one estimate rule and the one count rule
(docs/store.md "Usage and context tokens").

- **Estimate**: a text (or a JSON value, as its JSON text) of ``n`` characters is
  ``ceil(n / 4)`` tokens (:data:`CHARS_PER_TOKEN`, OpenAI's rule of thumb for English). It
  sizes quota reservations before a request and stands in for the usage of a request whose
  provider reported none (marked ``estimated``). An image part (``{"type": "image_url"}``)
  is :data:`IMAGE_TOKENS` tokens whatever its size, not the characters of its data URL; a
  PDF file part (``{"type": "file"}`` with a base64 data URL) is :data:`PDF_PAGE_TOKENS` per
  page (pypdf counts them), not the characters of its data URL. A file part whose data is not
  a readable PDF counts as its characters.
- **Count**: a token count read from outside (a provider's usage, a saved usage object) is
  a non-negative whole number: an ``int``, or a ``float`` holding one; ``True``/``False``,
  negatives, fractions, NaN and infinities are not counts.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
from typing import Any, Final

from pypdf import PdfReader
from pypdf.errors import PyPdfError

__all__ = ["CHARS_PER_TOKEN", "IMAGE_TOKENS", "PDF_PAGE_TOKENS", "estimate_tokens", "token_count", "tokens_for_chars",
           "without_media"]

CHARS_PER_TOKEN: Final[int] = 4
"""Characters per token of the estimate."""
IMAGE_TOKENS: Final[int] = 1600
"""Estimated tokens of one image part: the most Anthropic bills for an image (it scales larger
ones down to about 1.15 megapixels, ``width * height / 750`` tokens), above OpenAI's
high-detail cost of a 2048 x 768 image (1105). Reserving the upper bound never reserves too
little (docs/store.md "Usage and context tokens")."""
PDF_PAGE_TOKENS: Final[int] = 3000 + IMAGE_TOKENS
"""Estimated tokens of one page of a PDF file part: the providers read each page as its text
and as an image of the page; Anthropic puts a page's text at 1,500 to 3,000 tokens, and the
image is at most :data:`IMAGE_TOKENS` (docs/attachments.md "What the model gets")."""


def tokens_for_chars(chars: int) -> int:
    """``ceil(chars / 4)``: the estimated tokens of ``chars`` characters (0 for none)."""
    return math.ceil(max(0, chars) / CHARS_PER_TOKEN)


def _pdf_pages(part: dict[str, Any]) -> int | None:
    """The page count of a ``file`` part's base64 PDF data URL, ``None`` when it holds none."""
    file = part.get("file")
    url = file.get("file_data") if isinstance(file, dict) else None
    if not isinstance(url, str) or not url.startswith("data:application/pdf;base64,"):
        return None
    try:
        return len(PdfReader(io.BytesIO(base64.b64decode(url.split(",", 1)[1], validate=True))).pages)
    except (binascii.Error, PyPdfError, ValueError):
        return None


def without_media(value: Any) -> tuple[Any, int]:
    """A JSON-like ``value`` with every image part (``{"type": "image_url"}``) and PDF file
    part (``{"type": "file"}``) replaced by ``None``, and their estimated tokens
    (:data:`IMAGE_TOKENS` per image, :data:`PDF_PAGE_TOKENS` per PDF page)."""
    if isinstance(value, dict):
        if value.get("type") == "image_url":
            return None, IMAGE_TOKENS
        pages = _pdf_pages(value) if value.get("type") == "file" else None
        if pages is not None:
            return None, pages * PDF_PAGE_TOKENS
        pairs = [(key, without_media(item)) for key, item in value.items()]
        return {key: kept for key, (kept, _) in pairs}, sum(n for _, (_, n) in pairs)
    if isinstance(value, list):
        items = [without_media(item) for item in value]
        return [kept for kept, _ in items], sum(n for _, n in items)
    return value, 0


def estimate_tokens(value: Any) -> int:
    """The estimated tokens of a string, or of any other JSON value as its JSON text
    (non-ASCII kept as is), its image and PDF file parts counted as :func:`without_media` says."""
    if isinstance(value, str):
        return tokens_for_chars(len(value))
    rest, media = without_media(value)
    return tokens_for_chars(len(json.dumps(rest, ensure_ascii=False))) + media


def token_count(value: Any) -> int | None:
    """``value`` as a token count (module rule), else ``None``."""
    if type(value) is int:
        return value if value >= 0 else None
    if type(value) is float and value >= 0 and value.is_integer():
        return int(value)
    return None
