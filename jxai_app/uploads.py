"""Attachments over HTTP (docs/api.md "Attachments", docs/attachments.md):

- ``POST /ai/attachments``: one file (multipart field ``file``) → ``201`` with the unclaimed
  attachment (``{"id", "name", "mediaType", "size", "width", "height", "url", "sha256"}``);
  the session (with CSRF) or an API token, as ``/ai/chat``.
- ``GET /ai/attachments/<id>``: its bytes, for the owner or staff who may view conversations;
  ``404`` for anyone else alike, ``401`` without a login. Never a public media URL.

Thin: the checks are :func:`jxai_app.store.attachment_upload`'s, the quota
:func:`jxai_app.policy.storage.storage_quota`'s.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.utils.http import content_disposition_header
from django.views.decorators.csrf import csrf_exempt

from jxai_app import conf, store
from jxai_app.api import problem_response
from jxai_app.core.errors import ProblemError
from jxai_app.core.problems import problem, problem_error
from jxai_app.db import db_request
from jxai_app.policy.storage import storage_quota
from jxai_app.web import authn

__all__ = ["attachment_file", "attachments"]

_FORM_OVERHEAD = 64 * 1024
"""Bytes of a multipart body beyond the file (boundaries, headers, other fields)."""


class _NamesAsSent(MultiPartParser):
    """Django's multipart parser, also keeping each file's name as the client sent it
    (``sent_names``): Django drops path components and control characters silently, jxai
    refuses such a name (docs/attachments.md "Limits and checks")."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.sent_names: list[str] = []

    def sanitize_file_name(self, file_name: str) -> str | None:
        self.sent_names.append(file_name)
        return file_name or None


def _upload(user: Any, request: HttpRequest) -> dict[str, Any]:
    """Parse the form, check and store its one file (sync: a database thread)."""
    if not request.content_type.startswith("multipart/form-data"):
        raise problem_error("invalid-request", "Send the file as multipart/form-data in the field 'file'.")
    parser = _NamesAsSent(request.META, request, request.upload_handlers, request.encoding)
    try:
        _, files = parser.parse()
    except MultiPartParserError as exc:
        raise problem_error("invalid-request", f"The multipart body cannot be read: {exc}") from None
    sent = files.getlist("file")
    if len(sent) != 1 or len(parser.sent_names) != 1:
        raise problem_error("invalid-request", "Send exactly one file, in the field 'file'.")
    upload = sent[0]
    limit = conf.get_attachment_limits().max_bytes
    if upload.size is None or upload.size > limit:
        raise problem_error("payload-too-large", f"A file may be at most {limit} bytes.")
    attachment = store.attachment_upload(user=user, name=parser.sent_names[0], data=upload.read(),
                                         quota=storage_quota(user))
    return {**store.attachment_dict(attachment), "sha256": attachment.sha256}


@csrf_exempt  # CSRF is enforced by authn for session-authenticated requests only
async def attachments(request: HttpRequest) -> HttpResponse:
    """``POST /ai/attachments`` (module docstring); problems as ``application/problem+json``."""
    if request.method != "POST":
        return problem_response(problem("method-not-allowed", "Use POST."), headers={"Allow": "POST"})
    try:
        principal = await authn.authenticate(request)
        declared = request.headers.get("Content-Length") or "0"
        limit = conf.get_attachment_limits().max_bytes
        if not declared.isdigit() or int(declared) > limit + _FORM_OVERHEAD:
            raise problem_error("payload-too-large", f"A file may be at most {limit} bytes.")
        body = await db_request(_upload, principal.user, request)
    except ProblemError as refusal:
        return problem_response(refusal.problem)
    return JsonResponse(body, status=201, json_dumps_params={"ensure_ascii": False})


def _read(user: Any, attachment_id: Any) -> tuple[Any, bytes]:
    attachment = store.attachment_get(user=user, attachment_id=attachment_id)
    return attachment, store.attachment_bytes(attachment)


async def attachment_file(request: HttpRequest, attachment_id: Any) -> HttpResponse:
    """``GET /ai/attachments/<id>``: the stored bytes with their sniffed type; images inline,
    documents as a download; never sniffed or run by the browser (``nosniff``, a sandboxing CSP)."""
    if request.method not in ("GET", "HEAD"):
        return problem_response(problem("method-not-allowed", "Use GET."), headers={"Allow": "GET"})
    try:
        principal = await authn.authenticate(request)
        attachment, data = await db_request(_read, principal.user, attachment_id)
    except ProblemError as refusal:
        return problem_response(refusal.problem)
    response = HttpResponse(data, content_type=attachment.media_type)
    response["Content-Disposition"] = content_disposition_header(not attachment.is_image, attachment.name)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["Cache-Control"] = "private, max-age=3600"
    return response
