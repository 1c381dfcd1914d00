"""Concurrent turns on the real database (docs/store.md "One turn per conversation"): twenty turns
at once finish with no "database is locked", and two simultaneous sends to one conversation
give exactly one turn and one ``conflict``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from jxai_app import store
from jxai_app.core.errors import ProblemError
from jxai_app.models import Conversation, Message, ToolCall
from tests.app.store_support import TurnFeed

pytestmark = pytest.mark.django_db(transaction=True)


def _in_threads(count: int, work: Callable[[int], Any]) -> tuple[list[Any], list[BaseException]]:
    """Run ``work(i)`` in ``count`` threads released together; each closes its connection."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return results, errors


def _full_turn(user: Any, conversation_id: Any, i: int) -> str:
    """A two-round turn with lease renewals every few deltas, reads in between."""
    turn = store.message_send(user=user, conversation_id=conversation_id, text=f"question {i}")
    recorder = TurnFeed(turn)
    for n in range(30):
        recorder.add_delta(f"{n} ")
        if n % 3 == 0:
            assert store.leases_renew([recorder.turn_id])
    recorder.tool_call_start(f"call_{i}", "lookup")
    recorder.tool_call_delta(f"call_{i}", '{"q":1}')
    assert recorder.finish_round(stop_reason="tool_calls", usage={"inputTokens": 10, "outputTokens": 5})
    assert recorder.attach_tool_result(call_id=f"call_{i}", content='{"success":true}')
    store.to_messages(store.conversation_get(user=user, conversation_id=conversation_id))
    assert recorder.begin_round()
    for n in range(30):
        recorder.add_delta("y")
        if n % 3 == 0:
            assert store.leases_renew([recorder.turn_id])
    assert recorder.finish_round(stop_reason="stop", usage={"inputTokens": 20, "outputTokens": 5}, last=True)
    list(store.conversation_list(user=user)[:20])
    return "ok"


def test_twenty_concurrent_turns_finish_without_database_locked(user: Any) -> None:
    conversations = [store.conversation_create(user=user, model="m") for _ in range(20)]
    results, errors = _in_threads(20, lambda i: _full_turn(user, conversations[i].pk, i))
    assert errors == [], [repr(e) for e in errors]
    assert results == ["ok"] * 20
    for i, conversation in enumerate(conversations):
        conversation.refresh_from_db()
        assert (conversation.status, conversation.token_count) == ("idle", 25)
        assert list(Message.objects.filter(conversation=conversation).order_by("position")
                    .values_list("role", flat=True)) == ["user", "assistant", "tool", "assistant"]
    assert ToolCall.objects.filter(success=True).count() == 20


def _started(start: Callable[[], Any]) -> Any:
    """What ``start()`` returned, or the slug of the problem it raised."""
    try:
        return start()
    except ProblemError as exc:
        return exc.slug


def test_two_simultaneous_sends_to_one_conversation_give_one_turn(user: Any) -> None:
    for attempt in range(5):
        conversation = store.conversation_create(user=user, model="m")

        def send(i: int, cid: Any = conversation.pk) -> Any:
            return _started(lambda: store.message_send(user=user, conversation_id=cid, text=f"tab {i}"))

        results, errors = _in_threads(2, send)
        assert errors == []
        winners = [r for r in results if isinstance(r, store.TurnStart)]
        assert len(winners) == 1 and results.count("conflict") == 1, (attempt, results)
        assert Message.objects.filter(conversation=conversation).count() == 2
        assert Conversation.objects.get(pk=conversation.pk).turn_id == winners[0].turn_id


def test_a_send_an_edit_and_a_regenerate_at_once_give_one_turn(user: Any) -> None:
    """One turn per conversation across branches (docs/store.md "Branches"): three tabs
    starting turns on three branches of one conversation at the same moment."""
    for attempt in range(3):
        conversation = store.conversation_create(user=user, model="m")
        first = store.message_send(user=user, conversation_id=conversation.pk, text="Q1")
        feed = TurnFeed(first)
        feed.add_delta("A1")
        assert feed.finish_round(stop_reason="stop", last=True)
        starts = [
            lambda: store.message_send(user=user, conversation_id=conversation.pk, text="Q2"),
            lambda: store.message_send(user=user, conversation_id=conversation.pk, text="Q1'",
                                       replaces=first.user_message.pk),
            lambda: store.answer_regenerate(user=user, conversation_id=conversation.pk,
                                            message_id=first.assistant_message_id),
        ]
        results, errors = _in_threads(3, lambda i: _started(starts[i]))
        assert errors == []
        winners = [r for r in results if isinstance(r, store.TurnStart)]
        assert len(winners) == 1 and results.count("conflict") == 2, (attempt, results)
        saved = Conversation.objects.get(pk=conversation.pk)
        assert (saved.turn_id, saved.active_leaf_id) == (winners[0].turn_id, winners[0].assistant_message_id)
        asked = winners[0].user_message.pk != first.user_message.pk  # a send or an edit (not a regenerate)
        assert Message.objects.filter(conversation=conversation).count() == 3 + asked, "the losers saved nothing"
