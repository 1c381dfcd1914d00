"""What one turn tells operators: metrics, spans and the log context (docs/operations.md).

The turn runner holds one :class:`TurnObserver` per turn and calls it in four places, each a
single line: :meth:`~TurnObserver.started` when its task starts, :meth:`~TurnObserver.see`
with every event it publishes (the wire dict, ``turn_end`` included, whichever path ended
the turn), :meth:`~TurnObserver.round_usage` with each round's usage once counted, and
:meth:`~TurnObserver.close` when the task ends. :meth:`see` costs one dict lookup for an
event it does not care about (every delta after the turn's first output): measured by
``bench/metrics.py``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from jxai_app import conf
from jxai_app.core.errors import UnknownModelError
from jxai_app.core.problems import PROBLEM_BASE_URI, PROBLEM_TYPES
from jxai_app.ops import jsonlog, metrics, tracing
from jxai_app.tools.registry import get_tool_registry

__all__ = ["TurnObserver", "api_request_ended", "problem_slug", "tool_label"]

_OUTPUT = ("delta", "reasoning", "tool_call_start")
"""Events that are the turn's output (the first one stops the time-to-first-token clock)."""


def problem_slug(doc: Any) -> str:
    """The slug of a problem document's ``type`` (``upstream-timeout`` …); ``other`` for a
    type that is not one of jxai's, ``""`` for no document."""
    if not isinstance(doc, Mapping):
        return ""
    slug = str(doc.get("type") or "").removeprefix(PROBLEM_BASE_URI)
    return slug if slug in PROBLEM_TYPES else "other"


def tool_label(name: str) -> str:
    """A tool's metric label: its registry name, ``other`` for one the registry does not
    have (a model may call any name: labels must stay bounded)."""
    return name if get_tool_registry().get_definition(name) is not None else "other"


def _model(alias: str | None) -> tuple[str, str, str]:
    """``(alias, model id, provider name)`` of the turn's model; an alias no longer
    configured is the default model's, as the turn runs it (turns/control.py)."""
    registry = conf.get_model_registry()
    try:
        model = registry.resolve(alias)
    except UnknownModelError:
        model = registry.resolve(None)
    return model.alias, model.model_id, model.provider


def _count_tokens(model: str, usage: Mapping[str, Any] | None) -> tuple[int, int]:
    inp = int((usage or {}).get("inputTokens", 0))
    out = int((usage or {}).get("outputTokens", 0))
    if inp:
        metrics.TOKENS.labels(model, "input").inc(inp)
    if out:
        metrics.TOKENS.labels(model, "output").inc(out)
    return inp, out


def api_request_ended(model: str, usage: Mapping[str, Any] | None, terminal: str) -> None:
    """One ``POST /ai/chat`` stream ended (docs/operations.md "Metrics"): its tokens, and the
    provider request with status ``ok``, ``error`` or ``disconnected`` (the caller left). A
    model the registry does not know (the caller's own provider) counts as model ``other``
    of provider ``caller``."""
    try:
        config = conf.get_model_registry().get(model)
        alias, provider = config.alias, config.provider
    except UnknownModelError:
        alias, provider = "other", "caller"
    _count_tokens(alias, usage)
    metrics.PROVIDER_REQUESTS.labels(provider, "ok" if terminal == "done" else terminal).inc()


