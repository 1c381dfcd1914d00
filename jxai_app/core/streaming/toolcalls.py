"""Assembling OpenAI-style streamed tool-call fragments into start/delta/end events
(docs/streaming.md "Tool-call fragments").

Rules:

- A fragment continues the call open at its ``index`` when its ``id`` is absent **or equal**
  to that call's id (llama.cpp repeats id and name on every chunk: one ``tool_call_start``).
- A different id at an open index closes the old call and opens a new one.
- A fragment at an index with no open call opens one; without an id it gets a generated id
  ``call_<index>_<8 hex>``. A fragment with no id, name or argument text opens nothing.
- ``tool_call_start`` goes out once the call has a name; argument text that arrives before
  the name is held and sent right after the start; a call that closes nameless starts with
  name ``""`` just before its end. Argument text is never dropped silently.
- A fragment whose arguments repeat the call's whole argument text so far, when that text is
  already complete JSON, adds nothing (gateways that resend the full arguments at the end).
- Calls close (``tool_call_end``) in the order they opened.
- A call named ``parallel`` (or ``multi_tool_use.parallel``) whose whole arguments are
  ``{"tool_uses": [{"recipient_name": "functions.X", "parameters": {...}}, ...]}`` is a wrapper
  some OpenAI models put around parallel calls: it is held to its end and then goes out as the
  calls it holds, ids ``<its id>_<position>``, names without the ``functions.`` prefix.
  Arguments of any other shape leave it the call it says it is.
"""

from __future__ import annotations

import json
import secrets
from typing import Final

from jxai_app.core.streaming.events import StreamEvent, ToolCallDeltaEvent, ToolCallEndEvent, ToolCallStartEvent


PARALLEL_WRAPPERS: Final[frozenset[str]] = frozenset({"parallel", "multi_tool_use.parallel"})


def generated_call_id(index: int) -> str:
    """A call id for a provider that sent none: ``call_<index>_<8 hex digits>``."""
    return f"call_{index}_{secrets.token_hex(4)}"


class _Call:
    __slots__ = ("id", "index", "name", "parts", "length", "held")

    def __init__(self, call_id: str, index: int) -> None:
        self.id = call_id
        self.index = index
        self.name: str | None = None
        self.parts: list[str] = []
        self.length = 0
        self.held: list[str] | None = []  # None once started

    def repeats_whole(self, args: str) -> bool:
        if len(args) != self.length or not self.length or "".join(self.parts) != args:
            return False
        try:
            json.loads(args)
        except ValueError:
            return False
        return True


class ToolCallAssembler:
    """Per-response state: the calls open by index, in opening order."""

    __slots__ = ("_by_index", "_open")

    def __init__(self) -> None:
        self._by_index: dict[int, _Call] = {}
        self._open: list[_Call] = []

    @property
    def has_open(self) -> bool:
        """True while at least one call is open."""
        return bool(self._open)

    def fragment(self, index: int, call_id: str | None, name: str | None, args: str, out: list[StreamEvent]) -> None:
        """Apply one fragment; append the events it produces to ``out``.

        Args:
            index: the call's position (already defaulted by the caller when missing).
            call_id: the fragment's ``id`` or ``None`` (empty counts as absent).
            name: the function name or ``None`` (empty counts as absent).
            args: the argument-text fragment (``""`` for none).
        """
        call = self._by_index.get(index)
        if call is None and call_id is None and not name and not args:
            return  # nothing to open a call with (e.g. Gemini's metadata-only fragment)
        if call is not None and call_id is not None and call_id != call.id:
            self._close(call, out)
            call = None
        if call is None:
            call = _Call(call_id or generated_call_id(index), index)
            self._by_index[index] = call
            self._open.append(call)
        if name and call.name is None:
            call.name = name
            if name not in PARALLEL_WRAPPERS:
                self._start(call, out)
        if args:
            if call.repeats_whole(args):
                return
            call.parts.append(args)
            call.length += len(args)
            if call.held is None:
                out.append(ToolCallDeltaEvent(id=call.id, args=args))
            else:
                call.held.append(args)

    def open_id(self, index: int) -> str | None:
        """The id of the call open at ``index``, if any."""
        call = self._by_index.get(index)
        return call.id if call is not None else None

    def close_all(self, out: list[StreamEvent]) -> None:
        """Close every open call in opening order (finish reason, ``[DONE]``, end of body)."""
        for call in list(self._open):
            self._close(call, out)

    def _start(self, call: _Call, out: list[StreamEvent]) -> None:
        out.append(ToolCallStartEvent(id=call.id, name=call.name or ""))
        held = call.held
        call.held = None
        if held:
            out.append(ToolCallDeltaEvent(id=call.id, args="".join(held)))

    def _close(self, call: _Call, out: list[StreamEvent]) -> None:
        if self._by_index.get(call.index) is call:
            del self._by_index[call.index]
        self._open.remove(call)
        wrapped = unwrap_parallel("".join(call.parts)) if call.name in PARALLEL_WRAPPERS else None
        if wrapped is not None:
            for position, (name, args) in enumerate(wrapped):
                inner = f"{call.id}_{position}"
                out += (ToolCallStartEvent(id=inner, name=name), ToolCallDeltaEvent(id=inner, args=args),
                        ToolCallEndEvent(id=inner))
            return
        if call.held is not None:
            self._start(call, out)
        out.append(ToolCallEndEvent(id=call.id))


def unwrap_parallel(args: str) -> list[tuple[str, str]] | None:
    """The calls a ``parallel`` wrapper's arguments hold, as ``(name, arguments JSON)`` pairs.

    ``{"tool_uses": [{"recipient_name": "functions.weather", "parameters": {"city": "Oslo"}}]}``
    → ``[("weather", '{"city":"Oslo"}')]``. ``None`` when the text is not exactly that shape
    (not JSON, no non-empty ``tool_uses`` list, an entry without a name or with parameters that
    are not an object); the wrapper is then kept as one call. Rule: docs/streaming.md
    "Tool-call fragments".
    """
    try:
        whole = json.loads(args)
    except ValueError:
        return None
    uses = whole.get("tool_uses") if type(whole) is dict else None
    if type(uses) is not list or not uses:
        return None
    calls: list[tuple[str, str]] = []
    for use in uses:
        name = use.get("recipient_name") if type(use) is dict else None
        parameters = use.get("parameters", {}) if type(use) is dict else None
        if type(name) is not str or not name.removeprefix("functions.") or type(parameters) is not dict:
            return None
        calls.append((name.removeprefix("functions."), json.dumps(parameters, separators=(",", ":"))))
    return calls
