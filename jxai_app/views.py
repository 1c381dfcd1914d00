"""Page views: the chat page (docs/architecture.md "The chat page", "Routes").

Thin: ownership and recovery live in :mod:`jxai_app.store`, models in :mod:`jxai_app.conf`.
The page itself is static HTML plus ``chat.js``; everything live (transcript, streaming,
Stop, rename, delete, further pages of the conversation list) goes over the websocket protocol
of ``docs/websocket.md``. The view hands the script its starting data through ``json_script``
(no inline script, CSP-safe).
"""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_safe

from jxai_app import store
from jxai_app.conf import get_limits, get_model_registry, get_page_limits
from jxai_app.core.errors import ConfigurationError, ProblemError
from jxai_app.policy.entitlements import entitlements_for
from jxai_app.policy.storage import storage_quota
from jxai_app.store.serializers import conversation_dict, conversation_dicts
from jxai_app.yourdata import delete_confirmation

__all__ = ["chat"]

WS_PATH = "/ws/chat/"


@require_safe
@login_required
def chat(request: HttpRequest, conversation_id: uuid.UUID | None = None) -> HttpResponse:
    """The chat page: ``/`` (a new chat) or ``/c/<uuid>`` (one conversation).

    Logged-out visitors are redirected to ``LOGIN_URL`` (``/accounts/login/?next=…``).

    Raises:
        Http404: ``conversation_id`` is missing or belongs to another user — the same answer
            for both (never confirm that someone else's id exists; docs/security.md, threat 1).
    """
    current = None
    if conversation_id is not None:
        try:
            current = store.conversation_get(user=request.user, conversation_id=conversation_id)
        except ProblemError:
            raise Http404("Conversation not found.") from None
    try:
        registry = get_model_registry()
        granted = entitlements_for(request.user)  # only the models the user's groups allow
        models, default_model = granted.listing(registry), granted.default_alias(registry) or ""
    except ConfigurationError:
        # A broken model configuration must not hide the page: the socket reports it per turn.
        models, default_model = [], ""
    limits = get_limits()
    # The first page exactly as the socket's `list` answers it (docs/websocket.md, "Safety
    # additions"): the same size and order, so the script's first `conversations` frame only
    # adds the `next` cursor behind "Load more". Never the whole history, however long.
    size = max(1, limits.conversations_page_size)
    page = list(store.conversation_list(user=request.user).order_by("-updated_at", "-pk")[:size])
    initial = {
        "conversationId": str(current.pk) if current else None,
        "conversation": conversation_dict(current) if current else None,
        "conversations": conversation_dicts(page),
        "models": models,
        "defaultModel": default_model,
        "maxMessageChars": limits.max_message_chars,
        "customInstructionsMaxChars": get_page_limits().custom_instructions_max_chars,
        "feedbackCommentMaxChars": get_page_limits().feedback_comment_max_chars,
        "wsPath": WS_PATH,
        "dataUrls": {"import": reverse("data-import"), "deleteAccount": reverse("account-delete"),
                     "login": reverse("login")},
        "deleteConfirm": delete_confirmation(request.user),  # docs/data.md "Erasure"
    }
    title = (current.title or "Conversation") if current else "New chat"
    storage = {"used": store.storage_used(request.user), "quota": storage_quota(request.user)}  # docs/attachments.md
    return render(request, "jxai_app/chat.html", {"initial": initial, "page_title": title, "storage": storage})
