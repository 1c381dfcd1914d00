"""Store services with the real database: ownership, bad input, one-turn rule, lifecycle."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from jxai_app import store
from jxai_app.core.errors import ProblemError
from jxai_app.models import ApiToken, Conversation, ConversationStatus, Message, MessageStatus, ToolCall
from tests.app.conftest import FakeClock, count_writes
from tests.app.store_support import TurnFeed

pytestmark = pytest.mark.django_db


def _start(user: Any, clock: FakeClock, text: str = "Hello", **create: Any) -> tuple[Conversation, store.TurnRecorder]:
    conversation = store.conversation_create(user=user, model=create.pop("model", "gpt-4o"), **create)
    turn = store.message_send(user=user, conversation_id=conversation.pk, text=text)
    return conversation, TurnFeed(turn)


def _snapshot(conversation: Conversation) -> list[tuple[Any, ...]]:
    rows = Message.objects.filter(conversation=conversation).order_by("position")
    calls = ToolCall.objects.filter(message__conversation=conversation).order_by("message__position", "position")
    return [tuple(rows.values_list("position", "role", "content", "status", "tool_call_id")),
            tuple(calls.values_list("call_id", "arguments", "result", "success"))]


def _problem_slug(excinfo: pytest.ExceptionInfo[ProblemError]) -> str:
    return excinfo.value.slug


# ---------------------------------------------------------------- ownership and unknown ids
def _services(user: Any, cid: Any) -> dict[str, Any]:
    return {
        "conversation_get": lambda: store.conversation_get(user=user, conversation_id=cid),
        "message_list": lambda: store.message_list(user=user, conversation_id=cid),
        "conversation_rename": lambda: store.conversation_rename(user=user, conversation_id=cid, title="x"),
        "conversation_delete": lambda: store.conversation_delete(user=user, conversation_id=cid),
        "message_send": lambda: store.message_send(user=user, conversation_id=cid, text="hi"),
        "turn_cancel": lambda: store.turn_cancel(user=user, conversation_id=cid),
        "message_resend": lambda: store.message_resend(user=user, conversation_id=cid),
    }


@pytest.mark.django_db(transaction=True)  # each call its own transaction, as in a worker: a refusal spoils no outer one
@pytest.mark.parametrize("service", list(_services(None, None)))
def test_foreign_conversation_answers_like_a_missing_one(service: str, user: Any, other_user: Any,
                                                         clock: FakeClock) -> None:
    conversation, _ = _start(user, clock, "secret plans")
    before = _snapshot(conversation)
    with pytest.raises(ProblemError) as foreign:
        _services(other_user, conversation.pk)[service]()
    with pytest.raises(ProblemError) as missing:
        _services(other_user, uuid.uuid4())[service]()
    assert foreign.value.slug == "not-found" and foreign.value.status == 404
    assert foreign.value.problem == missing.value.problem, "a foreign id must be indistinguishable"
    assert _snapshot(conversation) == before
    assert Conversation.objects.get(pk=conversation.pk).title == "secret plans"


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "", None, 42, "00000000-0000-0000-0000-00000000000g"])
def test_malformed_ids_are_not_found(bad_id: Any, user: Any) -> None:
    for name, service in _services(user, bad_id).items():
        if bad_id is None and name == "message_send":
            continue  # a send without an id starts a new conversation
        with pytest.raises(ProblemError) as excinfo:
            service()
        assert excinfo.value.slug == "not-found"


def test_anonymous_user_owns_nothing(user: Any, clock: FakeClock) -> None:
    from django.contrib.auth.models import AnonymousUser

    conversation, _ = _start(user, clock)
    with pytest.raises(ProblemError) as excinfo:
        store.conversation_get(user=AnonymousUser(), conversation_id=conversation.pk)
    assert excinfo.value.slug == "not-found"
    assert list(store.conversation_list(user=AnonymousUser())) == []
    with pytest.raises(ProblemError) as excinfo:
        store.conversation_create(user=AnonymousUser(), model="gpt-4o")
    assert excinfo.value.slug == "invalid-request"


def test_conversation_list_is_own_and_most_recent_first(user: Any, other_user: Any, clock: FakeClock) -> None:
    first = store.conversation_create(user=user, model="m")
    second = store.conversation_create(user=user, model="m")
    store.conversation_create(user=other_user, model="m")
    assert [c.pk for c in store.conversation_list(user=user)] == [second.pk, first.pk]
    store.conversation_rename(user=user, conversation_id=first.pk, title="Renamed")
    assert [c.pk for c in store.conversation_list(user=user)] == [first.pk, second.pk]


# ---------------------------------------------------------------- bad input
def test_send_refuses_blank_text(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="m")
    for text in ("", "   \n", None):
        with pytest.raises(ProblemError) as excinfo:
            store.message_send(user=user, conversation_id=conversation.pk, text=text)  # type: ignore[arg-type]
        assert excinfo.value.slug == "invalid-request"
    assert not Message.objects.filter(conversation=conversation).exists()
    assert Conversation.objects.get(pk=conversation.pk).status == ConversationStatus.IDLE


def test_rename_validates_and_trims(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="m")
    for title in ("", "   ", "x" * 201):
        with pytest.raises(ProblemError) as excinfo:
            store.conversation_rename(user=user, conversation_id=conversation.pk, title=title)
        assert excinfo.value.slug == "invalid-request"
    renamed = store.conversation_rename(user=user, conversation_id=conversation.pk, title="  Trip  ")
    assert renamed.title == "Trip"


@pytest.mark.django_db(transaction=True)  # each call its own transaction, as in a worker: a refusal spoils no outer one
def test_send_while_a_turn_runs_is_a_conflict(user: Any, clock: FakeClock) -> None:
    conversation, recorder = _start(user, clock, "first")
    with pytest.raises(ProblemError) as excinfo:
        store.message_send(user=user, conversation_id=conversation.pk, text="second")
    assert excinfo.value.slug == "conflict" and excinfo.value.status == 409
    with pytest.raises(ProblemError) as excinfo:
        store.message_resend(user=user, conversation_id=conversation.pk)
    assert excinfo.value.slug == "conflict"
    assert Message.objects.filter(conversation=conversation).count() == 2
    recorder.add_delta("done")
    assert recorder.finish_round(stop_reason="stop", last=True)
    store.message_send(user=user, conversation_id=conversation.pk, text="second")


def test_a_turn_that_ended_writes_nothing_more(user: Any, clock: FakeClock) -> None:
    conversation, recorder = _start(user, clock)
    recorder.add_delta("Final answer.")
    assert recorder.finish_round(stop_reason="stop", last=True)
    before = _snapshot(conversation)
    clock.advance(60)
    with count_writes() as writes:
        recorder.add_delta(" more")
        assert recorder.finish_round(stop_reason="stop") is True
        assert store.leases_renew([recorder.turn_id]) == set(), "an ended turn's lease is not renewed"
    assert writes.count == 0
    assert _snapshot(conversation) == before


def test_tool_result_for_an_unknown_call_id_is_refused_and_writes_nothing(user: Any, clock: FakeClock) -> None:
    conversation, recorder = _start(user, clock)
    recorder.tool_call_start("call_1", "get_weather")
    recorder.tool_call_delta("call_1", '{"city":"Oslo"}')
    assert recorder.finish_round(stop_reason="tool_calls")
    before = _snapshot(conversation)
    with count_writes() as writes:
        with pytest.raises(ProblemError) as excinfo:
            recorder.attach_tool_result(call_id="call_2", content='{"success":true}')
    assert excinfo.value.slug == "invalid-request" and "call_2" in excinfo.value.problem["detail"]
    assert writes.count == 0
    assert _snapshot(conversation) == before
    assert recorder.attach_tool_result(call_id="call_1", content='{"success":true,"data":1}') is not None
    with pytest.raises(ProblemError) as excinfo:
        recorder.attach_tool_result(call_id="call_1", content='{"success":true,"data":2}')
    assert "already has a result" in excinfo.value.problem["detail"]
    call = ToolCall.objects.get(message__conversation=conversation)
    assert call.arguments == '{"city":"Oslo"}' and call.result == {"success": True, "data": 1}
    assert Message.objects.filter(conversation=conversation, role="tool").count() == 1


def test_tool_result_never_crosses_the_turns_user_message(user: Any, clock: FakeClock) -> None:
    """A call id of an earlier turn is not answerable from a later turn (docs/store.md "Tool results")."""
    conversation, recorder = _start(user, clock, "turn one")
    recorder.tool_call_start("call_0", "add")
    assert recorder.finish_round(stop_reason="tool_calls", last=True)
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="turn two")
    second = TurnFeed(turn)
    with pytest.raises(ProblemError):
        second.attach_tool_result(call_id="call_0", content="{}")


@pytest.mark.parametrize(("content", "success"), [
    ('{"success":false,"error":"boom"}', False), ('{"success":true}', True), ("false", True),
    ("null", True), ("not json", True), ('{"success":"false"}', True),
])
def test_tool_result_success_follows_mc6(content: str, success: bool, user: Any, clock: FakeClock) -> None:
    _, recorder = _start(user, clock)
    recorder.tool_call_start("c", "t")
    recorder.finish_round(stop_reason="tool_calls")
    recorder.attach_tool_result(call_id="c", content=content)
    call = ToolCall.objects.get(call_id="c")
    assert call.success is success
    assert call.result == (content if content == "not json" else __import__("json").loads(content))


# ---------------------------------------------------------------- turn lost elsewhere
def test_stop_from_another_worker_makes_the_recorder_lost(user: Any, clock: FakeClock) -> None:
    conversation, recorder = _start(user, clock)
    recorder.add_delta("partial")
    assert store.turn_cancel(user=user, conversation_id=conversation.pk).turn_id == recorder.turn_id
    assert store.turn_cancel(user=user, conversation_id=conversation.pk) is None, "safe without a turn"
    assert store.leases_renew([recorder.turn_id]) == set()  # the worker's renewal finds it gone
    recorder.lose()
    with count_writes() as writes:
        assert recorder.finish_round(stop_reason="stop", last=True) is False
        assert recorder.begin_round() is False
        assert recorder.attach_tool_result(call_id="x", content="{}") is None
        assert recorder.fail("late") is False
    assert writes.count == 0
    conversation.refresh_from_db()
    assert conversation.status == "idle" and conversation.turn_id is None and conversation.last_error == ""
    assert list(Message.objects.filter(conversation=conversation).values_list("role", flat=True)) == ["user"]


def test_a_recorder_whose_turn_was_replaced_cannot_write(user: Any, clock: FakeClock) -> None:
    conversation, old = _start(user, clock, "first")
    old.add_delta("partial")
    assert old.finish_round(stop_reason="tool_calls")  # between rounds now
    store.turn_cancel(user=user, conversation_id=conversation.pk)
    store.message_send(user=user, conversation_id=conversation.pk, text="second")
    assert old.begin_round() is False and old.lost
    assert old.end_turn() is False
    conversation.refresh_from_db()
    assert conversation.status == ConversationStatus.STREAMING


def test_delete_during_a_turn_returns_the_turn_and_the_recorder_stops(user: Any, clock: FakeClock) -> None:
    conversation, recorder = _start(user, clock)
    assert store.conversation_delete(user=user, conversation_id=conversation.pk) == recorder.turn_id
    assert store.leases_renew([recorder.turn_id]) == set()  # the worker's renewal finds it gone
    recorder.lose()
    assert recorder.begin_round() is False and recorder.end_turn() is False
    assert not Message.objects.filter(conversation_id=conversation.pk).exists()


def test_the_lease_is_renewed_with_one_write(user: Any, clock: FakeClock) -> None:
    conversation, recorder = _start(user, clock)
    before = Conversation.objects.get(pk=conversation.pk).turn_heartbeat
    with count_writes() as writes:
        assert store.leases_renew([recorder.turn_id, uuid.uuid4()]) == {recorder.turn_id}
    assert writes.count == 1
    assert Conversation.objects.get(pk=conversation.pk).turn_heartbeat > before


def test_retry_on_an_empty_conversation_is_a_no_op(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="m", system_prompt="Be brief.")
    assert store.message_resend(user=user, conversation_id=conversation.pk) is None
    assert list(Message.objects.filter(conversation=conversation).values_list("role", flat=True)) == ["system"]


def test_send_switches_model_and_keeps_title(user: Any, clock: FakeClock) -> None:
    conversation = store.conversation_create(user=user, model="gpt-4o", title="My title")
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="hello", model="claude")
    conversation.refresh_from_db()
    assert (conversation.title, conversation.model, turn.model) == ("My title", "claude", "claude")
    assert Message.objects.get(pk=turn.assistant_message_id).status == MessageStatus.STREAMING


def test_long_first_message_gives_a_short_title(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="m")
    store.message_send(user=user, conversation_id=conversation.pk, text="\n  " + "word " * 40)
    conversation.refresh_from_db()
    assert len(conversation.title) == 60 and conversation.title.endswith("…")


def test_api_token_stores_only_a_hash(user: Any) -> None:
    token, plaintext = ApiToken.issue(user=user, name="ci")
    assert plaintext.startswith("jxai_") and len(plaintext) > 40
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.secret_hash == ApiToken.hash_secret(plaintext) != plaintext
    assert plaintext.startswith(stored.prefix) and plaintext not in str(stored.__dict__)
    assert stored.is_active


@pytest.mark.django_db(transaction=True)  # each call its own transaction, as in a worker: a refusal spoils no outer one
def test_a_failed_round_write_still_lets_fail_drop_the_placeholder(user: Any, clock: FakeClock) -> None:
    from django.db import OperationalError, connection

    conversation, recorder = _start(user, clock)
    recorder.add_delta("partial")

    def refuse_message_updates(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip().upper().startswith("UPDATE") and "jxai_app_message" in sql:
            raise OperationalError("disk I/O error")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(refuse_message_updates):
        with pytest.raises(OperationalError):
            recorder.finish_round(stop_reason="stop")
    assert recorder.fail("Saving the answer failed.", None)
    conversation.refresh_from_db()
    assert (conversation.status, conversation.last_error) == ("error", "Saving the answer failed.")
    assert list(Message.objects.filter(conversation=conversation).values_list("role", "status")) == [
        ("user", "complete")]


def _plain_turn_writes(user: Any, deltas: int) -> int:
    conversation = store.conversation_create(user=user, model="gpt-4o")
    with count_writes() as writes:
        turn = store.message_send(user=user, conversation_id=conversation.pk, text="Hi")
        feed = TurnFeed(turn)
        for _ in range(deltas):
            feed.add_delta("tok ")
        assert feed.finish_round(stop_reason="stop", usage={"inputTokens": 5, "outputTokens": deltas}, last=True)
    assert Message.objects.get(pk=turn.assistant_message_id).content == "tok " * deltas
    return writes.count


def test_a_turn_s_writes_do_not_depend_on_how_it_streamed(user: Any) -> None:
    """Nothing is written per delta: a plain answer is the send (claim, one INSERT each of the
    user message and the placeholder, its child; the rate limit's admission, the quota
    reservation), the round's end (the message, the ledger, the reservation settled) and the
    turn's end (the reservation deleted), however many deltas it streamed (docs/store.md)."""
    _plain_turn_writes(user, 1)  # the day's first ledger write inserts its row
    one, many = _plain_turn_writes(user, 1), _plain_turn_writes(user, 2000)
    assert one == many <= 11, (one, many)


def test_a_send_to_a_foreign_conversation_reads_nothing_of_it(user: Any, other_user: Any, clock: FakeClock) -> None:
    """Ownership is decided first, by one lookup of id and owner together: a send to someone
    else's conversation reads none of its messages, so its size cannot show in the timing
    (docs/store.md "Ownership")."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    conversation, recorder = _start(user, clock, "secret plans")
    recorder.add_delta("x" * 100_000)
    assert recorder.finish_round(stop_reason="stop", last=True)
    with CaptureQueriesContext(connection) as queries, pytest.raises(ProblemError):
        store.message_send(user=other_user, conversation_id=conversation.pk, text="let me in")
    statements = [q["sql"] for q in queries.captured_queries
                  if not q["sql"].startswith(("BEGIN", "ROLLBACK", "SAVEPOINT", "RELEASE"))]
    assert len(statements) == 1 and "jxai_app_message" not in statements[0], statements
