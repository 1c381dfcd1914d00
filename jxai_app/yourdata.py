"""Your data over HTTP (docs/data.md): ``GET /data/export`` (the ZIP, streamed),
``POST /data/import`` (a file), ``POST /account/delete`` (with the password, or the
username for an account without one).

Thin: the rules are :mod:`jxai_app.store.export`, :mod:`jxai_app.store.dataimport` and
:mod:`jxai_app.web.erasure`. Refusals are ``application/problem+json`` (docs/api.md "Problem documents").
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from functools import wraps
from typing import Any

from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_POST, require_safe

from jxai_app import conf
from jxai_app.api import problem_response
from jxai_app.core.errors import ProblemError
from jxai_app.core.problems import problem
from jxai_app.db import db_call
from jxai_app.policy.storage import storage_quota
from jxai_app.store.dataimport import data_import
from jxai_app.store.export import export_filename, export_zip
from jxai_app.web.erasure import erase_account

__all__ = ["account_delete", "data_export", "data_import_view", "delete_confirmation", "export_response"]


def _signed_in(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """An ``unauthorized`` problem (401) for a visitor who is not signed in, not
    ``login_required``'s redirect: the page calls these with ``fetch``, which would follow it
    and take the login page's 200 for success."""
    @wraps(view)
    def checked(request: HttpRequest) -> HttpResponse:
        if not request.user.is_authenticated:
            return problem_response(problem("unauthorized", "Sign in first; nothing was changed."))
        return view(request)
    return checked


async def _pieces(user: Any) -> AsyncIterator[bytes]:
    """The export's ZIP bytes, each piece made in a database thread (:func:`export_zip`)."""
    pieces = export_zip(user)
    try:
        while (piece := await db_call(next, pieces, None)) is not None:
            if piece:
                yield piece
    finally:
        pieces.close()


def export_response(user: Any) -> StreamingHttpResponse:
    """``user``'s export as a streamed ``application/zip`` download (also admin's per-user export)."""
    return StreamingHttpResponse(_pieces(user), content_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{export_filename(user)}"', "Cache-Control": "no-store"})


@require_safe
@login_required
async def data_export(request: HttpRequest) -> StreamingHttpResponse:
    """Settings → "Download my data": the signed-in user's archive."""
    return export_response(await request.auser())


@require_POST
@_signed_in
def data_import_view(request: HttpRequest) -> HttpResponse:
    """Settings → import: the ``file`` field, at most ``JXAI_IMPORT_MAX_BYTES``.

    Answers ``{"imported": [{"id", "title", "messages", "attachments"}], "skipped": [{"index", "title",
    "reason"}], "skipped_attachments": [{"conversation", "message", "name", "reason"}]}``,
    or a problem: ``payload-too-large``, ``invalid-request`` (with ``skipped`` when nothing
    could be imported)."""
    upload = request.FILES.get("file")
    if upload is None:
        return problem_response(problem("invalid-request", "Choose a file to import (form field 'file')."))
    limit = conf.import_max_bytes()
    if upload.size is None or upload.size > limit:
        return problem_response(problem("payload-too-large", f"An import file may be at most {limit} bytes; "
                                        "nothing was imported."))
    try:
        report = data_import(user=request.user, data=upload.read(), quota=storage_quota(request.user))
    except ProblemError as refused:
        return problem_response(refused.problem)
    return JsonResponse({"imported": report.imported, "skipped": report.skipped,
                         "skipped_attachments": report.skipped_attachments},
                        json_dumps_params={"ensure_ascii": False})


def delete_confirmation(user: Any) -> str:
    """What "Delete my account" asks ``user`` to type: ``"password"`` for a user with a usable
    password, ``"username"`` otherwise (an account made by OpenID Connect sign-in has none to
    type). docs/data.md "Erasure"."""
    return "password" if user.has_usable_password() else "username"


def _confirmed(user: Any, body: Any) -> bool:
    """Whether ``body`` (the parsed JSON) carries ``user``'s confirmation
    (:func:`delete_confirmation`): the password, or the username exactly as it is spelt."""
    kind = delete_confirmation(user)
    typed = body.get(kind) if isinstance(body, dict) else None
    if not isinstance(typed, str):
        return False
    return user.check_password(typed) if kind == "password" else typed == user.get_username()


@require_POST
@_signed_in
def account_delete(request: HttpRequest) -> HttpResponse:
    """Settings → "Delete my account": ``{"password"}`` as JSON, or ``{"username"}`` for a user
    without a usable password (:func:`delete_confirmation`). The account and its content go,
    the session ends (``{"deleted": true}``); a wrong confirmation is ``forbidden``."""
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        body = None
    if not _confirmed(request.user, body):
        what = "your password" if delete_confirmation(request.user) == "password" else "your username"
        return problem_response(problem("forbidden", f"That is not {what}; nothing was deleted."))
    try:
        erase_account(request.user)
    except ProblemError as refused:
        return problem_response(refused.problem)
    logout(request)
    return JsonResponse({"deleted": True})
