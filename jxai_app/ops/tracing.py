"""OpenTelemetry tracing of turns, off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set
(docs/operations.md "Tracing").

One span per turn (``invoke_agent jxai``), a child per model request (``chat <model id>``)
and one per tool call (``execute_tool <tool>``), with the attributes of the OpenTelemetry
GenAI semantic conventions (``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model``, ``gen_ai.response.finish_reasons``, ``gen_ai.usage.*``,
``gen_ai.tool.*``, ``gen_ai.conversation.id``). Message content (the answer, tool arguments
and results) is recorded only with ``JXAI_OTEL_CAPTURE_CONTENT=1``.

The exporter is ``opentelemetry-exporter-otlp-proto-http``'s, configured by the standard
``OTEL_EXPORTER_OTLP_*`` variables (endpoint, headers, timeout); ``OTEL_SERVICE_NAME``
names the service (default ``jxai``). Spans are batched and sent from a background thread.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from jxai_app import conf

__all__ = ["TurnTrace", "install", "turn_trace"]

_lock = threading.Lock()
_tracer: Tracer | None = None
_configured = False
_capture_content = False


def install(processor: SpanProcessor, *, capture_content: bool = False) -> Tracer:
    """Trace turns into ``processor`` from now on (replacing what was installed before).

    Args:
        processor: where finished spans go: a ``BatchSpanProcessor`` over the OTLP exporter
            in production, a ``SimpleSpanProcessor`` over the SDK's ``InMemorySpanExporter``
            in tests.
        capture_content: record message content on the spans (``JXAI_OTEL_CAPTURE_CONTENT``).

    Returns:
        The tracer turns use.
    """
    global _tracer, _configured, _capture_content
    provider = TracerProvider(resource=Resource.create({"service.name": conf.tracing().service_name}))
    provider.add_span_processor(processor)
    with _lock:
        _tracer, _configured, _capture_content = provider.get_tracer("jxai"), True, capture_content
    return _tracer


def _tracer_or_none() -> Tracer | None:
    """The installed tracer; on first use, the OTLP one when an endpoint is configured."""
    global _configured
    if not _configured:
        settings = conf.tracing()
        if settings.endpoint:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            install(BatchSpanProcessor(OTLPSpanExporter()), capture_content=settings.capture_content)
        else:
            _configured = True
    return _tracer


def _content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class TurnTrace:
    """The spans of one turn; fed by :class:`jxai_app.turns.observe.TurnObserver`.

    Args:
        tracer: the tracer.
        model_alias, model_id, provider: the turn's model (alias, the provider's id, the
            registry's provider name).
        conversation_id, turn_id: ids (attributes, never metric labels).
    """

    def __init__(self, tracer: Tracer, *, model_alias: str, model_id: str, provider: str, conversation_id: str,
                 turn_id: str) -> None:
        self._tracer, self._model_id, self._provider = tracer, model_id, provider
        self._turn = tracer.start_span("invoke_agent jxai", kind=SpanKind.INTERNAL, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "jxai",
            "gen_ai.provider.name": provider, "gen_ai.request.model": model_id, "jxai.model.alias": model_alias,
            "gen_ai.conversation.id": conversation_id, "jxai.turn.id": turn_id})
        self._context = trace.set_span_in_context(self._turn)
        self._request: Span | None = None
        self._tools: dict[str, Span] = {}
        self._input_tokens = self._output_tokens = 0

    def request_started(self, round_number: int) -> None:
        """A model request (round) began."""
        self._request = self._tracer.start_span(f"chat {self._model_id}", context=self._context, kind=SpanKind.CLIENT,
                                                attributes={"gen_ai.operation.name": "chat",
                                                            "gen_ai.provider.name": self._provider,
                                                            "gen_ai.request.model": self._model_id,
                                                            "jxai.round": round_number})

    def request_ended(self, *, stop_reason: str, error_type: str | None, message: Any, input_tokens: int,
                      output_tokens: int, estimated: bool) -> None:
        """The request's stream ended and its usage is known (``error_type``: the status or
        problem slug of a failure, else ``None``; ``estimated``: the tokens are jxai's estimate)."""
        span, self._request = self._request, None
        self._input_tokens += input_tokens
        self._output_tokens += output_tokens
        if span is None:
            return
        span.set_attributes({"gen_ai.response.finish_reasons": [stop_reason], "jxai.usage.estimated": estimated,
                             "gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens})
        if error_type:
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, error_type))
        if _capture_content and message:
            span.set_attribute("gen_ai.output.messages", _content([message]))
        span.end()

    def tool_started(self, call_id: str, name: str, arguments: str) -> None:
        """A tool call is about to run."""
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                      "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function"}
        if _capture_content:
            attributes["gen_ai.tool.call.arguments"] = arguments
        self._tools[call_id] = self._tracer.start_span(f"execute_tool {name}", context=self._context,
                                                       kind=SpanKind.INTERNAL, attributes=attributes)

    def tool_ended(self, call_id: str, success: bool, result: Any) -> None:
        """The call's result arrived."""
        span = self._tools.pop(call_id, None)
        if span is None:
            return
        if not success:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, "tool_error"))
        if _capture_content:
            span.set_attribute("gen_ai.tool.call.result", _content(result))
        span.end()

    def ended(self, outcome: str, problem_type: str) -> None:
        """The turn ended: close every span still open, the turn's last."""
        for span in [*self._tools.values(), *filter(None, [self._request])]:
            span.end()
        self._tools.clear()
        self._request = None
        self._turn.set_attributes({"jxai.turn.outcome": outcome, "gen_ai.usage.input_tokens": self._input_tokens,
                                   "gen_ai.usage.output_tokens": self._output_tokens})
        if problem_type:
            self._turn.set_attribute("error.type", problem_type)
            self._turn.set_status(Status(StatusCode.ERROR, problem_type))
        self._turn.end()


def turn_trace(**kwargs: Any) -> TurnTrace | None:
    """A :class:`TurnTrace` (same arguments) when tracing is on, else ``None``."""
    tracer = _tracer_or_none()
    return None if tracer is None else TurnTrace(tracer, **kwargs)
