"""Replays a transcript fixture (tests/data/store/*.json) through the real store.

A fixture is ``{"description", "steps", "conversation", "messages", "wire"}``. Steps are
store operations (``create``, ``send``, ``delta``, ``reasoning``, ``tool_start``,
``tool_delta``, ``tool_end``, ``usage``, ``finish``, ``tool_result``, ``begin_round``,
``note``, ``end_turn``, ``fail``, ``cancel``, ``retry``, ``advance``), the stream assembled as
the agent loop assembles it (:class:`tests.app.store_support.TurnFeed`). The fake clock moves
0.5 s per step. ``messages`` lists the saved rows in position order with default values left
out (see :func:`message_row`).
"""

from __future__ import annotations

from typing import Any

from jxai_app import store
from jxai_app.models import Conversation, Message
from jxai_app.core.problems import problem
from tests.app.conftest import FakeClock
from tests.app.store_support import TurnFeed

STEP_SECONDS = 0.5


def message_row(message: Message) -> dict[str, Any]:
    """A saved message as a fixture row: members at their default value are left out."""
    row: dict[str, Any] = {"role": message.role}
    optional = {
        "content": (message.content, ""),
        "reasoning_content": (message.reasoning_content, None),
        "tool_call_id": (message.tool_call_id, ""),
        "model": (message.model, ""),
        "stop_reason": (message.stop_reason, ""),
        "status": (message.status, "complete"),
        "usage": (message.usage, None),
    }
    for key, (value, default) in optional.items():
        if value != default:
            row[key] = value
    calls = [
        {"call_id": c.call_id, "name": c.name, "arguments": c.arguments, "result": c.result, "success": c.success}
        for c in message.tool_calls.order_by("position")
    ]
    if calls:
        row["tool_calls"] = calls
    return row


def conversation_row(conversation: Conversation) -> dict[str, Any]:
    row: dict[str, Any] = {
        "status": conversation.status, "title": conversation.title, "model": conversation.model,
        "token_count": conversation.token_count, "context_warning": conversation.context_warning,
    }
    if conversation.last_error:
        row["last_error"] = conversation.last_error
    if conversation.last_problem is not None:
        row["last_problem"] = conversation.last_problem["type"].rsplit("/", 1)[-1]
    return row


class ScenarioRunner:
    """Applies fixture steps for one user and keeps the open recorder."""

    def __init__(self, user: Any, clock: FakeClock) -> None:
        self.user = user
        self.clock = clock
        self.conversation: Conversation | None = None
        self.context_window: int | None = None
        self.recorder: store.TurnRecorder | None = None

    @property
    def cid(self) -> Any:
        assert self.conversation is not None, "the first step must be 'create'"
        return self.conversation.pk

    def run(self, steps: list[dict[str, Any]]) -> None:
        for step in steps:
            self.clock.advance(STEP_SECONDS)
            self.apply(step)

    def apply(self, step: dict[str, Any]) -> None:  # noqa: C901 - one branch per op
        op = step["op"]
        rec = self.recorder
        if op == "create":
            self.conversation = store.conversation_create(
                user=self.user, model=step["model"], system_prompt=step.get("system_prompt"))
            self.context_window = step.get("context_window")
        elif op == "send":
            turn = store.message_send(user=self.user, conversation_id=self.cid, text=step["text"])
            self.recorder = TurnFeed(turn, context_window=self.context_window)
        elif op == "advance":
            self.clock.advance(step["seconds"])
        elif op == "retry":
            turn = store.message_resend(user=self.user, conversation_id=self.cid)
            assert turn is not None and turn.user_message.content == step["expect"]
            self.recorder = TurnFeed(turn, context_window=self.context_window)
        else:
            assert rec is not None, f"{op} needs a running turn"
            self._turn_op(rec, op, step)

    def _turn_op(self, rec: store.TurnRecorder, op: str, step: dict[str, Any]) -> None:
        if op == "delta":
            rec.add_delta(step["content"])
        elif op == "reasoning":
            rec.add_reasoning(step["content"])
        elif op == "tool_start":
            rec.tool_call_start(step["id"], step["name"])
        elif op == "tool_delta":
            rec.tool_call_delta(step["id"], step["args"])
        elif op == "tool_end":
            rec.tool_call_end(step["id"])
        elif op == "usage":
            rec.set_usage(step["usage"])
        elif op == "finish":
            assert rec.finish_round(stop_reason=step["stop_reason"], usage=step.get("usage"),
                                    input_estimate=step.get("input_estimate", 0), last=step.get("last", False))
        elif op == "tool_result":
            assert rec.attach_tool_result(call_id=step["id"], content=step["content"]) is not None
        elif op == "begin_round":
            assert rec.begin_round()
        elif op == "note":
            assert rec.add_assistant_message(step["content"])
        elif op == "end_turn":
            assert rec.end_turn()
        elif op == "fail":
            assert rec.fail(step["message"], problem(step["problem"], step["message"]))
        elif op == "cancel":
            assert rec.cancel()
        else:
            raise AssertionError(f"unknown op {op!r}")
