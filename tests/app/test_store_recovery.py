"""Recovery of turns whose worker died (docs/turns.md "Leases"): the lease rule, the
management command, a send taking over a lapsed turn, and a real process killed mid-turn."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from jxai_app import store
from jxai_app.core.errors import ProblemError
from jxai_app.models import Conversation, Message, MessageStatus
from tests.app.conftest import FakeClock
from tests.support.database import database_url
from tests.app.store_support import TurnFeed

ROOT = Path(__file__).resolve().parents[2]


def _completed_exchange(user: Any, clock: FakeClock) -> Conversation:
    conversation = store.conversation_create(user=user, model="gpt-4o")
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="Hi")
    recorder = TurnFeed(turn)
    recorder.add_delta("Hello!")
    assert recorder.finish_round(stop_reason="stop", usage={"inputTokens": 3, "outputTokens": 2}, last=True)
    return conversation


def _age(conversation: Conversation, seconds: float) -> None:
    """Make the turn's lease ``seconds`` old (a dead worker)."""
    past = timezone.now() - timedelta(seconds=seconds)
    Conversation.objects.filter(pk=conversation.pk).update(turn_heartbeat=past)


def _rows(conversation: Conversation) -> list[tuple[Any, ...]]:
    return list(Message.objects.filter(conversation=conversation).order_by("position")
                .values_list("role", "content", "status"))


def _run_command(*args: str) -> str:
    out = io.StringIO()
    call_command("recover_partial_messages", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_command_drops_a_dead_turns_partial_and_keeps_completed_messages(user: Any, clock: FakeClock) -> None:
    conversation = _completed_exchange(user, clock)
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="Tell me more")
    recorder = TurnFeed(turn)
    recorder.add_delta("It was a dark")
    recorder.tool_call_start("c", "f")
    assert recorder.finish_round(stop_reason="tool_calls")
    recorder.attach_tool_result(call_id="c", content='{"success":true}')
    assert recorder.begin_round()
    recorder.add_delta("and stormy")
    live = store.conversation_create(user=user, model="gpt-4o")
    store.message_send(user=user, conversation_id=live.pk, text="still running")

    _age(conversation, 7)
    assert _run_command() == "recovered 1 conversation\n"

    conversation.refresh_from_db()
    assert (conversation.status, conversation.turn_id) == ("error", None)
    assert conversation.last_problem["code"] == "turn_interrupted" and "interrupted" in conversation.last_error
    assert _rows(conversation) == [
        ("user", "Hi", "complete"), ("assistant", "Hello!", "complete"),
        ("user", "Tell me more", "complete"), ("assistant", "It was a dark", "complete"),
        ("tool", '{"success":true}', "complete"),
    ]
    assert conversation.token_count == 5, "the last completed turn's count stays"
    assert Conversation.objects.get(pk=live.pk).status == "streaming", "a live turn is left alone"
    assert store.leases_renew([recorder.turn_id]) == set(), "the dead turn's worker finds its turn gone"
    recorder.lose()
    assert recorder.end_turn() is False
    assert Conversation.objects.get(pk=conversation.pk).status == "error"


@pytest.mark.django_db
def test_command_all_ends_every_streaming_turn(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="m")
    store.message_send(user=user, conversation_id=conversation.pk, text="x")
    assert _run_command() == "recovered 0 conversations\n"
    assert _run_command("--all") == "recovered 1 conversation\n"
    assert _rows(conversation) == [("user", "x", "complete")]
    with pytest.raises(CommandError):
        _run_command("--stale-after", "-1")


@pytest.mark.django_db
def test_a_turn_that_renews_its_lease_is_never_taken(user: Any, clock: FakeClock) -> None:
    """During a long tool run nothing streams; the lease renewals keep the turn."""
    conversation = store.conversation_create(user=user, model="m")
    recorder = TurnFeed(store.message_send(user=user, conversation_id=conversation.pk, text="x"))
    recorder.tool_call_start("slow", "long_job")
    assert recorder.finish_round(stop_reason="tool_calls")
    _age(conversation, 5)
    assert store.turns_lapsed(lease=6) == []
    assert store.leases_renew([recorder.turn_id]) == {recorder.turn_id}
    assert store.turns_lapsed(now=timezone.now() + timedelta(seconds=5)) == []
    later = timezone.now() + timedelta(seconds=7)
    assert store.turns_lapsed(now=later, exclude={conversation.pk}) == [], "a worker's own turns are alive"
    assert store.turns_lapsed(now=later) == [(conversation.pk, recorder.turn_id)]
    recovered = store.turn_abandon(conversation_id=conversation.pk, turn_id=recorder.turn_id, interrupted=True,
                                   lease=6, now=later)
    assert recovered is not None and recovered.conversation_id == conversation.pk
    assert _rows(conversation)[-1] == ("assistant", "", "complete"), "the completed round stays"


@pytest.mark.django_db(transaction=True)  # each call its own transaction, as in a worker: a refusal spoils no outer one
def test_a_send_takes_over_a_dead_turn_and_refuses_a_live_one(user: Any, clock: FakeClock) -> None:
    conversation = _completed_exchange(user, clock)
    store.message_send(user=user, conversation_id=conversation.pk, text="lost question")
    with pytest.raises(ProblemError) as live:
        store.message_send(user=user, conversation_id=conversation.pk, text="too soon")
    assert live.value.slug == "conflict"
    _age(conversation, 7)
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="and again")
    assert Message.objects.filter(conversation=conversation, status=MessageStatus.STREAMING).get().pk \
        == turn.assistant_message_id
    assert _rows(conversation)[-3:] == [("user", "lost question", "complete"), ("user", "and again", "complete"),
                                        ("assistant", "", "streaming")]


@pytest.mark.django_db
def test_stray_placeholder_outside_a_turn_is_dropped(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="m")
    Message.objects.create(conversation=conversation, position=0, role="assistant", status="streaming")
    assert store.turns_lapsed() == [], "no turn to recover: the watch leaves the stray alone"
    assert _run_command() == "recovered 0 conversations\n"
    assert not Message.objects.filter(conversation=conversation).exists()


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_turn_leaves_no_partial_once_recovery_runs(user: Any, clock: FakeClock) -> None:
    conversation = _completed_exchange(user, clock)
    env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict),
           "DJANGO_SETTINGS_MODULE": "project.settings"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.app.crash_worker", str(user.pk), str(conversation.pk)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
    )
    try:
        line = worker.stdout.readline() if worker.stdout else ""
        assert line.startswith("READY "), line
        partial_id = int(line.split()[1])
        assert Message.objects.get(pk=partial_id).status == MessageStatus.STREAMING
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        if worker.stdout:
            worker.stdout.close()
    assert Conversation.objects.get(pk=conversation.pk).status == "streaming"

    _age(conversation, 7)
    assert _run_command() == "recovered 1 conversation\n"
    conversation.refresh_from_db()
    assert (conversation.status, conversation.turn_id) == ("error", None)
    assert not Message.objects.filter(pk=partial_id).exists()
    assert _rows(conversation) == [("user", "Hi", "complete"), ("assistant", "Hello!", "complete"),
                                   ("user", "Tell me a long story", "complete")]
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="Try again")
    assert turn.model == "gpt-4o"
