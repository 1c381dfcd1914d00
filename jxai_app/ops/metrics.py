"""The Prometheus metrics of a worker: every metric object is defined here, and only here
(docs/operations.md "Metrics").

Names follow Prometheus conventions (``jxai_`` prefix, base units, ``_total`` counters).
Labels are bounded: model aliases from the registry, provider names from the registry, tool
names from the tool registry (``other`` for a name the model made up), outcomes, HTTP
statuses and problem type slugs. No user id, conversation id or text is ever a label.

**Several workers.** With ``PROMETHEUS_MULTIPROC_DIR`` set (before the worker starts; it
must be an empty directory shared by the workers of one host and wiped at each deploy),
``prometheus-client`` keeps each process's values in files there and :func:`exposition`
merges them, so any worker's ``/metrics`` answers for all of them. The gauges count live
processes only (``livesum``); a worker that stops cleanly removes its gauge files
(:func:`forget_process`). Without the variable each worker counts for itself.
"""

from __future__ import annotations

import os
from http import HTTPStatus

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client import CONTENT_TYPE_LATEST

__all__ = [
    "ACTIVE_TURNS", "CONTENT_TYPE", "LAYER_PUBLISH_FAILURES", "PROVIDER_REQUESTS", "PROVIDER_RETRIES",
    "STORE_WRITE_RETRIES", "TIME_TO_FIRST_TOKEN", "TOKENS", "TOOL_CALLS", "TURNS_ENDED", "TURNS_STARTED",
    "TURN_DURATION", "WEBSOCKETS_OPEN", "exposition", "forget_process", "status_label",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The text exposition format's content type."""

TURNS_STARTED = Counter("jxai_turns_started", "Turns started, by model alias.", ["model"])
TURNS_ENDED = Counter("jxai_turns_ended", "Turns ended, by model alias, outcome (complete, cancelled, error, "
                      "empty, cap_partial, cap_failed) and, for errors, the problem type slug.",
                      ["model", "outcome", "problem_type"])
TIME_TO_FIRST_TOKEN = Histogram(
    "jxai_time_to_first_token_seconds", "Seconds from a turn's start to its first output (text, reasoning or a "
    "tool call), by model alias.", ["model"], buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60))
TURN_DURATION = Histogram(
    "jxai_turn_duration_seconds", "Seconds from a turn's start to its end, by model alias.", ["model"],
    buckets=(0.25, 0.5, 1, 2, 5, 10, 20, 40, 60, 120, 300, 600))
TOKENS = Counter("jxai_tokens", "Tokens of model requests, by model alias and direction (input, output); "
                 "estimates included (docs/turns.md \"The happy path\", Usage).", ["model", "direction"])
PROVIDER_REQUESTS = Counter(
    "jxai_provider_requests", "Model requests by provider and status: the HTTP status of a refusal, "
    "'ok' for a stream that ended, 'cancelled', or the problem type slug of another failure.",
    ["provider", "status"])
PROVIDER_RETRIES = Counter("jxai_provider_retries", "Model requests retried after a 429/5xx before any output, "
                           "by provider and the status retried.", ["provider", "status"])
_KNOWN_STATUSES = frozenset(str(int(status)) for status in HTTPStatus)


def status_label(code: object) -> str:
    """The ``status`` label of a provider's numeric status or error code (docs/operations.md
    "Metrics"): a known HTTP status as itself (``429``), any other number from 100 to 599 as
    its class (``4xx``), and anything else — a provider's own integer inside a 200 stream —
    as ``other``, so no provider can add series without end."""
    text = str(code)
    if text in _KNOWN_STATUSES:
        return text
    if text.isdigit() and len(text) == 3 and "1" <= text[0] <= "5":
        return text[0] + "xx"
    return "other"


TOOL_CALLS = Counter("jxai_tool_calls", "Tool calls by tool and outcome (success, failure).", ["tool", "outcome"])
ACTIVE_TURNS = Gauge("jxai_active_turns", "Turns running now.", multiprocess_mode="livesum")
WEBSOCKETS_OPEN = Gauge("jxai_websockets_open", "Websockets of logged-in users open now.",
                        multiprocess_mode="livesum")
LAYER_PUBLISH_FAILURES = Counter("jxai_layer_publish_failures", "Messages to the other workers (frame batches, "
                                 "pings, control requests) the channel layer refused.")
STORE_WRITE_RETRIES = Counter("jxai_store_write_retries", "Writes of a turn retried because the database did "
                              "not answer (docs/turns.md \"Faults an operator can rely on\").")


def _multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposition() -> bytes:
    """Every metric in the text exposition format (:data:`CONTENT_TYPE`): merged over the
    host's workers when ``PROMETHEUS_MULTIPROC_DIR`` is set (module docstring), else this
    process's."""
    if _multiprocess_dir() is None:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)


def forget_process() -> None:
    """This worker stops: drop its live gauges' files, so the merged gauges count only running
    workers. Nothing without ``PROMETHEUS_MULTIPROC_DIR``."""
    if _multiprocess_dir() is not None:
        multiprocess.mark_process_dead(os.getpid())
