"""Text every boundary can carry: no NUL, no lone surrogate (docs/store.md "Rows").

PostgreSQL's ``text`` holds no NUL, and UTF-8 cannot encode a lone surrogate, which JSON
nonetheless spells (``"\\ud800"``). Client input holding either is refused at the boundary
(the websocket's frames, ``POST /ai/chat``'s body); model output holding either is kept
with each replaced by U+FFFD when saved, and escaped when sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["REPLACEMENT", "first_unclean_path", "is_clean", "replace_unclean", "replace_unclean_in"]

REPLACEMENT: Final[str] = "\ufffd"
_UNCLEAN: Final[re.Pattern[str]] = re.compile("[\x00\ud800-\udfff]")


def is_clean(text: str) -> bool:
    """True when ``text`` holds neither a NUL nor a lone surrogate."""
    return _UNCLEAN.search(text) is None


def replace_unclean(text: str) -> str:
    """``text`` with every NUL and lone surrogate replaced by U+FFFD."""
    return _UNCLEAN.sub(REPLACEMENT, text)


def replace_unclean_in(value: Any) -> Any:
    """A copy of a JSON-like ``value`` (dicts, lists, tuples, strings, scalars) with
    :func:`replace_unclean` applied to every string, object keys included; other values as
    they are. For a transport that encodes UTF-8 strictly (msgpack in ``channels_redis``)."""
    if isinstance(value, str):
        return replace_unclean(value)
    if isinstance(value, Mapping):
        return {replace_unclean_in(key): replace_unclean_in(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [replace_unclean_in(item) for item in value]
    return value


def first_unclean_path(value: Any, path: str = "") -> str | None:
    """Where the first string that is not :func:`is_clean` sits in a parsed JSON ``value``
    (object keys included), as ``a.b[2].c``; ``None`` when every string is clean."""
    if isinstance(value, str):
        return None if is_clean(value) else (path or "the body")
    if isinstance(value, Mapping):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and not is_clean(key):
                return path or "the body"
            found = first_unclean_path(item, here)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = first_unclean_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None
