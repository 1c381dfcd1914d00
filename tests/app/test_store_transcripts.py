"""Transcript scenarios (docs/store.md) replayed through the real store and database:
scripted operations → the saved rows and the ``to_messages()`` wire, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jxai_app import store
from jxai_app.models import Message
from tests.app.conftest import FakeClock, count_writes
from tests.app.scenario import ScenarioRunner, conversation_row, message_row

FIXTURES = sorted((Path(__file__).resolve().parent.parent / "data" / "store").glob("*.json"))


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_every_named_scenario_has_a_fixture() -> None:
    names = {path.stem for path in FIXTURES}
    assert {
        "plain-exchange", "single-tool-call", "parallel-tool-calls", "text-and-tool-calls",
        "cancelled-mid-stream", "error-mid-stream", "retried-turn", "empty-turns-dropped", "reasoning",
        "length-cutoff-text", "length-cutoff-tool-call", "round-cap-tail", "system-message",
    } <= names


@pytest.mark.django_db
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_transcript_fixture(path: Path, user: Any, clock: FakeClock) -> None:
    fixture = json.loads(path.read_text(encoding="utf-8"))
    runner = ScenarioRunner(user, clock)
    runner.run(fixture["steps"])

    conversation = store.conversation_get(user=user, conversation_id=runner.cid)
    assert conversation_row(conversation) == fixture["conversation"]

    messages = list(Message.objects.filter(conversation=conversation).order_by("position"))
    assert [m.position for m in messages] == list(range(len(messages)))
    assert [message_row(m) for m in messages] == fixture["messages"]

    with count_writes() as writes:
        wire = store.to_messages(conversation)
    assert writes.count == 0, "building the wire must not write"
    # Byte-for-byte: member order is part of the contract (docs/store.md "The OpenAI wire export").
    assert _compact(wire) == _compact(fixture["wire"])
    assert [message_row(m) for m in Message.objects.filter(conversation=conversation).order_by("position")] \
        == fixture["messages"], "building the wire must not change the transcript"
