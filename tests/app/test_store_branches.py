"""Branches in the store, with the real database (docs/store.md "Branches"): the tree rules,
the active path in ``to_messages()`` and the page's transcript, one turn per conversation
across branches, and what Stop, errors and Retry do on a branch."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jxai_app import store
from jxai_app.core.errors import ProblemError
from jxai_app.models import Conversation, ConversationStatus, Message
from tests.app.store_support import TurnFeed

pytestmark = pytest.mark.django_db


def _answer(turn: store.TurnStart, text: str) -> TurnFeed:
    feed = TurnFeed(turn)
    feed.add_delta(text)
    assert feed.finish_round(stop_reason="stop", last=True)
    return feed


def _exchange(user: Any, cid: Any, question: str, answer: str) -> store.TurnStart:
    turn = store.message_send(user=user, conversation_id=cid, text=question)
    _answer(turn, answer)
    return turn


def _path(user: Any, cid: Any) -> list[tuple[str, str]]:
    _, path = store.message_list(user=user, conversation_id=cid)
    return [(m.role, m.content) for m in path.messages]


def _branch(user: Any, cid: Any, pk: int) -> tuple[int, int]:
    _, path = store.message_list(user=user, conversation_id=cid)
    siblings = path.siblings[pk]
    return siblings.index + 1, siblings.count


@pytest.fixture
def chat(user: Any) -> tuple[Any, store.TurnStart, store.TurnStart]:
    """``Q1 → A1 → Q2 → A2``: the conversation id and both turns."""
    conversation = store.conversation_create(user=user, model="gpt-4o", system_prompt="Be brief.")
    first = _exchange(user, conversation.pk, "Q1", "A1")
    second = _exchange(user, conversation.pk, "Q2", "A2")
    return conversation.pk, first, second


def test_an_edit_is_a_sibling_branch_and_the_old_one_stays(user: Any, chat: Any) -> None:
    cid, first, second = chat
    before = list(Message.objects.filter(conversation_id=cid).order_by("position").values_list("pk", "content"))
    edit = store.message_send(user=user, conversation_id=cid, text="Q1 edited", replaces=first.user_message.pk)
    assert edit.user_message.parent_id == first.user_message.parent_id  # the system prompt
    assert edit.history == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q1 edited"}]
    assert (edit.user_siblings.index, edit.user_siblings.count, edit.user_siblings.prev) == (1, 2, first.user_message.pk)
    _answer(edit, "A1'")
    assert _path(user, cid) == [("system", "Be brief."), ("user", "Q1 edited"), ("assistant", "A1'")]
    assert _branch(user, cid, edit.user_message.pk) == (2, 2)
    kept = Message.objects.filter(pk__in=[pk for pk, _ in before]).order_by("position")
    assert list(kept.values_list("pk", "content")) == before, "the old branch is untouched"

    # switching back shows the old branch down to its newest message, and a send appends there
    store.branch_switch(user=user, conversation_id=cid, message_id=first.user_message.pk)
    assert [c for _, c in _path(user, cid)] == ["Be brief.", "Q1", "A1", "Q2", "A2"]
    assert _branch(user, cid, first.user_message.pk) == (1, 2)
    third = store.message_send(user=user, conversation_id=cid, text="Q3")
    assert third.user_message.parent_id == second.assistant_message_id
    assert [m["content"] for m in third.history] == ["Be brief.", "Q1", "A1", "Q2", "A2", "Q3"]


def test_to_messages_and_the_export_give_the_active_path_only(user: Any, chat: Any) -> None:
    cid, first, _ = chat
    _answer(store.message_send(user=user, conversation_id=cid, text="other", replaces=first.user_message.pk), "B")
    conversation = Conversation.objects.get(pk=cid)
    wire = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "other"},
            {"role": "assistant", "content": "B"}]
    assert store.to_messages(conversation) == wire
    assert store.conversations_export([conversation])[0]["messages"] == wire


def test_a_regenerate_is_a_sibling_answer_with_the_chosen_model(user: Any, chat: Any) -> None:
    cid, _, second = chat
    again = store.answer_regenerate(user=user, conversation_id=cid, message_id=second.assistant_message_id,
                                    model="gpt-4o-mini")
    assert again.user_message.pk == second.user_message.pk
    assert [m["content"] for m in again.history] == ["Be brief.", "Q1", "A1", "Q2"]
    placeholder = Message.objects.get(pk=again.assistant_message_id)
    assert placeholder.parent_id == second.user_message.pk and placeholder.model == "gpt-4o-mini"
    _answer(again, "A2 again")
    assert [c for _, c in _path(user, cid)][-2:] == ["Q2", "A2 again"]
    assert _branch(user, cid, again.assistant_message_id) == (2, 2)
    store.branch_switch(user=user, conversation_id=cid, message_id=second.assistant_message_id)
    assert [c for _, c in _path(user, cid)][-2:] == ["Q2", "A2"]


@pytest.mark.django_db(transaction=True)  # each call its own transaction, as in a worker: a refusal spoils no outer one
def test_only_a_user_message_is_edited_and_only_an_answer_regenerated(user: Any, other_user: Any,
                                                                     chat: Any) -> None:
    cid, first, _ = chat
    with pytest.raises(ProblemError) as wrong:
        store.message_send(user=user, conversation_id=cid, text="x", replaces=first.assistant_message_id)
    assert wrong.value.slug == "invalid-request"
    with pytest.raises(ProblemError) as wrong:
        store.answer_regenerate(user=user, conversation_id=cid, message_id=first.user_message.pk)
    assert wrong.value.slug == "invalid-request"
    elsewhere = store.conversation_create(user=user, model="gpt-4o")
    for call in (lambda: store.message_send(user=user, conversation_id=elsewhere.pk, text="x",
                                            replaces=first.user_message.pk),
                 lambda: store.branch_switch(user=user, conversation_id=elsewhere.pk,
                                             message_id=first.user_message.pk),
                 lambda: store.answer_regenerate(user=other_user, conversation_id=cid,
                                                 message_id=first.assistant_message_id)):
        with pytest.raises(ProblemError) as missing:
            call()
        assert missing.value.slug == "not-found"
    assert Message.objects.filter(conversation_id=cid).count() == 5, "a refusal saves nothing"


@pytest.mark.django_db(transaction=True)  # each call its own transaction, as in a worker: a refusal spoils no outer one
def test_one_turn_per_conversation_across_branches(user: Any, chat: Any) -> None:
    cid, first, second = chat
    running = store.message_send(user=user, conversation_id=cid, text="old branch", replaces=first.user_message.pk)
    attempts = {
        "send": lambda: store.message_send(user=user, conversation_id=cid, text="x"),
        "edit": lambda: store.message_send(user=user, conversation_id=cid, text="x", replaces=second.user_message.pk),
        "regenerate": lambda: store.answer_regenerate(user=user, conversation_id=cid,
                                                      message_id=second.assistant_message_id),
        "switch": lambda: store.branch_switch(user=user, conversation_id=cid, message_id=first.user_message.pk),
        "retry": lambda: store.message_resend(user=user, conversation_id=cid),
    }
    count = Message.objects.filter(conversation_id=cid).count()
    for name, attempt in attempts.items():
        with pytest.raises(ProblemError) as refused:
            attempt()
        assert refused.value.slug == "conflict", name
    assert Message.objects.filter(conversation_id=cid).count() == count
    assert Conversation.objects.get(pk=cid).active_leaf_id == running.assistant_message_id


def test_a_tool_round_on_a_branch_chains_and_never_answers_another_branchs_call(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="gpt-4o")
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="add")
    feed = TurnFeed(turn)
    feed.tool_call_start("call_0", "add")
    feed.tool_call_end("call_0")
    assert feed.finish_round(stop_reason="tool_calls")
    reply = feed.attach_tool_result(call_id="call_0", content='{"success":true,"data":3}')
    assert feed.begin_round()
    feed.add_delta("3")
    assert feed.finish_round(stop_reason="stop", last=True)
    chain = [turn.user_message.pk, turn.assistant_message_id, reply.pk, feed.message_id]
    rows = dict(Message.objects.filter(pk__in=chain).values_list("pk", "parent_id"))
    assert [rows[pk] for pk in chain] == [None, *chain[:-1]]
    assert Conversation.objects.get(pk=conversation.pk).active_leaf_id == chain[-1]

    again = TurnFeed(store.answer_regenerate(user=user, conversation_id=conversation.pk,
                                             message_id=turn.assistant_message_id))
    with pytest.raises(ProblemError):
        again.attach_tool_result(call_id="call_0", content="{}")  # the other branch's call


def test_stop_of_a_regenerate_drops_it_and_shows_the_previous_answer(user: Any, chat: Any) -> None:
    cid, _, second = chat
    feed = TurnFeed(store.answer_regenerate(user=user, conversation_id=cid, message_id=second.assistant_message_id))
    feed.add_delta("partial")
    assert feed.cancel() and feed.stopped_question is None
    assert [c for _, c in _path(user, cid)][-2:] == ["Q2", "A2"]
    assert not Message.objects.get(pk=second.user_message.pk).stopped, "the question has its answer"
    assert not Message.objects.filter(content="partial").exists()


def test_stop_with_nothing_saved_marks_the_question_and_the_path_ends_there(user: Any, chat: Any) -> None:
    cid, _, _ = chat
    turn = store.message_send(user=user, conversation_id=cid, text="Q3")
    feed = TurnFeed(turn)
    feed.add_delta("partial")
    assert feed.cancel()
    question = Message.objects.get(pk=turn.user_message.pk)
    assert feed.stopped_question == question.pk
    assert question.stopped and Conversation.objects.get(pk=cid).active_leaf_id == question.pk
    assert _path(user, cid)[-1] == ("user", "Q3")
    later = store.message_send(user=user, conversation_id=cid, text="Q4")
    assert later.user_message.parent_id == question.pk
    assert [m["content"] for m in later.history][-2:] == ["Q3", "Q4"], "the mark never reaches the wire"


def test_stop_from_the_database_marks_the_question_too(user: Any, chat: Any) -> None:
    cid, _, _ = chat
    turn = store.message_send(user=user, conversation_id=cid, text="Q3")
    assert store.turn_cancel(user=user, conversation_id=cid).turn_id == turn.turn_id
    assert Message.objects.get(pk=turn.user_message.pk).stopped
    assert Conversation.objects.get(pk=cid).active_leaf_id == turn.user_message.pk


def test_an_error_on_a_branch_drops_the_partial_and_retry_resends_there(user: Any, chat: Any) -> None:
    cid, first, _ = chat
    edit = store.message_send(user=user, conversation_id=cid, text="Q1 edited", replaces=first.user_message.pk)
    feed = TurnFeed(edit)
    feed.add_delta("partial")
    assert feed.fail("boom", None)
    assert _path(user, cid)[-1] == ("user", "Q1 edited")
    resent = store.message_resend(user=user, conversation_id=cid)
    assert not Message.objects.filter(pk=edit.user_message.pk).exists()
    assert resent.user_message.content == "Q1 edited"
    assert resent.user_message.parent_id == first.user_message.parent_id
    assert (resent.user_siblings.index, resent.user_siblings.count) == (1, 2)


def test_retry_after_a_failed_regenerate_keeps_the_other_answers(user: Any, chat: Any) -> None:
    cid, _, second = chat
    feed = TurnFeed(store.answer_regenerate(user=user, conversation_id=cid, message_id=second.assistant_message_id))
    assert feed.fail("boom", None)
    assert _path(user, cid)[-1] == ("user", "Q2")
    resent = store.message_resend(user=user, conversation_id=cid)
    assert Message.objects.filter(pk__in=[second.user_message.pk, second.assistant_message_id]).count() == 2
    assert resent.user_message.content == "Q2"
    assert resent.user_message.parent_id == second.user_message.parent_id
    assert (resent.user_siblings.index, resent.user_siblings.count) == (1, 2)


def test_reading_the_active_path_costs_the_same_whatever_its_length(user: Any) -> None:
    def queries(exchanges: int) -> int:
        conversation = store.conversation_create(user=user, model="gpt-4o")
        for n in range(exchanges):
            turn = _exchange(user, conversation.pk, f"Q{n}", f"A{n}")
        store.answer_regenerate(user=user, conversation_id=conversation.pk, message_id=turn.assistant_message_id)
        with CaptureQueriesContext(connection) as captured:
            _, path = store.message_list(user=user, conversation_id=conversation.pk)
        assert len(path.messages) == 2 * exchanges  # the last answer is the regenerate's placeholder
        return len(captured)

    assert queries(2) == queries(8) == 5  # the conversation, the tree's shape, the path's rows, their calls, their attachments


def test_switching_clears_the_error_and_keeps_updated_at(user: Any, chat: Any) -> None:
    cid, first, _ = chat
    feed = TurnFeed(store.message_send(user=user, conversation_id=cid, text="Q3"))
    assert feed.fail("boom", None)
    before = Conversation.objects.get(pk=cid).updated_at
    switched = store.branch_switch(user=user, conversation_id=cid, message_id=first.assistant_message_id)
    assert (switched.status, switched.last_error, switched.updated_at) == (ConversationStatus.IDLE, "", before)
    assert _path(user, cid)[-1] == ("user", "Q3"), "the newest path below A1"


def test_admin_s_transcript_shows_the_active_path(user: Any, django_user_model: Any) -> None:
    from django.test import Client
    from django.urls import reverse

    conversation = store.conversation_create(user=user, model="gpt-4o")
    first = _exchange(user, conversation.pk, "first-question", "first-answer")
    _exchange(user, conversation.pk, "OLD-BRANCH-QUESTION", "OLD-BRANCH-ANSWER")
    _answer(store.message_send(user=user, conversation_id=conversation.pk, text="EDITED-QUESTION",
                               replaces=first.user_message.pk), "EDITED-ANSWER")
    staff = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(staff)
    body = client.get(reverse("admin:jxai_app_conversation_transcript", args=[conversation.pk])).content.decode()
    assert "EDITED-QUESTION" in body and "EDITED-ANSWER" in body
    assert "OLD-BRANCH" not in body and "first-answer" not in body, "another branch is not the transcript"
