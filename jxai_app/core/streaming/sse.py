"""Server-sent-event framing shared by every client (docs/streaming.md "SSE framing").

Bytes go in as they arrive; complete SSE events come out. The field-level rules are those of
the WHATWG event-stream interpretation, applied by ``httpx-sse``'s :class:`SSEDecoder`; this
module only adds what that decoder leaves to its caller:

- **Line splitting on bytes** (``\\r\\n``, ``\\r`` or ``\\n``, a ``\\r\\n`` pair split across
  reads counts once), so a UTF-8 character split across reads decodes intact: ``\\r`` and
  ``\\n`` never occur inside a multi-byte sequence, so each complete line is decoded whole.
  Partial lines are kept as a list of pieces and joined once, so a long line arriving in
  small pieces costs time linear in its length.
- **A line cap** (default 1 MiB): a longer line raises :class:`~.fault.UpstreamFault` with
  code ``line_too_long`` instead of buffering without bound.
- **A leading UTF-8 byte-order mark** is dropped (WHATWG).
- **The non-standard ``error:`` field** some llama.cpp builds send is turned into an event
  named ``error`` carrying the field's value, so it is handled exactly like ``event: error``.
- **End of body**: :meth:`SSEReader.close` returns the event left without its closing blank
  line (if any) for the caller's end-of-body tolerance.

:func:`parse_payload` applies the data-payload rules of docs/streaming.md "Data payloads" (trim;
``[DONE]``; JSON must be an object; broken JSON starting with ``{``/``[`` is ``invalid_stream``;
anything else is noise).
"""

from __future__ import annotations

import json
from typing import Any, Final

from httpx_sse import ServerSentEvent
from httpx_sse._decoders import SSEDecoder

from jxai_app.core.streaming.fault import UpstreamFault

MAX_LINE_BYTES: Final[int] = 1024 * 1024
"""Longest SSE line accepted, in bytes (``line_too_long``, docs/streaming.md "Errors and
their codes")."""

DONE: Final[object] = object()
"""Sentinel returned by :func:`parse_payload` for the ``[DONE]`` data payload."""

_BOM: Final[bytes] = b"\xef\xbb\xbf"
_raw_decode = json.JSONDecoder().raw_decode  # json.loads without its two wrapper calls
_WHITESPACE: Final[str] = " \t\r\n\x0b\x0c"


