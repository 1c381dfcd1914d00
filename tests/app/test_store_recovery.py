"""Recovery of partial messages whose turn died (SPEC §6, issue 7 "Recovery"): the
management command, the check on open and on send, and a real process killed mid-turn."""

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
    """Make every sign of the conversation's life ``seconds`` old (a dead worker)."""
    past = timezone.now() - timedelta(seconds=seconds)
    Conversation.objects.filter(pk=conversation.pk).update(turn_heartbeat=past)
    Message.objects.filter(conversation=conversation).update(updated_at=past)


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
    assert recorder.flush()
    recorder.tool_call_start("c", "f")
    assert recorder.finish_round(stop_reason="tool_calls")
    recorder.attach_tool_result(call_id="c", content='{"success":true}')
    assert recorder.begin_round()
    recorder.add_delta("and stormy")
    assert recorder.flush()
    live = store.conversation_create(user=user, model="gpt-4o")
    store.message_send(user=user, conversation_id=live.pk, text="still running")

    _age(conversation, 31)
    assert _run_command() == "recovered 1 conversation\n"

    conversation.refresh_from_db()
    assert (conversation.status, conversation.turn_id) == ("idle", None)
    assert _rows(conversation) == [
        ("user", "Hi", "complete"), ("assistant", "Hello!", "complete"),
        ("user", "Tell me more", "complete"), ("assistant", "It was a dark", "complete"),
        ("tool", '{"success":true}', "complete"),
    ]
    assert conversation.token_count == 5, "the last completed turn's count stays"
    assert Conversation.objects.get(pk=live.pk).status == "streaming", "a live turn is left alone"
    clock.advance(5)
    assert recorder.add_delta("late") is True
    assert recorder.flush() is False and recorder.lost, "the dead turn's recorder finds its placeholder gone"
    assert recorder.end_turn() is False
    assert Conversation.objects.get(pk=conversation.pk).status == "idle"


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
def test_turn_between_rounds_is_alive_while_it_keeps_alive(user: Any, clock: FakeClock) -> None:
    """During a long tool run nothing streams; the keep-alive heartbeat keeps the turn."""
    conversation = store.conversation_create(user=user, model="m")
    recorder = TurnFeed(store.message_send(user=user, conversation_id=conversation.pk, text="x"))
    recorder.tool_call_start("slow", "long_job")
    assert recorder.finish_round(stop_reason="tool_calls")
    _age(conversation, 25)
    clock.advance(10)
    assert recorder.flush()  # the runner's timer: writes a heartbeat
    assert store.turns_recover(now=timezone.now() + timedelta(seconds=20)) == 0
    assert store.turns_recover(now=timezone.now() + timedelta(seconds=31)) == 1
    assert _rows(conversation)[-1] == ("assistant", "", "complete"), "the completed round stays"


@pytest.mark.django_db
def test_opening_or_sending_to_a_conversation_recovers_a_dead_turn(user: Any, clock: FakeClock) -> None:
    conversation = _completed_exchange(user, clock)
    store.message_send(user=user, conversation_id=conversation.pk, text="lost question")
    fresh = store.conversation_get(user=user, conversation_id=conversation.pk)
    assert fresh.status == "streaming", "a live turn is not touched on open"
    _age(conversation, 40)
    opened, messages = store.message_list(user=user, conversation_id=conversation.pk)
    assert opened.status == "idle" and opened.turn_id is None
    assert [m.status for m in messages] == ["complete"] * 3

    store.message_send(user=user, conversation_id=conversation.pk, text="again")
    _age(conversation, 40)
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="and again")
    assert Message.objects.filter(conversation=conversation, status=MessageStatus.STREAMING).get().pk \
        == turn.assistant_message_id
    assert _rows(conversation)[-3:] == [("user", "again", "complete"), ("user", "and again", "complete"),
                                        ("assistant", "", "streaming")]


@pytest.mark.django_db
def test_stray_placeholder_outside_a_turn_is_dropped(user: Any) -> None:
    conversation = store.conversation_create(user=user, model="m")
    Message.objects.create(conversation=conversation, position=0, role="assistant", status="streaming")
    assert store.turns_recover() == 0
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
        assert Message.objects.get(pk=partial_id).content.startswith("Once upon a time")
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        if worker.stdout:
            worker.stdout.close()
    assert Conversation.objects.get(pk=conversation.pk).status == "streaming"

    _age(conversation, 31)
    assert _run_command() == "recovered 1 conversation\n"
    conversation.refresh_from_db()
    assert (conversation.status, conversation.turn_id, conversation.last_error) == ("idle", None, "")
    assert not Message.objects.filter(pk=partial_id).exists()
    assert _rows(conversation) == [("user", "Hi", "complete"), ("assistant", "Hello!", "complete"),
                                   ("user", "Tell me a long story", "complete")]
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="Try again")
    assert turn.model == "gpt-4o"
