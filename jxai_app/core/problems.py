"""RFC 9457 problem documents and jxai's slug table (docs/api.md "Problem documents").

A problem document is a JSON object ``{"type", "title", "status", "detail", …extensions}``.
``type`` is an absolute URI, :data:`PROBLEM_BASE_URI` + slug, stable across deployments
and documented by the app at ``/problems/<slug>``. HTTP refusals answer
``application/problem+json``; failures after a stream began travel inside ``error`` events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Mapping

from jxai_app.core.errors import ProblemError

PROBLEM_BASE_URI: Final[str] = "https://jxai.dev/problems/"
"""Base of every problem ``type`` URI; the slug is appended (RFC 9457's ``type`` member)."""

PROBLEM_CONTENT_TYPE: Final[str] = "application/problem+json"


@dataclass(frozen=True, slots=True)
class ProblemType:
    """One row of the slug table."""

    slug: str
    """Stable identifier, the last path segment of the type URI."""
    status: int
    """The HTTP status this problem answers with."""
    title: str
    """Short human summary, the same for every occurrence (RFC 9457's ``title`` member)."""
    description: str
    """Longer explanation, shown on the ``/problems/<slug>`` page."""


PROBLEM_TYPES: Final[dict[str, ProblemType]] = {
    p.slug: p
    for p in (
        ProblemType("invalid-request", 400, "Invalid request",
                    "The request is malformed: bad JSON, a wrong member type, or a value out of range."),
        ProblemType("unauthorized", 401, "Unauthorized",
                    "Log in, or send a valid jxai API token (Authorization: Bearer or X-Api-Key)."),
        ProblemType("forbidden", 403, "Forbidden",
                    "You are logged in but not allowed to do this."),
        ProblemType("not-found", 404, "Not found",
                    "The resource does not exist, or it is not yours."),
        ProblemType("method-not-allowed", 405, "Method not allowed",
                    "This endpoint does not accept that HTTP method."),
        ProblemType("conflict", 409, "Conflict",
                    "A turn is already running in this conversation; wait for it or press Stop."),
        ProblemType("payload-too-large", 413, "Payload too large",
                    "The request body, a message, or the number of messages is over the limit."),
        ProblemType("unsupported-media-type", 415, "Unsupported media type",
                    "The file's type is not one jxai takes, its contents do not match its name, or it cannot "
                    "be read (see Limits and checks in docs/attachments.md)."),
        ProblemType("rate-limited", 429, "Too many requests",
                    "You are sending turns faster than this deployment allows; retry after the delay given."),
        ProblemType("quota-exceeded", 429, "Quota exceeded",
                    "Your token allowance for the period is used up."),
        ProblemType("internal-error", 500, "Internal error",
                    "Something failed inside jxai or the provider answered with an unexpected server error."),
        ProblemType("capability-unavailable", 501, "Capability unavailable",
                    "The model or provider does not support what was asked (for example, tools)."),
        ProblemType("upstream-failure", 502, "Upstream failure",
                    "The model provider failed: it refused, broke off the stream, or sent something unreadable."),
        ProblemType("service-unavailable", 503, "Service unavailable",
                    "This server cannot take the request now: it is shutting down, or its database is not "
                    "answering. Retry after the delay given (another server may take it)."),
        ProblemType("upstream-timeout", 504, "Upstream timeout",
                    "The model provider did not answer in time (connect, first byte, or idle timeout)."),
    )
}
"""Every problem type jxai emits, by slug (docs/api.md "Problem documents")."""

_STATUS_TO_SLUG: Final[dict[int, str]] = {
    400: "invalid-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    409: "conflict",
    413: "payload-too-large",
    415: "unsupported-media-type",
    429: "rate-limited",
    501: "capability-unavailable",
    502: "upstream-failure",
    503: "upstream-failure",
    504: "upstream-timeout",
}


def type_uri(slug: str) -> str:
    """The absolute ``type`` URI for ``slug``; raises ``KeyError`` for an unknown slug."""
    return PROBLEM_BASE_URI + PROBLEM_TYPES[slug].slug


def problem(slug: str, detail: str | None = None, **extensions: Any) -> dict[str, Any]:
    """Build a problem document.

    Args:
        slug: a key of :data:`PROBLEM_TYPES`.
        detail: the occurrence-specific sentence (RFC 9457's ``detail`` member); omitted when empty.
        **extensions: extra members appended after the standard ones (e.g. ``retry_after``).

    Returns:
        ``{"type", "title", "status"[, "detail"], …extensions}`` in that member order.

    Raises:
        KeyError: ``slug`` is not in the table.
    """
    kind = PROBLEM_TYPES[slug]
    doc: dict[str, Any] = {"type": type_uri(slug), "title": kind.title, "status": kind.status}
    if detail:
        doc["detail"] = detail
    doc.update(extensions)
    return doc


def slug_for_status(status: int) -> str:
    """Map an upstream HTTP status to a slug (docs/streaming.md "Errors and their codes": 429 →
    rate-limited, 504 → upstream-timeout). Unlisted: ≥ 500 → internal-error, otherwise invalid-request."""
    if status in _STATUS_TO_SLUG:
        return _STATUS_TO_SLUG[status]
    return "internal-error" if status >= 500 else "invalid-request"


def problem_for_status(status: int, detail: str | None = None, **extensions: Any) -> dict[str, Any]:
    """A problem document for an upstream HTTP status (see :func:`slug_for_status`)."""
    return problem(slug_for_status(status), detail, **extensions)


def problem_error(slug: str, detail: str | None = None, **extensions: Any) -> ProblemError:
    """A :class:`~jxai_app.core.errors.ProblemError` carrying ``problem(slug, detail, …)``."""
    return ProblemError(problem(slug, detail, **extensions))


def problem_body(doc: Mapping[str, Any], code: str | None = None) -> dict[str, Any]:
    """The JSON body of an ``application/problem+json`` refusal (docs/api.md "Problem documents").

    The problem's members, then an ``error`` alias equal to ``detail`` (for the original
    package's clients) when there is a detail and no ``error`` yet, then ``code`` when given.
    """
    body = dict(doc)
    if body.get("detail") and "error" not in body:
        body["error"] = body["detail"]
    if code:
        body["code"] = code
    return body
