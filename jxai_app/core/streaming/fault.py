"""Provider failures as one internal exception, and their translation into ``error`` events.

Inside a client everything that goes wrong upstream — a non-2xx answer, an error object in a
200 stream, a broken payload, an over-long line, a stream cut off — raises
:class:`UpstreamFault`. The client's single translation boundary
(:meth:`jxai_app.core.streaming.base.BaseChatClient.stream_chat`) turns it, and every ``httpx``
transport error, into exactly one :class:`~jxai_app.core.streaming.events.ErrorEvent` with a code
and an RFC 9457 problem (docs/streaming.md "Errors and their codes"). ``UpstreamFault`` never leaves a client.

Message extraction for non-2xx bodies follows docs/streaming.md "Error messages from a
non-2xx body" (an ``application/problem+json`` body gives its ``detail``, else its ``title``). A message is
kept whole (up to the body's :data:`MAX_ERROR_BODY`) until its event is made: credentials are
masked first, then it is cut to :data:`MAX_MESSAGE` characters (:func:`redact_and_clip`).
"""

from __future__ import annotations

import html
import json
import re
from http import HTTPStatus
from typing import Any, Final, Mapping, Sequence

from jxai_app.core.logsafety import REDACTED
from jxai_app.core.problems import problem, problem_for_status
from jxai_app.core.streaming.events import ErrorEvent

MAX_ERROR_BODY: Final[int] = 64 * 1024
"""Bytes of a non-2xx body read for the error message (docs/streaming.md "Error messages
from a non-2xx body")."""

MAX_MESSAGE: Final[int] = 2000
"""Longest message (and code) an ``error`` event carries, in characters; longer ones are
cut after credentials are masked (:func:`redact_and_clip`)."""


