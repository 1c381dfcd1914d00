"""The HTTP API: ``POST /ai/chat`` (SSE), ``GET /ai/models``, ``/problems/<slug>`` (docs/api.md).

Thin: the rules live in :mod:`jxai_app.core.gateway` (pipeline), :mod:`jxai_app.web.authn` (tokens,
session, CSRF), :mod:`jxai_app.policy.budget` (limits) and :mod:`jxai_app.core.ssrf` (caller URLs).
Refusals before the stream are ``application/problem+json`` at the problem's status with the
body of docs/api.md "Problem documents" (``…problem, error: <detail>``) and, for 429, a ``Retry-After`` header.

Injection points for tests (module attributes, read per request): :data:`resolver` (DNS for
caller-supplied provider URLs) and :data:`address_blocked` (the address policy).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable, Mapping

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt

from jxai_app import conf

from jxai_app.web import authn

from jxai_app.core import gateway

from jxai_app.turns import observe
from jxai_app.db import db_call, db_request
from jxai_app.policy.budget import TurnBudget
from jxai_app.policy.entitlements import entitlements_for

from jxai_app.core import ssrf
from jxai_app.core.errors import ConfigurationError, ProblemError
from jxai_app.core.problems import PROBLEM_CONTENT_TYPE, PROBLEM_TYPES, problem, problem_body, type_uri
from jxai_app.core.streaming.retry import RetryPolicy
from jxai_app.turns import httpturn
from jxai_app.turns.worker import get_hub

__all__ = ["chat", "models", "problem_index", "problem_page", "problem_response"]

logger = logging.getLogger("jxai_app.api")

resolver: ssrf.Resolver = ssrf.system_resolver
"""DNS resolver used for ``X-Api-Base-URL`` hosts (tests replace it)."""
address_blocked: Callable[[ssrf.IPAddress], bool] = ssrf.is_blocked_address
"""Address policy for ``X-Api-Base-URL`` hosts (tests replace it)."""


def problem_response(doc: Mapping[str, Any], *, code: str | None = None,
                     headers: Mapping[str, str] | None = None) -> HttpResponse:
    """An ``application/problem+json`` refusal at the problem's status (docs/api.md "Problem documents").

    A ``retry_after`` member (seconds) also becomes the ``Retry-After`` header.
    """
    body = problem_body(doc, code)
    response = HttpResponse(json.dumps(body, ensure_ascii=False), status=int(doc.get("status", 500)),
                            content_type=PROBLEM_CONTENT_TYPE)
    if isinstance(doc.get("retry_after"), int):
        response["Retry-After"] = str(doc["retry_after"])
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _method_not_allowed(*allowed: str) -> HttpResponse:
    return problem_response(problem("method-not-allowed", f"Use {' or '.join(allowed)}."),
                            headers={"Allow": ", ".join(allowed)})


async def _accept(request: HttpRequest) -> tuple[gateway.ChatRequest, gateway.SelectedUpstream, TurnBudget]:
    """Run the checks in order (module :mod:`jxai_app.core.gateway`); raise the first refusal.
    Returns the request, its upstream and its budget (docs/security.md
    "Quota reservations")."""
    principal = await authn.authenticate(request)
    caller = await gateway.resolve_upstream(
        base_url=request.headers.get("X-Api-Base-URL"), provider_key=request.headers.get("X-Provider-Api-Key"),
        allowed=conf.allow_client_provider(), resolver=resolver, blocked=address_blocked)
    limits = conf.get_limits()
    body = gateway.read_body(request.read, limits.max_body_bytes)
    chat_request = gateway.parse_chat_request(body, max_messages=limits.max_messages,
                                              max_message_chars=limits.max_message_chars)
    registry = conf.get_model_registry()
    granted = await db_request(entitlements_for, principal.user)
    if caller is None and not chat_request.model:  # the caller's own default (docs/security.md "Group entitlements")
        chat_request = dataclasses.replace(chat_request, model=granted.default_alias(registry))
    upstream = gateway.select_client(chat_request, caller, registry=registry,
                                     timeouts=conf.get_client_timeouts(),
                                     retry=RetryPolicy(retries=max(0, limits.upstream_retries)),
                                     secrets=conf.stream_secrets(), max_output_tokens=conf.answer_token_limit(),
                                     offered=granted.allowed_aliases(registry))
    try:
        if caller is None:  # a configured model: the caller's groups must allow it
            granted.check_model(upstream.model)
        budget = await db_request(TurnBudget.admit, principal.user, prompt_tokens=gateway.prompt_estimate(chat_request),
                                  model=upstream.model, granted=granted)
    except BaseException:
        await upstream.aclose()
        raise
    logger.info("ai/chat accepted: user=%s via=%s model=%s messages=%d bytes=%d caller_provider=%s",
                principal.user.pk, principal.via, upstream.model, chat_request.message_count, chat_request.bytes,
                caller is not None)
    return chat_request, upstream, budget


@csrf_exempt  # CSRF is enforced by authn for session-authenticated requests only
async def chat(request: HttpRequest) -> HttpResponse:
    """``POST /ai/chat``: the normalised event stream for the caller's history (docs/api.md "`POST /ai/chat`").

    Answers ``200 text/event-stream`` with ``data: <event JSON>\\n\\n`` frames, or a problem
    (see :mod:`jxai_app.core.gateway` for the order of the checks).
    """
    if request.method != "POST":
        return _method_not_allowed("POST")
    conversation = request.GET.get("conversation")
    if conversation is not None:
        return await _conversation_chat(request, conversation)
    try:
        chat_request, upstream, budget = await _accept(request)
    except ProblemError as refusal:
        return problem_response(refusal.problem)
    except ConfigurationError:
        logger.exception("ai/chat: the model configuration is unusable")
        return problem_response(problem("internal-error", "The model configuration is unusable; see the server log."))

    async def finish(outcome: gateway.StreamOutcome) -> None:
        observe.api_request_ended(upstream.model, outcome.usage, outcome.terminal)
        try:
            await db_call(budget.settle, outcome.usage, estimated=outcome.estimated,
                          failed=outcome.terminal == "error")
        except Exception:  # the answer is already out; losing a count must not raise here
            logger.exception("ai/chat: recording usage failed")

    response = StreamingHttpResponse(gateway.stream_sse(upstream, chat_request, on_finish=finish),
                                     content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _conversation_chat(request: HttpRequest, conversation: str) -> HttpResponse:
    """``POST /ai/chat?conversation=<id>|new``: a saved conversation's turn with the server's
    tools, or the decisions on its waiting calls (docs/api.md "Conversation mode"). The same
    checks as the stateless mode up to the body's shape, then the turn's own (ownership,
    one turn at a time, quota and rate limit: the websocket's rules)."""
    try:
        principal = await authn.authenticate(request)
        if request.headers.get("X-Api-Base-URL"):
            raise ProblemError(problem("forbidden", "A conversation request uses the server's providers; "
                                       "X-Api-Base-URL is not accepted here."))
        limits = conf.get_limits()
        body = gateway.read_body(request.read, limits.max_body_bytes)
        parsed = gateway.parse_chat_request(body, max_messages=limits.max_messages,
                                            max_message_chars=limits.max_message_chars)
        asked = httpturn.parse_conversation_request(conversation, messages=parsed.messages, tools=parsed.tools,
                                                    model=parsed.model)
        cid, events = await httpturn.run_conversation_request(get_hub(), user=principal.user, request=asked)
    except ProblemError as refusal:
        return problem_response(refusal.problem)
    logger.info("ai/chat conversation %s: user=%s via=%s %s", cid, principal.user.pk, principal.via,
                "decisions" if asked.text is None else "turn")
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    response["X-Conversation-Id"] = str(cid)
    return response


async def models(request: HttpRequest) -> HttpResponse:
    """``GET /ai/models``: the configured models the caller may use (a signed-in session or a
    token; anonymous: every one), always 200 JSON (docs/api.md "`GET /ai/models`").

    Body ``{"configured": true, "default": "<alias>", "models": [{"alias", "label",
    "context_window", "supports_tools", "default"}, …]}``; no keys, URLs or provider ids.
    An unusable configuration gives ``{"configured": false, "default": null, "models": [],
    "message": …}`` (still 200: it is a capability probe).
    """
    if request.method not in ("GET", "HEAD"):
        return _method_not_allowed("GET")
    try:
        principal: authn.Principal | None = await authn.authenticate(request)
    except ProblemError:  # no login needed: an anonymous probe sees every configured model
        principal = None
    try:
        registry = conf.get_model_registry()
        granted = await db_request(entitlements_for, principal.user) if principal else entitlements_for(None)
        body: dict[str, Any] = {"configured": True, "default": granted.default_alias(registry),
                                "models": granted.listing(registry)}
    except ConfigurationError:
        logger.exception("ai/models: the model configuration is unusable")
        body = {"configured": False, "default": None, "models": [],
                "message": "The model configuration is unusable; see the server log."}
    return JsonResponse(body, json_dumps_params={"ensure_ascii": False})


def problem_page(request: HttpRequest, slug: str) -> HttpResponse:
    """``/problems/<slug>``: the page a problem's ``type`` URI names (docs/api.md "`/problems/<slug>`"); 404 when unknown."""
    kind = PROBLEM_TYPES.get(slug)
    if kind is None:
        raise Http404("No such problem type.")
    return render(request, "jxai_app/problem.html", {"kind": kind, "type_uri": type_uri(slug), "kinds": None})


def problem_index(request: HttpRequest) -> HttpResponse:
    """``/problems/``: every problem type with its status and title."""
    return render(request, "jxai_app/problem.html", {"kind": None, "kinds": list(PROBLEM_TYPES.values())})
