"""Text search over one user's own conversations: the page's search box and the
``search_conversations`` tool (docs/store.md "Search", docs/agent.md "Built-in tools").

Every query is scoped to the owner in the query itself (``conversation.owner = user``),
never filtered afterwards. A conversation matches by its title or by the text of a saved
user or assistant message (a streaming placeholder never matches). On PostgreSQL the match
is full-text search (``django.contrib.postgres.search``, the ``english`` configuration,
``websearch`` query syntax: words, "quoted phrases", ``-not``) ranked by ``ts_rank``; on
any other database it is a case-insensitive substring match, newest first.
"""

from __future__ import annotations

from typing import Any, Final

from django.db import connection
from django.db.models import Case, FloatField, IntegerField, Q, QuerySet, Value, When
from django.db.models.functions import Left

from jxai_app.models import Conversation, Message, MessageRole, MessageStatus
from jxai_app.store.common import invalid, listed

SNIPPET_CHARS: Final[int] = 160
"""Characters of context returned around a match."""
MAX_RESULTS: Final[int] = 50
MAX_QUERY_CHARS: Final[int] = 500
"""Longest query the page's search takes."""
SEARCH_CONFIG: Final[str] = "english"
"""PostgreSQL text search configuration (stemming: "recipes" finds "recipe")."""
SEARCH_PREFIX_CHARS: Final[int] = 100_000
"""Full-text search reads the first this many characters of a text (docs/store.md "Search"):
PostgreSQL refuses a ``tsvector`` over 1 MB, which a long answer's whole text can exceed (so
saving it would fail under the index, and a search reading it would fail too). The index of
migration 0005 is built on the same expression."""


def _full_text() -> bool:
    return connection.vendor == "postgresql"


def _matches(rows: QuerySet[Any], field: str, text: str) -> QuerySet[Any]:
    """``rows`` whose ``field`` matches ``text``, annotated with ``rank`` (higher is better;
    1.0 for every row off PostgreSQL)."""
    if not _full_text():
        return rows.filter(**{f"{field}__icontains": text}).annotate(rank=Value(1.0, output_field=FloatField()))
    from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector

    vector = SearchVector(Left(field, SEARCH_PREFIX_CHARS), config=SEARCH_CONFIG)
    query = SearchQuery(text, config=SEARCH_CONFIG, search_type="websearch")
    return rows.annotate(document=vector).filter(document=query).annotate(rank=SearchRank(vector, query))


def _title_hits(owner: Any, text: str) -> QuerySet[Conversation]:
    return _matches(listed(owner), "title", text)


def _message_hits(owner: Any, text: str) -> QuerySet[Message]:
    readable = Message.objects.filter(conversation__in=listed(owner), role__in=(MessageRole.USER, MessageRole.ASSISTANT),
                                      status=MessageStatus.COMPLETE)
    return _matches(readable, "content", text)


def _snippet(text: str, query: str) -> str:
    """About :data:`SNIPPET_CHARS` characters of ``text`` around the first place one of the
    query's words occurs (its start when none does: a stemmed match)."""
    lowered = text.lower()
    places = [lowered.find(word) for word in [query.lower(), *query.lower().split()] if word]
    at = min((p for p in places if p >= 0), default=-1)
    start = max(0, at - SNIPPET_CHARS // 3) if at >= 0 else 0
    piece = text[start:start + SNIPPET_CHARS]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_CHARS < len(text) else "")


def _query_text(query: Any) -> str:
    return query.strip() if isinstance(query, str) else ""


def conversation_search(*, owner: Any, query: str, limit: int = 5) -> list[dict[str, Any]]:
    """Find ``owner``'s conversations whose title or saved user/assistant text matches
    ``query`` (see the module docstring). Never looks at anyone else's conversations.

    Args:
        owner: the requesting user (anonymous → no results).
        query: the text to look for; blank → no results.
        limit: most results, clamped to 1 … 50.

    Returns:
        Most relevant first (title matches, then the most recently updated)::

            [{"id": str, "title": str, "updated_at": ISO 8601, "snippet": str}]
    """
    text = _query_text(query)
    if not text:
        return []
    count = max(1, min(int(limit), MAX_RESULTS))
    titles = _title_hits(owner, text).values("pk")
    found = (
        listed(owner)
        .filter(Q(pk__in=titles) | Q(pk__in=_message_hits(owner, text).values("conversation_id")))
        .annotate(title_hit=Case(When(pk__in=titles, then=Value(1)), default=Value(0), output_field=IntegerField()))
        .order_by("-title_hit", "-updated_at")[:count]
    )
    results = []
    for conversation in found:
        hit = (_message_hits(owner, text).filter(conversation=conversation).order_by("position")
               .values_list("content", flat=True).first())
        results.append({
            "id": str(conversation.pk), "title": conversation.title,
            "updated_at": conversation.updated_at.isoformat(),
            "snippet": _snippet(hit if hit is not None else conversation.title, text),
        })
    return results


def message_search(*, owner: Any, query: str, limit: int = 20) -> list[dict[str, Any]]:
    """The page's search box: ``owner``'s messages whose text matches ``query``, each a result
    of its own that links to the message, and before them the conversations whose title
    matches and none of whose messages do (a title made from the first message would repeat
    that message's result). See the module docstring for the match. Never looks at anyone
    else's conversations.

    Args:
        owner: the requesting user (anonymous → no results).
        query: the text to look for; blank → no results.
        limit: most results of each kind (titles, messages), clamped to 1 … 50.

    Returns:
        Title matches (best first, then most recently updated), then message matches (best
        first, then newest)::

            [{"conversationId": str, "title": str, "messageId": int | None (a title match),
              "role": "user" | "assistant" | None, "snippet": str, "updatedAt": ISO 8601}]

    Raises:
        ProblemError: ``invalid-request`` for a query over :data:`MAX_QUERY_CHARS` characters.
    """
    text = _query_text(query)
    if len(text) > MAX_QUERY_CHARS:
        raise invalid(f"A search may be at most {MAX_QUERY_CHARS} characters.")
    if not text:
        return []
    count = max(1, min(int(limit), MAX_RESULTS))
    results = [
        {"conversationId": str(c.pk), "title": c.title, "messageId": None, "role": None,
         "snippet": _snippet(c.title, text), "updatedAt": c.updated_at.isoformat()}
        for c in (_title_hits(owner, text).exclude(pk__in=_message_hits(owner, text).values("conversation_id"))
                  .order_by("-rank", "-updated_at")[:count])
    ]
    hits = _message_hits(owner, text).select_related("conversation").order_by("-rank", "-created_at", "-pk")[:count]
    results += [
        {"conversationId": str(m.conversation_id), "title": m.conversation.title, "messageId": m.pk,
         "role": m.role, "snippet": _snippet(m.content, text), "updatedAt": m.created_at.isoformat()}
        for m in hits
    ]
    return results
