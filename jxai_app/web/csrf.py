"""Django's CSRF refusal as a problem document for the page's JSON calls (Django's
``CSRF_FAILURE_VIEW``; docs/security.md, threat 8).

The chat page calls the share endpoints, the import and "Delete my account" with ``fetch`` and reads a problem document from every refusal. Django's
own CSRF failure is an HTML page, which the page could only show as "Failed (HTTP 403)". A
request that wants JSON gets the ``forbidden`` problem instead; every other request (a form
posted by the browser, a login page) keeps Django's page. (``/ai/chat`` and
``/ai/attachments`` check CSRF themselves, :mod:`jxai_app.web.authn`, with the same detail
and Django's reason after it.)
"""

from __future__ import annotations

from typing import Final

from django.http import HttpRequest, HttpResponse
from django.views.csrf import csrf_failure as django_csrf_failure

from jxai_app.api import problem_response
from jxai_app.core.problems import problem
from jxai_app.web.authn import CSRF_DETAIL

__all__ = ["JSON_PATHS", "csrf_failure", "wants_json"]

JSON_PATHS: Final[tuple[str, ...]] = ("/shares", "/data/import", "/account/delete", "/ai/attachments")
"""Paths (each with everything under it) that answer JSON only."""
_SCRIPT_BODIES: Final[tuple[str, ...]] = ("application/json", "multipart/form-data")


def wants_json(request: HttpRequest) -> bool:
    """Whether ``request`` expects a JSON answer: its path is one of :data:`JSON_PATHS` (or
    under one), its ``Accept`` names ``application/json``, or a script sent it (``fetch``:
    ``Sec-Fetch-Mode`` other than ``navigate``) with a JSON or multipart body."""
    path = request.path
    if any(path == prefix or path.startswith(prefix + "/") for prefix in JSON_PATHS):
        return True
    if "application/json" in request.headers.get("Accept", ""):
        return True
    mode = request.headers.get("Sec-Fetch-Mode", "")
    return bool(mode) and mode != "navigate" and request.content_type in _SCRIPT_BODIES


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """``CSRF_FAILURE_VIEW``: a 403 ``forbidden`` problem (detail :data:`CSRF_DETAIL`) for a
    request that :func:`wants_json`, else Django's own page for ``reason``."""
    if wants_json(request):
        return problem_response(problem("forbidden", CSRF_DETAIL))
    return django_csrf_failure(request, reason=reason)