class UpstreamFault(Exception):
    """A provider failure on its way to becoming one ``error`` event.

    Args:
        code: the event's ``code`` (``"429"``, ``"invalid_stream"``, a provider's own code …).
        message: the human sentence (provider text or ours).
        slug: the problem type (``upstream-failure`` unless given).
        status: the upstream HTTP status, when the fault is a non-2xx answer; the problem
            type then follows the status (429 → rate-limited, 504 → upstream-timeout;
            docs/streaming.md "Errors and their codes").
        cut: the text ``message`` comes from was cut before it got here (an error body read
            up to :data:`MAX_ERROR_BODY`), so its end may be the start of a credential.
    """

    def __init__(self, code: str, message: str, *, slug: str = "upstream-failure", status: int | None = None,
                 cut: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.slug = slug
        self.status = status
        self.cut = cut

    def to_event(self, secrets: Sequence[str] = ()) -> ErrorEvent:
        """The ``error`` event for this fault, with its problem document (``detail`` = message).

        Args:
            secrets: credential values the request carried (:func:`secret_values`); each is
                replaced by ``[redacted]`` in the message and code before they are cut to
                :data:`MAX_MESSAGE` characters (:func:`redact_and_clip`), so a provider that
                echoes the ``Authorization`` header in its error body never hands the key, or
                a piece of it, to a browser, a database row or a log (docs/security.md,
                "Secret leakage").
        """
        message = redact_and_clip(self.message, secrets, cut=self.cut)
        code = redact_and_clip(self.code, secrets)
        doc = problem_for_status(self.status, message) if self.status is not None else problem(self.slug, message)
        return ErrorEvent(message=message, code=code, problem=doc)


_SECRET_HEADER_WORDS: Final[tuple[str, ...]] = ("authorization", "key", "token", "secret")
"""A request header whose lower-cased name contains one of these carries a credential."""
_MIN_SECRET: Final[int] = 8
"""Shorter values are not redacted (they would mangle ordinary words)."""


def secret_values(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The credential values among a request's ``headers``, longest first: a header's value,
    or for ``<scheme> <credentials>`` values (``Bearer sk-…``) the credentials alone, so an
    echo reads ``Bearer [redacted]``."""
    found: set[str] = set()
    for name, value in headers.items():
        if not isinstance(value, str) or not any(word in name.lower() for word in _SECRET_HEADER_WORDS):
            continue
        scheme, _, credentials = value.strip().partition(" ")
        found.add(credentials.strip() or scheme)
    return tuple(sorted((v for v in found if len(v) >= _MIN_SECRET), key=len, reverse=True))


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by ``[redacted]``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _secret_prefix_at_end(text: str, secrets: Sequence[str]) -> int:
    """Length of the longest proper prefix of one of ``secrets`` that ``text`` ends with (0: none)."""
    longest = 0
    for secret in secrets:
        for size in range(len(secret) - 1, longest, -1):
            if text.endswith(secret[:size]):
                longest = size
                break
    return longest


def redact_and_clip(text: str, secrets: Sequence[str], limit: int = MAX_MESSAGE, *, cut: bool = False) -> str:
    """``text`` for an ``error`` event: credentials masked, then cut to ``limit`` characters.

    Masking comes first, so a secret that straddles the cut is masked whole rather than
    kept up to the cut. Then, when the text is cut here (the last character becomes ``…``)
    or was cut before (``cut``), a piece at its end that is the start of one of ``secrets``
    (``Bearer sk-pro`` of ``Bearer sk-proj-…``), however short, is masked too
    (docs/security.md, "Secret leakage").

    Args:
        text: the provider's sentence (or code).
        secrets: the request's credential values (:func:`secret_values`).
        limit: the longest result, in characters, ``…`` included.
        cut: ``text`` itself ends where something longer was cut.

    Returns:
        At most ``limit`` characters (plus the mask's when one replaces a piece at the cut).
    """
    text = redact(text, secrets)
    clipped = len(text) > limit
    if clipped:
        text = text[: limit - 1]
    if clipped or cut:
        piece = _secret_prefix_at_end(text, (*secrets, REDACTED))  # a mask cut in two is made whole
        if piece:
            text = text[: len(text) - piece] + REDACTED
    return text + "…" if clipped else text


def provider_error_fault(error: Any) -> UpstreamFault:
    """Fault for a provider's error inside a 200 stream (docs/streaming.md "Errors and their codes").

    Args:
        error: the provider's error object (``{"message", "code", "type"}``), a bare string,
            or anything else found under an ``error`` member / in an ``error`` event.

    Returns:
        A fault whose code is the object's string ``code``, else its string ``type``, else its
        numeric ``code`` as a string, else ``upstream_error``; problem ``upstream-failure``.
    """
    if isinstance(error, str):
        return UpstreamFault("upstream_error", error.strip() or "The provider reported an error.")
    if not isinstance(error, Mapping):
        return UpstreamFault("upstream_error", "The provider reported an error.")
    code = error.get("code")
    kind = error.get("type")
    if isinstance(code, str) and code:
        chosen = code
    elif isinstance(kind, str) and kind:
        chosen = kind
    elif isinstance(code, int) and not isinstance(code, bool):
        chosen = str(code)
    else:
        chosen = "upstream_error"
    message = error.get("message")
    if not isinstance(message, str) or not message.strip():
        message = f"The provider reported an error ({chosen})."
    return UpstreamFault(chosen, message.strip())


def error_event_fault(data: str) -> UpstreamFault:
    """Fault for an SSE event named ``error`` (or a non-standard ``error:`` field): a JSON
    object is the provider's error object (or ``{"error": {...}}`` around it); plain text is
    the message with code ``upstream_error`` (docs/streaming.md "SSE framing", "Errors and
    their codes")."""
    text = data.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict):
            inner = value.get("error")
            return provider_error_fault(inner if isinstance(inner, (dict, str)) and inner else value)
    return provider_error_fault(text)


def http_fault(status: int, reason: str, body: bytes, content_type: str, *, body_code_first: bool = False) -> UpstreamFault:
    """Fault for a non-2xx answer (docs/streaming.md "Errors and their codes", "Error messages from a
    non-2xx body").

    Args:
        status: the HTTP status.
        reason: the reason phrase (the fallback for an empty body).
        body: up to :data:`MAX_ERROR_BODY` bytes of the body (that many: it was cut there).
        content_type: the response's ``Content-Type`` (may be empty).
        body_code_first: proxy rule (docs/streaming.md "Proxy client"): the body's own top-level non-empty string
            ``code`` becomes the event code instead of the status.

    Returns:
        A fault with ``code`` = the status as text (or the body's code), ``message`` = the
        provider's sentence, and a problem of the type for that status.
    """
    text = body.decode("utf-8", "replace").strip()
    fallback = reason or _phrase(status)
    value: Any = None
    if text[:1] in ("{", "["):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
    mime = content_type.split(";", 1)[0].strip().lower()
    message = extract_message(text, value, fallback, problem_json=mime == "application/problem+json",
                              is_html=mime in ("text/html", "application/xhtml+xml"))
    code = str(status)
    if body_code_first and isinstance(value, dict):
        own = value.get("code")
        if isinstance(own, str) and own:
            code = own
    return UpstreamFault(code, message, status=status, cut=len(body) >= MAX_ERROR_BODY)


def extract_message(text: str, value: Any, fallback: str, *, problem_json: bool = False, is_html: bool = False) -> str:
    """One human sentence from an error body (docs/streaming.md "Error messages from a non-2xx
    body").

    Args:
        text: the body text, stripped.
        value: the body parsed as JSON, or ``None``.
        fallback: the reason phrase, for an empty body.
        problem_json: the body is ``application/problem+json``: its ``detail``, else ``title``.
        is_html: the body is an HTML page: its ``<title>`` or its text, not the markup.
    """
    if not text:
        return fallback
    if isinstance(value, dict):
        if problem_json:
            for key in ("detail", "title"):
                if isinstance(value.get(key), str) and value[key].strip():
                    return str(value[key].strip())
        error = value.get("error")
        if isinstance(error, str) and error.strip():
            return error.strip()
        if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"].strip():
            return str(error["message"].strip())
        errors = value.get("errors")
        if isinstance(errors, list) and errors:
            first = errors[0]
            if isinstance(first, dict) and isinstance(first.get("message"), str) and first["message"].strip():
                return str(first["message"].strip())
    if is_html:
        return _html_text(text) or fallback
    return text


def _html_text(page: str) -> str:
    title = re.search(r"<title[^>]*>(.*?)</title>", page, re.IGNORECASE | re.DOTALL)
    if title and title.group(1).strip():
        return " ".join(html.unescape(title.group(1)).split())
    body = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", page, flags=re.IGNORECASE | re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"

