"""Write budget (issue 7): a streamed answer costs at most 4 + one write per 2 s of
streaming + 2 per tool call, whatever the number of deltas. Writes are INSERT/UPDATE/DELETE
statements counted on the connection; a fake clock drives the flush interval."""

from __future__ import annotations

import math
from typing import Any

import pytest

from jxai_app import store
from jxai_app.models import Message, ToolCall
from tests.app.conftest import FakeClock, count_writes

pytestmark = pytest.mark.django_db


def _stream(recorder: store.TurnRecorder, clock: FakeClock, pieces: list[tuple[str, str, str]],
            seconds_per_delta: float) -> None:
    """Feed ``(kind, id, text)`` pieces as the runner would: flush only when told."""
    for kind, call_id, text in pieces:
        clock.advance(seconds_per_delta)
        if kind == "text":
            due = recorder.add_delta(text)
        elif kind == "start":
            due = recorder.tool_call_start(call_id, text)
        else:
            due = recorder.tool_call_delta(call_id, text)
        if due:
            assert recorder.flush()


@pytest.mark.parametrize("deltas", [2_000, 20_000])
def test_plain_answer_stays_within_the_budget(deltas: int, user: Any, clock: FakeClock) -> None:
    conversation = store.conversation_create(user=user, model="gpt-4o")
    duration = 20.0
    with count_writes() as writes:
        turn = store.message_send(user=user, conversation_id=conversation.pk, text="Tell me everything")
        recorder = store.TurnRecorder(turn, clock=clock)
        _stream(recorder, clock, [("text", "", f"w{i} ") for i in range(deltas)], duration / deltas)
        assert recorder.finish_round(stop_reason="stop", usage={"inputTokens": 5, "outputTokens": deltas},
                                     last=True)
    budget = 4 + math.floor(duration / 2.0)
    assert writes.count <= budget, writes.statements
    assert writes.count >= 4 + 9, "text must also be flushed while streaming, not only at the end"
    message = Message.objects.get(pk=turn.assistant_message_id)
    assert message.content == "".join(f"w{i} " for i in range(deltas))
    assert message.status == "complete"


def test_writes_do_not_grow_with_the_number_of_deltas(user: Any, clock: FakeClock) -> None:
    counts = []
    for deltas in (10, 1_000, 5_000):
        conversation = store.conversation_create(user=user, model="gpt-4o")
        with count_writes() as writes:
            turn = store.message_send(user=user, conversation_id=conversation.pk, text="go")
            recorder = store.TurnRecorder(turn, clock=clock)
            _stream(recorder, clock, [("text", "", "x")] * deltas, 9.0 / deltas)
            recorder.finish_round(stop_reason="stop", last=True)
        counts.append(writes.count)
    assert max(counts) <= 4 + 4, counts  # 9 s of streaming
    assert counts[1] == counts[2], "5x more deltas, not one write more"


def test_answer_with_tool_calls_stays_within_the_budget(user: Any, clock: FakeClock) -> None:
    """2,000 deltas of text and three calls' arguments, then the three results."""
    conversation = store.conversation_create(user=user, model="gpt-4o")
    pieces: list[tuple[str, str, str]] = [("text", "", f"t{i} ") for i in range(500)]
    for n in range(3):
        pieces.append(("start", f"call_{n}", "write_file"))
        pieces += [("args", f"call_{n}", f"a{i}") for i in range(499)]
    assert len(pieces) == 2_000
    duration, calls = 16.0, 3
    with count_writes() as writes:
        turn = store.message_send(user=user, conversation_id=conversation.pk, text="Write three files")
        recorder = store.TurnRecorder(turn, clock=clock)
        _stream(recorder, clock, pieces, duration / len(pieces))
        assert recorder.finish_round(stop_reason="tool_calls")
        for n in range(calls):
            assert recorder.attach_tool_result(call_id=f"call_{n}", content='{"success":true}')
    assert writes.count <= 4 + math.floor(duration / 2.0) + 2 * calls, writes.statements
    saved = ToolCall.objects.filter(message_id=turn.assistant_message_id).order_by("position")
    assert [c.arguments for c in saved] == ["".join(f"a{i}" for i in range(499))] * 3
    assert all(c.success for c in saved)

    with count_writes() as writes:  # the next round is one more assistant message
        assert recorder.begin_round()
        _stream(recorder, clock, [("text", "", "done ")] * 2_000, 4.0 / 2_000)
        assert recorder.finish_round(stop_reason="stop", last=True)
    assert writes.count <= 4 + 2, writes.statements


def test_silent_stream_writes_only_heartbeats(user: Any, clock: FakeClock) -> None:
    """A long tool-argument stream with no text: one heartbeat per keep-alive interval."""
    conversation = store.conversation_create(user=user, model="gpt-4o")
    turn = store.message_send(user=user, conversation_id=conversation.pk, text="go")
    recorder = store.TurnRecorder(turn, clock=clock)
    recorder.tool_call_start("c", "big")
    with count_writes() as writes:
        _stream(recorder, clock, [("args", "c", "x")] * 3_000, 31.0 / 3_000)
    assert writes.count == 3  # 31 s of silence, keep-alive every 10 s
