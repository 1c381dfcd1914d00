"""The send path's hand-written statements (jxai_app.store.sql) against the real database:
what ``turn_open`` returns without reading again is what the database holds, and equals what
the ORM services read; ``lock_owned`` is ``get_owned``; the one-turn rule still holds."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import transaction

from jxai_app import store
from jxai_app.core.errors import ProblemError
from jxai_app.models import Conversation, ConversationStatus, Message
from jxai_app.store.serializers import conversation_dict, message_dict
from jxai_app.store.common import get_owned, lock_owned
from tests.app.conftest import FakeClock

pytestmark = pytest.mark.django_db


def _finished_tool_turn(user: Any, clock: FakeClock) -> Conversation:
    """A conversation with a system prompt and one finished turn: reasoning, a tool call
    with its reply, then the answer."""
    conversation = store.conversation_create(user=user, model="gpt-4o", system_prompt="Be brief.")
    recorder = store.TurnRecorder(store.message_send(user=user, conversation_id=conversation.pk, text="Add 2 and 3"),
                                  clock=clock)
    recorder.add_reasoning("use the tool")
    recorder.tool_call_start("call_1", "add")
    recorder.tool_call_delta("call_1", '{"a":2,"b":3}')
    assert recorder.finish_round(stop_reason="tool_calls")
    assert recorder.attach_tool_result(call_id="call_1", content='{"success":true,"result":5}') is not None
    assert recorder.begin_round()
    recorder.add_delta("It is 5.")
    assert recorder.finish_round(stop_reason="stop", last=True)
    return conversation


def test_turn_open_returns_what_the_database_holds(user: Any, clock: FakeClock) -> None:
    conversation = _finished_tool_turn(user, clock)
    earlier = store.to_messages(conversation)  # the ORM's wire history before the send
    with transaction.atomic():
        opened = store.turn_open(conversation=lock_owned(user, conversation.pk), text="And 4 and 4?")

    assert opened.history == [*earlier, {"role": "user", "content": "And 4 and 4?"}]
    assert opened.history == store.to_messages(conversation)  # read again: the placeholder is left out
    assert [m["role"] for m in opened.history] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert opened.history[2]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a":2,"b":3}'}
    assert opened.history[2]["reasoning_content"] == "use the tool"

    saved = Conversation.objects.get(pk=conversation.pk)
    assert conversation_dict(opened.conversation) == conversation_dict(saved)
    assert (opened.conversation.turn_id, opened.conversation.turn_heartbeat) == (saved.turn_id, saved.turn_heartbeat)
    assert saved.status == ConversationStatus.STREAMING and saved.turn_id == opened.turn.turn_id
    assert message_dict(opened.user_message) == message_dict(Message.objects.get(pk=opened.turn.user_message_id))
    positions = list(Message.objects.filter(conversation=conversation).order_by("position")
                     .values_list("position", "role", "status"))
    assert positions[-2:] == [(5, "user", "complete"), (6, "assistant", "streaming")]
    assert [p for p, _, _ in positions] == list(range(7))


def test_turn_open_titles_only_an_untitled_conversation_and_switches_model(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="gpt-4o")
    with transaction.atomic():
        opened = store.turn_open(conversation=lock_owned(user, conversation.pk), text="\n  First line\nsecond",
                                 model="other")
    saved = Conversation.objects.get(pk=conversation.pk)
    assert (saved.title, saved.model) == ("First line", "other") == (opened.conversation.title, opened.conversation.model)
    assert Message.objects.get(pk=opened.turn.assistant_message_id).model == "other" == opened.turn.model
    store.turn_cancel(user=user, conversation_id=conversation.pk)
    with transaction.atomic():
        again = store.turn_open(conversation=lock_owned(user, conversation.pk), text="Another")
    assert Conversation.objects.get(pk=conversation.pk).title == "First line" == again.conversation.title


def test_a_second_open_is_a_conflict_and_saves_nothing(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="gpt-4o")
    store.message_send(user=user, conversation_id=conversation.pk, text="one")
    before = list(Message.objects.filter(conversation=conversation).values_list("pk", flat=True))
    with pytest.raises(ProblemError) as caught, transaction.atomic():
        store.turn_open(conversation=lock_owned(user, conversation.pk), text="two")
    assert caught.value.slug == "conflict"
    assert list(Message.objects.filter(conversation=conversation).values_list("pk", flat=True)) == before
    # A stale row read before another send claimed it is refused by the UPDATE itself.
    stale = Conversation.objects.get(pk=conversation.pk)
    stale.status = ConversationStatus.IDLE
    with pytest.raises(ProblemError) as raced, transaction.atomic():
        store.turn_open(conversation=stale, text="three")
    assert raced.value.slug == "conflict"


def test_lock_owned_reads_what_get_owned_reads(user: Any, other_user: Any) -> None:
    conversation = store.conversation_create(user=user, model="gpt-4o", title="Plans")
    problem = {"type": "https://jxai.dev/problems/upstream-failure", "status": 502, "detail": "down ü"}
    Conversation.objects.filter(pk=conversation.pk).update(  # every converted type: JSON, UUID, datetime, bool
        status=ConversationStatus.ERROR, last_error="down", last_problem=problem, turn_id=uuid.uuid4(),
        turn_heartbeat=conversation.created_at, context_warning=True, token_count=7)
    with transaction.atomic():
        locked = lock_owned(user, str(conversation.pk))
    plain = get_owned(user, conversation.pk)
    assert conversation_dict(locked) == conversation_dict(plain) and locked.owner_id == user.pk
    for field in Conversation._meta.concrete_fields:
        assert getattr(locked, field.attname) == getattr(plain, field.attname), field.name
    assert locked.last_problem == problem and locked.context_warning is True
    for who, cid in [(other_user, conversation.pk), (user, uuid.uuid4()), (user, "not-an-id"), (None, conversation.pk)]:
        with pytest.raises(ProblemError) as caught:
            lock_owned(who, cid)
        assert caught.value.slug == "not-found"


def test_turn_open_sends_its_writes_and_the_caller_s_in_one_round_trip_on_postgresql(user: Any) -> None:
    """The claim, the two messages' INSERT and the caller's own writes (here the rate limit's
    admission) go to PostgreSQL as one query; elsewhere one statement at a time. Either way
    they all land, in the send's transaction."""
    from django.db import connection

    from jxai_app.policy import ratelimit
    from jxai_app.models import TurnAdmission

    conversation = store.conversation_create(user=user, model="gpt-4o")
    admission = ratelimit.Admission(user_pk=user.pk, now=ratelimit.now(), counted=True, prune=False)
    sent: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with transaction.atomic():
        locked = lock_owned(user, conversation.pk)
        with connection.execute_wrapper(record):
            opened = store.turn_open(conversation=locked, text="Hi", history=store.History(messages=[], calls={}),
                                     also=admission.take_queries())

    statements = [part.split(None, 1)[0].upper() for text in sent for part in text.split(";\n")]
    assert statements == ["UPDATE", "INSERT", "INSERT"]
    assert len(sent) == (1 if connection.vendor == "postgresql" else 3)
    assert TurnAdmission.objects.filter(user=user).count() == 1
    saved = Conversation.objects.get(pk=conversation.pk)
    assert saved.status == ConversationStatus.STREAMING and saved.turn_id == opened.turn.turn_id
    assert list(Message.objects.filter(conversation=conversation).order_by("position")
                .values_list("pk", "role")) == [(opened.turn.user_message_id, "user"),
                                                (opened.turn.assistant_message_id, "assistant")]


def test_a_lost_claim_rolls_back_the_caller_s_writes_too(user: Any) -> None:
    """When the claim changes no row (another send won), the messages and the admission sent
    with it are rolled back with the refusal."""
    from jxai_app.policy import ratelimit
    from jxai_app.models import TurnAdmission

    conversation = store.conversation_create(user=user, model="gpt-4o")
    admission = ratelimit.Admission(user_pk=user.pk, now=ratelimit.now(), counted=True, prune=False)
    with pytest.raises(ProblemError) as refused:
        with transaction.atomic():
            locked = lock_owned(user, conversation.pk)
            Conversation.objects.filter(pk=conversation.pk).update(status=ConversationStatus.STREAMING)
            store.turn_open(conversation=locked, text="Hi", history=store.History(messages=[], calls={}),
                            also=admission.take_queries())
    assert refused.value.problem["type"].endswith("conflict")
    assert TurnAdmission.objects.filter(user=user).count() == 0
    assert Message.objects.filter(conversation=conversation).count() == 0
