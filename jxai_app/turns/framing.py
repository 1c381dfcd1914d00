"""How big one outgoing message may be, and how bigger ones travel (docs/websocket.md,
"Frame size").

daphne hands autobahn ``maxMessagePayloadSize`` = 1 MiB (``--websocket_max_message_size``),
and autobahn applies it to what the server *sends* too: a larger message raises
``PayloadExceededError`` in the sender. The ``websockets`` client library refuses incoming
messages over 1 MiB by default. So no websocket message of ours exceeds
:data:`MAX_FRAME_BYTES` (UTF-8 bytes of its JSON text), whatever a deployment sets:

- :class:`Outbox` merges consecutive ``events`` of one turn only while the merged frame fits;
- :func:`wire_texts` turns a frame that still does not fit (a ``snapshot`` or
  ``message_saved`` of a long answer, one ``round_end`` event carrying it, a long ``replay``)
  into ``chunk`` frames: consecutive slices of its JSON text, which the page joins and parses;
- :func:`pieces` is the slicing both use, also for channel-layer messages
  (:mod:`jxai_app.turns.delivery`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jxai_app.store.common import storable

__all__ = ["MAX_FRAME_BYTES", "Encoded", "Frame", "Outbox", "encode", "json_bytes", "pieces", "wire_texts"]

MAX_FRAME_BYTES = 256 * 1024
"""The largest websocket message the server sends, in UTF-8 bytes: a quarter of daphne's,
autobahn's and the ``websockets`` client's 1 MiB default, and the same as the largest client
frame accepted (``JXAI_WS_MAX_FRAME_BYTES``' default)."""


def encode(value: Any) -> str:
    """Compact JSON text (non-ASCII kept as is: the socket carries UTF-8). Text a provider
    streamed with a lone surrogate, which UTF-8 cannot carry, comes out escaped (``\\ud800``)
    instead of breaking the socket (docs/store.md "Rows")."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if storable(text) != text:  # a lone surrogate (json.dumps escapes NUL itself)
        return json.dumps(value, separators=(",", ":"))
    return text


def json_bytes(value: Any) -> int:
    """The size of ``value``'s compact JSON in UTF-8 bytes."""
    return len(encode(value).encode("utf-8"))


def pieces(text: str, budget: int) -> list[str]:
    """``text`` cut into consecutive slices (``"".join`` gives it back) each of whose JSON
    string form (quotes and escapes included) is at most ``budget`` UTF-8 bytes.

    Raises:
        ValueError: ``budget`` is under 8 bytes (not even one character fits for sure).
    """
    if budget < 8:
        raise ValueError(f"a budget of {budget} bytes cannot hold a JSON string")
    out: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + budget)
        while True:
            size = json_bytes(text[start:end])
            if size <= budget:
                break
            end = start + max(1, (end - start) * budget // size - 1)
        out.append(text[start:end])
        start = end
    return out


_CHUNK_OVERHEAD = json_bytes({"type": "chunk", "index": 10**9, "count": 10**9, "data": ""})


def wire_texts(frame: dict[str, Any], limit: int = MAX_FRAME_BYTES) -> list[str]:
    """The websocket messages that carry ``frame``: its JSON text when it fits in ``limit``
    bytes, else ``chunk`` frames ``{"type":"chunk","index":i,"count":n,"data":slice}``
    (i from 0, sent consecutively; the ``data`` joined in order is the frame's JSON text).

    Raises:
        TypeError, ValueError: ``frame`` is not JSON-serialisable.
    """
    text = encode(frame)
    if len(text) <= limit // 4 or len(text.encode("utf-8")) <= limit:
        return [text]
    parts = pieces(text, limit - _CHUNK_OVERHEAD)
    return [encode({"type": "chunk", "index": i, "count": len(parts), "data": part}) for i, part in enumerate(parts)]


@dataclass(frozen=True)
class Encoded:
    """A frame already turned into its websocket messages by :func:`wire_texts` (a snapshot
    built once for several sockets: :mod:`jxai_app.turns.snapshots`).

    Attributes:
        type: the frame's ``type``; conversation_id: its ``conversationId``;
        texts: the messages to send, in order.
    """

    type: str
    conversation_id: str
    texts: tuple[str, ...]


Frame = dict[str, Any] | Encoded
"""What an :class:`Outbox` holds: a frame to encode, or one encoded already."""


class Outbox:
    """One socket's frames waiting to be sent, in order. Consecutive ``events`` frames of
    one turn become one frame while it stays within ``limit`` bytes; an item that does not
    fit starts the next frame (an item alone over the limit is a frame of its own, which
    :func:`wire_texts` chunks)."""

    def __init__(self, limit: int = MAX_FRAME_BYTES) -> None:
        self.limit = limit
        self._frames: list[Frame] = []
        self._tail_bytes = 0
        """Size of the last frame when it is an ``events`` frame still open for merging."""

    def add(self, frame: Frame) -> None:
        """Queue ``frame`` (its ``items`` list is copied, never changed)."""
        if isinstance(frame, Encoded) or frame["type"] != "events":
            self._frames.append(frame)
            self._tail_bytes = 0
            return
        for item in frame["items"]:
            size = json_bytes(item)
            last = self._frames[-1] if self._frames else None
            if (self._tail_bytes and isinstance(last, dict) and last["turnId"] == frame["turnId"]
                    and last["conversationId"] == frame["conversationId"]
                    and self._tail_bytes + 1 + size <= self.limit):
                last["items"].append(item)
                self._tail_bytes += 1 + size
            else:
                batch = {**frame, "items": [item]}
                self._frames.append(batch)
                self._tail_bytes = json_bytes(batch)

    def take(self) -> list[Frame]:
        """Every queued frame, in order; the outbox is empty afterwards."""
        frames, self._frames, self._tail_bytes = self._frames, [], 0
        return frames