class SSEReader:
    """Incremental SSE decoder: ``feed(bytes) -> events``, then ``close() -> last event``.

    Args:
        max_line: the line cap in bytes; a longer line raises ``UpstreamFault``
            (``line_too_long``).

    Each event is an ``httpx_sse.ServerSentEvent`` (``event``, ``data``, ``id``, ``retry``);
    events with empty data are dropped (WHATWG dispatches nothing for an empty data buffer).
    """

    __slots__ = ("_max", "_parts", "_size", "_pending_cr", "_start", "_decoder", "_dirty")

    def __init__(self, *, max_line: int = MAX_LINE_BYTES) -> None:
        self._max = max_line
        self._parts: list[bytes] = []
        self._size = 0
        self._pending_cr = False
        self._start = b""  # bytes held until we know whether the body opens with a BOM
        self._decoder = SSEDecoder()
        self._dirty = False  # a field line was seen since the last dispatch

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Take the next bytes of the body; return the events they complete, in order.

        Raises:
            UpstreamFault: code ``line_too_long`` when a line exceeds the cap.
        """
        if self._start is not None:
            chunk = self._strip_bom(chunk)
            if not chunk:
                return []
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return []
        if b"\n" not in chunk and b"\r" not in chunk:
            self._keep(chunk)
            return []
        lines = chunk.splitlines()  # bytes.splitlines splits on \r\n, \r, \n only
        last = chunk[-1]
        if last == 13:  # b"\r": a following b"\n" belongs to this line end
            self._pending_cr = True
        if last != 10 and last != 13:
            tail = lines.pop()
        else:
            tail = None
        if self._parts:
            self._parts.append(lines[0])
            lines[0] = b"".join(self._parts)
            self._parts = []
            self._size = 0
        events: list[ServerSentEvent] = []
        limit = self._max
        decode = self._decoder.decode
        for raw in lines:  # the two common lines inline; everything else through _line()
            if len(raw) > limit:
                raise _too_long(limit)
            if not raw:
                if self._dirty:
                    self._dirty = False
                    event = decode("")
                    if event is not None and event.data:
                        events.append(event)
            elif raw[:5] == b"data:":
                self._dirty = True
                decode(raw.decode("utf-8", "replace"))
            else:
                event = self._line(raw.decode("utf-8", "replace"))
                if event is not None:
                    events.append(event)
        if tail is not None:
            self._keep(tail)
        return events

    def close(self) -> ServerSentEvent | None:
        """End of body: return the event left without its closing blank line, if any."""
        events: list[ServerSentEvent] = []
        if self._start:
            events += self.feed(b"")  # fewer than three bytes ever arrived
        if self._parts:
            line = b"".join(self._parts)
            self._parts = []
            event = self._line(line.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        if self._dirty:
            event = self._line("")
            if event is not None:
                events.append(event)
        return events[-1] if events else None

    # -- internals -----------------------------------------------------------------------
    def _strip_bom(self, chunk: bytes) -> bytes:
        head = self._start + chunk
        if len(head) < 3 and _BOM.startswith(head) and chunk:
            self._start = head
            return b""
        self._start = None  # type: ignore[assignment]
        return head[3:] if head.startswith(_BOM) else head

    def _keep(self, piece: bytes) -> None:
        if not piece:
            return
        self._size += len(piece)
        if self._size > self._max:
            raise _too_long(self._max)
        self._parts.append(piece)

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            if not self._dirty:
                return None
            self._dirty = False
            event = self._decoder.decode("")
            if event is None or not event.data:
                return None
            return event
        if line[0] == ":":
            return None
        if line.startswith("error") and (len(line) == 5 or line[5] == ":"):
            value = line[6:]
            if value[:1] == " ":
                value = value[1:]
            return ServerSentEvent(event="error", data=value)
        self._dirty = True
        self._decoder.decode(line)
        return None


def _too_long(limit: int) -> UpstreamFault:
    return UpstreamFault("line_too_long", f"The provider sent an event-stream line longer than {limit} bytes.")


def parse_payload(data: str, *, done_sentinel: bool = True) -> dict[str, Any] | object | None:
    """Apply the data-payload rules (docs/streaming.md "Data payloads") to one event's ``data``.

    Args:
        data: the event's data (multi-line data already joined by ``\\n``).
        done_sentinel: when True, ``[DONE]`` returns :data:`DONE` (OpenAI-compatible);
            when False it is noise (Anthropic, proxy).

    Returns:
        The JSON object; :data:`DONE`; or ``None`` for keep-alive noise to skip (empty,
        ``ping``, text that does not parse and does not start with ``{``/``[``).

    Raises:
        UpstreamFault: code ``invalid_stream`` for JSON that is not an object, or text starting
            with ``{``/``[`` that does not parse.
    """
    if data[:1] == "{" and data[-1:] == "}":  # the common case: no surrounding whitespace
        text = data
    else:
        text = data.strip(_WHITESPACE)
        if not text:
            return None
    first = text[0]
    if first == "{":
        try:
            value, end = _raw_decode(text)
            if end != len(text):
                raise ValueError("trailing text")
        except ValueError:
            raise UpstreamFault("invalid_stream", "The provider sent an event whose data is not valid JSON.") from None
        if type(value) is dict:
            return value
        raise UpstreamFault("invalid_stream", "The provider sent an event whose data is not a JSON object.")
    if text == "[DONE]":
        return DONE if done_sentinel else None
    try:
        value = json.loads(text)
    except ValueError:
        if first == "[":
            raise UpstreamFault("invalid_stream", "The provider sent an event whose data is not valid JSON.") from None
        return None
    raise UpstreamFault("invalid_stream", "The provider sent an event whose data is not a JSON object.")


def is_complete_object(data: str) -> bool:
    """True when ``data`` (trimmed) is ``[DONE]`` or parses as a JSON object — the end-of-body
    tolerance for an event left without its closing blank line (docs/streaming.md "SSE framing")."""
    text = data.strip(_WHITESPACE)
    if text == "[DONE]":
        return True
    if not text.startswith("{"):
        return False
    try:
        return type(json.loads(text)) is dict
    except ValueError:
        return False
