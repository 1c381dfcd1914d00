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
