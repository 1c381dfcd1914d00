"""Text search over one user's own conversations (the ``search_conversations`` tool,
docs/agent.md "Built-in tools")."""

from __future__ import annotations

from typing import Any, Final

from django.db.models import Case, Exists, IntegerField, OuterRef, Q, Value, When

from jxai_app.models import Message, MessageRole, MessageStatus
from jxai_app.store.common import owned

SNIPPET_CHARS: Final[int] = 160
"""Characters of context returned around a match."""
MAX_RESULTS: Final[int] = 50


def _snippet(text: str, query: str) -> str:
    at = text.lower().find(query.lower())
    start = max(0, at - SNIPPET_CHARS // 3) if at >= 0 else 0
    piece = text[start:start + SNIPPET_CHARS]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_CHARS < len(text) else "")


def conversation_search(*, owner: Any, query: str, limit: int = 5) -> list[dict[str, Any]]:
    """Find ``owner``'s conversations whose title or saved user/assistant text contains
    ``query`` (case-insensitive). Never looks at anyone else's conversations.

    Args:
        owner: the requesting user (anonymous → no results).
        query: the text to look for; blank → no results.
        limit: most results, clamped to 1 … 50.

    Returns:
        Most relevant first (title matches, then the most recently updated)::

            [{"id": str, "title": str, "updated_at": ISO 8601, "snippet": str}]
    """
    text = query.strip() if isinstance(query, str) else ""
    if not text:
        return []
    count = max(1, min(int(limit), MAX_RESULTS))
    readable = Message.objects.filter(
        role__in=(MessageRole.USER, MessageRole.ASSISTANT), status=MessageStatus.COMPLETE, content__icontains=text
    )
    found = (
        owned(owner)
        .filter(Q(title__icontains=text) | Q(Exists(readable.filter(conversation_id=OuterRef("pk")))))
        .annotate(title_hit=Case(When(title__icontains=text, then=Value(1)), default=Value(0),
                                 output_field=IntegerField()))
        .order_by("-title_hit", "-updated_at")[:count]
    )
    results = []
    for conversation in found:
        hit = readable.filter(conversation=conversation).order_by("position").values_list("content", flat=True).first()
        results.append({
            "id": str(conversation.pk), "title": conversation.title,
            "updated_at": conversation.updated_at.isoformat(),
            "snippet": _snippet(hit if hit is not None else conversation.title, text),
        })
    return results