class TurnObserver:
    """One turn's metrics, spans and log context (module docstring).

    Args:
        model: the turn's model alias (``None``: the default).
        conversation_id, turn_id: the turn's ids (log context and span attributes only).
    """

    def __init__(self, *, model: str | None, conversation_id: str, turn_id: str) -> None:
        self.model, model_id, self.provider = _model(model)
        self.conversation_id, self.turn_id = conversation_id, turn_id
        self._clock = time.monotonic
        self._started_at: float | None = None
        self._round_end: Mapping[str, Any] | None = None
        self._error_status = ""
        self._problem = ""
        self._closed = False
        self._trace = tracing.turn_trace(model_alias=self.model, model_id=model_id, provider=self.provider,
                                         conversation_id=conversation_id, turn_id=turn_id)
        self._handlers: dict[str, Callable[[Mapping[str, Any]], None]] = {
            "round_start": self._on_round_start, "round_end": self._on_round_end, "error": self._on_error,
            "tool_start": self._on_tool_start, "tool_result": self._on_tool_result, "turn_end": self._on_turn_end,
            **{kind: self._on_first_output for kind in _OUTPUT},
        }

    # ------------------------------------------------------------------ the runner's calls
    def started(self) -> None:
        """The turn's task started (call inside it: the log context is the task's)."""
        jsonlog.bind_turn(turn_id=self.turn_id, conversation_id=self.conversation_id)
        self._started_at = self._clock()
        metrics.TURNS_STARTED.labels(self.model).inc()
        metrics.ACTIVE_TURNS.inc()

    def see(self, event: Mapping[str, Any]) -> None:
        """An event the runner published (wire form, ``{"type": …}``)."""
        handler = self._handlers.get(event["type"])
        if handler is not None:
            handler(event)

    def round_usage(self, usage: Mapping[str, Any] | None, estimated: bool) -> None:
        """The round that just ended counted ``usage`` (the saved shape; ``None``: nothing;
        ``estimated``: made up, the provider sent none): tokens, the provider request by
        status, and the request's span."""
        end, self._round_end = self._round_end or {}, None
        stop_reason = str(end.get("stopReason") or "")
        inp, out = _count_tokens(self.model, usage)
        failure = (self._error_status or self._problem or "other") if stop_reason == "error" else None
        status = failure or ("cancelled" if stop_reason == "cancelled" else "ok")
        metrics.PROVIDER_REQUESTS.labels(self.provider, status).inc()
        self._error_status = ""
        if self._trace is not None:
            self._trace.request_ended(stop_reason=stop_reason, error_type=failure, message=end.get("message"),
                                      input_tokens=inp, output_tokens=out, estimated=estimated)

    def close(self) -> None:
        """The task ended: whatever was not ended is now (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._started_at is not None:
            metrics.ACTIVE_TURNS.dec()

    # ------------------------------------------------------------------ events
    def _on_first_output(self, event: Mapping[str, Any]) -> None:
        if self._started_at is not None:
            metrics.TIME_TO_FIRST_TOKEN.labels(self.model).observe(self._clock() - self._started_at)
        for kind in _OUTPUT:  # the rest of the turn's output costs a failed lookup each
            del self._handlers[kind]

    def _on_round_start(self, event: Mapping[str, Any]) -> None:
        if self._trace is not None:
            self._trace.request_started(int(event.get("round") or 0))

    def _on_round_end(self, event: Mapping[str, Any]) -> None:
        self._round_end = event

    def _on_error(self, event: Mapping[str, Any]) -> None:
        self._problem = problem_slug(event.get("problem")) or "upstream-failure"
        code = str(event.get("code") or "")
        self._error_status = metrics.status_label(code) if code.isdigit() else ""

    def _on_tool_start(self, event: Mapping[str, Any]) -> None:
        if self._trace is not None:
            self._trace.tool_started(str(event.get("callId")), str(event.get("name")), str(event.get("arguments")))

    def _on_tool_result(self, event: Mapping[str, Any]) -> None:
        success = bool(event.get("success"))
        metrics.TOOL_CALLS.labels(tool_label(str(event.get("name"))), "success" if success else "failure").inc()
        if self._trace is not None:
            self._trace.tool_ended(str(event.get("callId")), success, event.get("result"))

    def _on_turn_end(self, event: Mapping[str, Any]) -> None:
        outcome = str(event.get("outcome") or "")
        problem = self._problem if outcome in ("error", "cap_failed") else ""
        metrics.TURNS_ENDED.labels(self.model, outcome, problem).inc()
        if self._started_at is not None:
            metrics.TURN_DURATION.labels(self.model).observe(self._clock() - self._started_at)
        if self._trace is not None:
            self._trace.ended(outcome, problem)
        self.close()
