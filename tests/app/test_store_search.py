"""``conversation_search``: the requesting user's own conversations only (docs/agent.md "Built-in tools")."""

from __future__ import annotations

from typing import Any

import pytest

from jxai_app import store
from jxai_app.models import Message
from tests.app.conftest import FakeClock
from tests.app.store_support import TurnFeed

pytestmark = pytest.mark.django_db


def _exchange(user: Any, clock: FakeClock, question: str, answer: str, title: str = "") -> Any:
    conversation = store.conversation_create(user=user, model="m", title=title)
    recorder = TurnFeed(store.message_send(user=user, conversation_id=conversation.pk, text=question))
    recorder.add_delta(answer)
    recorder.finish_round(stop_reason="stop", last=True)
    return conversation


def test_search_finds_only_own_conversations_title_hits_first(user: Any, other_user: Any, clock: FakeClock) -> None:
    by_text = _exchange(user, clock, "How do I bake bread?", "Knead the DOUGH for ten minutes.")
    by_title = _exchange(user, clock, "question", "answer", title="Dough recipes")
    _exchange(other_user, clock, "my dough secret", "never share it")
    results = store.conversation_search(owner=user, query="dough", limit=5)
    assert [r["id"] for r in results] == [str(by_title.pk), str(by_text.pk)]
    assert results[1]["snippet"] == "Knead the DOUGH for ten minutes."
    assert results[1]["title"] == "How do I bake bread?"
    assert store.conversation_search(owner=user, query="secret") == []
    assert store.conversation_search(owner=user, query="   ") == []
    assert len(store.conversation_search(owner=user, query="dough", limit=1)) == 1


def test_search_ignores_the_streaming_placeholder(user: Any, clock: FakeClock) -> None:
    conversation = store.conversation_create(user=user, model="m")
    recorder = TurnFeed(store.message_send(user=user, conversation_id=conversation.pk, text="hi"))
    # the runner keeps a round's text in memory; a placeholder with text is never a result either
    Message.objects.filter(pk=recorder.message_id).update(content="zebra")
    assert store.conversation_search(owner=user, query="zebra") == []


# -- the page's search box (message_search; docs/store.md "Search") ----------------------------
def test_message_search_finds_own_messages_by_a_word_and_links_to_them(user: Any, other_user: Any,
                                                                       clock: FakeClock) -> None:
    trip = _exchange(user, clock, "Which trains go to Zermatt?", "The Glacier Express runs to ZERMATT daily.")
    _exchange(user, clock, "Something else", "Nothing about mountains.", title="Zermatt notes")
    _exchange(other_user, clock, "My Zermatt secret", "Keep it.")
    results = store.message_search(owner=user, query="zermatt")
    titles = [r for r in results if r["messageId"] is None]
    messages = [r for r in results if r["messageId"] is not None]
    assert [r["title"] for r in titles] == ["Zermatt notes"]
    assert results[: len(titles)] == titles                                        # title matches first
    ids = dict(Message.objects.filter(conversation=trip).values_list("role", "pk"))
    assert {(r["conversationId"], r["messageId"], r["role"]) for r in messages} == {
        (str(trip.pk), ids["user"], "user"), (str(trip.pk), ids["assistant"], "assistant")}
    assert all("secret" not in r["snippet"] and "Keep" not in r["snippet"] for r in results)
    assert "ZERMATT" in next(r["snippet"] for r in messages if r["role"] == "assistant")
    assert store.message_search(owner=other_user, query="glacier") == []
    assert store.message_search(owner=user, query="  ") == []
    assert len(store.message_search(owner=user, query="zermatt", limit=1)) == 2   # one of each kind


def test_message_search_refuses_a_long_query_and_ignores_placeholders(user: Any, clock: FakeClock) -> None:
    from jxai_app.core.errors import ProblemError

    with pytest.raises(ProblemError) as refused:
        store.message_search(owner=user, query="x" * 501)
    assert refused.value.problem["detail"] == "A search may be at most 500 characters."
    conversation = store.conversation_create(user=user, model="m")
    recorder = TurnFeed(store.message_send(user=user, conversation_id=conversation.pk, text="hi"))
    Message.objects.filter(pk=recorder.message_id).update(content="zebra")
    assert store.message_search(owner=user, query="zebra") == []


def test_the_match_is_full_text_on_postgresql_and_a_substring_elsewhere(user: Any, clock: FakeClock) -> None:
    from django.db import connection

    _exchange(user, clock, "Tips for baking bread", "Use a hot oven.")

    def found(query: str) -> bool:
        return bool(store.message_search(owner=user, query=query))

    with connection.cursor() as cursor:
        indexes = connection.introspection.get_constraints(cursor, Message._meta.db_table)
    if connection.vendor == "postgresql":
        assert found("bake") and found("BREADS") and found('"baking bread"') and not found("bak")
        assert indexes["jxai_msg_content_search"]["type"] == "gin"      # the full-text index (migration 0005)
    else:
        assert found("bak") and found("BREAD") and not found("bake")
        assert "jxai_msg_content_search" not in indexes


def test_an_answer_over_a_megabyte_is_saved_and_searched_by_its_beginning(user: Any, clock: FakeClock) -> None:
    """PostgreSQL refuses a tsvector over 1 MB: the full-text expression (and its index) reads
    the first SEARCH_PREFIX_CHARS characters, so such an answer saves, and a search reading it
    works (docs/store.md "Search")."""
    from django.db import connection

    from jxai_app.store.search import SEARCH_PREFIX_CHARS

    words = " ".join(f"w{i}" for i in range(300_000))  # 2.3 MB of distinct words
    assert len(words) > 2 * 1024 * 1024 and words.index("w5000 ") < SEARCH_PREFIX_CHARS
    _exchange(user, clock, "Say many words", f"early {words} lateword")
    assert Message.objects.get(role="assistant").content.endswith("lateword")
    assert [r["role"] for r in store.message_search(owner=user, query="early")] == ["assistant"]
    late = store.message_search(owner=user, query="lateword")
    assert late == [] if connection.vendor == "postgresql" else [r["role"] for r in late] == ["assistant"]
