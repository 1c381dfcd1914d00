"""Share links over HTTP (docs/data.md "Share links"): the read-only page ``/s/<token>``,
"Continue in my chat", and the owner's JSON endpoints the chat page and Settings call.

Routes::

    GET  /s/<token>             the share page (read-only: no composer, no websocket)
    POST /s/<token>/continue    copy the snapshot into a new conversation → 302 /c/<id>
    GET  /shares                the caller's live links: {"shares": [share]}
    POST /shares                {"conversationId", "scope"?, "groups"?, "expiresInDays"?} → 201 share + "url"
    POST /shares/<id>/update    take the snapshot again → share
    POST /shares/<id>/revoke    → 204

``share`` is ``{"id", "conversationId", "title", "scope", "groups": [{"id", "name"}],
"createdAt", "snapshotAt", "expiresAt", "viewCount"}``; ``url`` (the only place the token
appears) only in the answer that created it. Refusals are ``application/problem+json``.

Every answer under ``/s/`` carries ``Referrer-Policy: no-referrer`` (the token never leaves
in a ``Referer``), ``X-Robots-Tag: noindex`` and ``Cache-Control: no-store`` (a revoked link
is not served from a cache). An unknown, revoked, expired or out-of-scope token answers the
same 404 page, byte for byte; a visitor who is not signed in is sent to the login page for
any link that is not open to anyone, whether it exists or not.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from jxai_app import conf
from jxai_app.api import problem_response
from jxai_app.core.errors import ConfigurationError, ProblemError
from jxai_app.core.problems import problem
from jxai_app.models import ShareLink, ShareScope
from jxai_app.policy.entitlements import entitlements_for
from jxai_app.store import shares

__all__ = ["share_action", "share_continue", "share_page", "shares_endpoint"]

SHARE_HEADERS = {"Referrer-Policy": "no-referrer", "X-Robots-Tag": "noindex", "Cache-Control": "no-store"}
"""Headers of every answer under ``/s/`` (module docstring)."""


def _guarded(response: HttpResponse) -> HttpResponse:
    for name, value in SHARE_HEADERS.items():
        response[name] = value
    return response


def _missing() -> HttpResponse:
    """The one 404 of the share pages: the same status and body for every dead token."""
    return _guarded(HttpResponseNotFound(render_to_string("jxai_app/share_missing.html")))


def _signed_in(request: HttpRequest) -> bool:
    return bool(getattr(request.user, "is_authenticated", False))


@require_safe
def share_page(request: HttpRequest, token: str) -> HttpResponse:
    """``GET /s/<token>``: the snapshot, read-only, rendered by ``share.js`` with the chat
    page's sanitiser under the same CSP; counts the view."""
    try:
        link = shares.share_open(token=token, viewer=request.user)
    except ProblemError:
        if not _signed_in(request):
            return _guarded(redirect_to_login(request.get_full_path()))
        return _missing()
    snapshot = link.snapshot if isinstance(link.snapshot, dict) else {}
    initial = {"messages": snapshot.get("messages") or []}
    return _guarded(render(request, "jxai_app/share.html", {
        "link": link, "initial": initial, "page_title": link.title or "Shared conversation", "token": token}))


@require_POST
def share_continue(request: HttpRequest, token: str) -> HttpResponse:
    """``POST /s/<token>/continue``: the snapshot copied into a new conversation of the
    signed-in viewer's, then the chat page of it (302)."""
    if not _signed_in(request):
        return _guarded(redirect_to_login(f"/s/{token}"))
    granted = entitlements_for(request.user)

    def model_for(shared: str) -> str:
        """The shared model when the viewer's groups may use it, else the viewer's default
        (docs/data.md "Share links"); an unusable configuration keeps it (the turn says why)."""
        try:
            return granted.usable_alias(shared, conf.get_model_registry()) or shared
        except ConfigurationError:
            return shared

    try:
        conversation = shares.share_continue(token=token, viewer=request.user, model_for=model_for)
    except ProblemError:
        return _missing()
    return _guarded(redirect("conversation", conversation_id=conversation.pk, permanent=False))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def share_dict(link: ShareLink) -> dict[str, Any]:
    """A link in the endpoints' shape (module docstring); prefetch ``groups`` for many."""
    return {"id": str(link.pk), "conversationId": str(link.conversation_id) if link.conversation_id else None,
            "title": link.title, "scope": link.scope,
            "groups": [{"id": g.pk, "name": g.name} for g in link.groups.all()],
            "createdAt": _iso(link.created_at), "snapshotAt": _iso(link.snapshot_at),
            "expiresAt": _iso(link.expires_at), "viewCount": link.view_count}


def _json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        raise ProblemError(problem("invalid-request", "The body is not valid JSON.")) from None
    if not isinstance(body, dict):
        raise ProblemError(problem("invalid-request", "The body must be a JSON object."))
    return body


def _unauthorized() -> HttpResponse:
    return problem_response(problem("unauthorized", "Sign in first."))


@require_http_methods(["GET", "POST"])
def shares_endpoint(request: HttpRequest) -> HttpResponse:
    """``GET /shares`` (the caller's live links, with what the share dialog may offer) and
    ``POST /shares`` (share a conversation)."""
    if not _signed_in(request):
        return _unauthorized()
    if request.method == "GET":
        groups = [{"id": g.pk, "name": g.name} for g in request.user.groups.order_by("name")]
        offered = {ShareScope.SIGNED_IN: True, ShareScope.GROUPS: bool(groups),
                   ShareScope.PUBLIC: conf.public_shares_allowed()}
        return JsonResponse({"shares": [share_dict(link) for link in shares.share_list(user=request.user)],
                             "scopes": [s for s in ShareScope.values if offered.get(s, False)], "groups": groups})
    try:
        body = _json_body(request)
        link, token = shares.share_create(
            user=request.user, conversation_id=body.get("conversationId"),
            scope=body.get("scope", ShareScope.SIGNED_IN), group_ids=body.get("groups"),
            expires_in_days=body.get("expiresInDays"))
    except ProblemError as exc:
        return problem_response(exc.problem)
    return JsonResponse({**share_dict(link), "url": request.build_absolute_uri(f"/s/{token}")}, status=201)


@require_POST
def share_action(request: HttpRequest, share_id: uuid.UUID, action: str) -> HttpResponse:
    """``POST /shares/<id>/update`` ("Update link") and ``POST /shares/<id>/revoke``."""
    if not _signed_in(request):
        return _unauthorized()
    try:
        if action == "update":
            return JsonResponse(share_dict(shares.share_update(user=request.user, share_id=share_id)))
        if action != "revoke":
            return problem_response(problem("not-found", "A share link has only 'update' and 'revoke'."))
        shares.share_revoke(user=request.user, share_id=share_id)
    except ProblemError as exc:
        return problem_response(exc.problem)
    return HttpResponse(status=204)

