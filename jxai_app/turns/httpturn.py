"""``POST /ai/chat?conversation=…``: a saved conversation's turn over HTTP, with the server's
tools and their approvals (docs/api.md "Conversation mode", docs/approval.md "HTTP").

The request carries only what is new, in ``messages``: one ``user`` message (a new turn), or
the decisions on the calls a paused turn waits for, one ``tool`` message each::

    {"role": "tool", "tool_call_id": "call_1", "approval": {"approved": true}}
    {"role": "tool", "tool_call_id": "call_1", "approval": {"approved": false, "reason": "…"}}

(the shape of the Vercel AI SDK's ``tool-approval-response`` part and of pydantic-ai's
``DeferredToolResults.approvals``, keyed by the call id; the history itself is the server's).
The turn runs like any other (:mod:`jxai_app.turns.start`); this module follows its
conversation like a socket does and writes the turn's events as SSE ``data:`` frames:

- first ``{"type": "conversation", "id"}``;
- the stream events of every round (``delta``, ``reasoning``, ``tool_call_*``, ``usage``),
  ``tool_result {id, name, success, result}`` for each server tool that ran, and
  ``tool_approval_request {id, name, args}`` for each call that waits;
- exactly one terminal event: ``done`` with the last round's ``stopReason`` (``stop`` …),
  ``done {stopReason: "approval_required"}`` when the turn paused, ``done {stopReason:
  "cancelled"}`` after Stop, or an ``error``.

Closing the connection leaves the turn running (it is saved, like a closed tab's).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from jxai_app.core.problems import problem, problem_error
from jxai_app.turns import control, start
from jxai_app.turns.hub import TurnHub
from jxai_app.turns.plan import TurnPlan

__all__ = ["ConversationRequest", "parse_conversation_request", "run_conversation_request"]

_STREAM_EVENTS = frozenset({"delta", "reasoning", "tool_call_start", "tool_call_delta", "tool_call_end", "usage"})
NEW = "new"
"""``?conversation=new``: start a new conversation."""


@dataclass(frozen=True, slots=True)
class ConversationRequest:
    """A checked conversation-mode request: a user message, or decisions (``(call id,
    approved, reason)``, in order)."""

    conversation_id: str | None
    text: str | None
    decisions: tuple[tuple[str, bool, str], ...]
    model: str | None
    attachments: tuple[str, ...] = ()
    """Ids of the user's uploads the user message carries (docs/attachments.md "Sending")."""


def _decision(message: Mapping[str, Any]) -> tuple[str, bool, str]:
    approval = message.get("approval")
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id or not isinstance(approval, Mapping):
        raise problem_error("invalid-request", "A tool message here answers a waiting call: "
                            "{\"role\": \"tool\", \"tool_call_id\", \"approval\": {\"approved\", \"reason\"?}}.")
    approved, reason = approval.get("approved"), approval.get("reason", "")
    if not isinstance(approved, bool) or not isinstance(reason, (str, type(None))):
        raise problem_error("invalid-request", "approval.approved must be a boolean and approval.reason a string.")
    return call_id, approved, reason or ""


def parse_conversation_request(conversation: str, *, messages: list[dict[str, Any]], tools: list[Any],
                               model: str | None) -> ConversationRequest:
    """Check the body of a conversation-mode request (module docstring).

    Args:
        conversation: the ``conversation`` query parameter (a conversation id, or ``new``).
        messages, tools, model: the body's members, after the gateway's checks of sizes and
            shapes (:func:`jxai_app.core.gateway.parse_chat_request`).

    The user message may carry ``"attachments": ["<upload id>", …]`` beside its text.

    Raises:
        ProblemError: ``invalid-request`` for ``tools`` (the server's tools are used), a
            ``messages`` list that is neither one user message with text nor only decisions,
            ``attachments`` that is not a list of strings,
            or decisions for a ``new`` conversation.
    """
    if tools:
        raise problem_error("invalid-request", "A conversation request uses the server's tools; send no tools.")
    cid = None if conversation == NEW else conversation
    if len(messages) == 1 and messages[0].get("role") == "user":
        text = messages[0].get("content")
        if not isinstance(text, str) or not text.strip():
            raise problem_error("invalid-request", "The user message needs text content.")
        attachments = messages[0].get("attachments", [])
        if not isinstance(attachments, list) or not all(isinstance(a, str) for a in attachments):
            raise problem_error("invalid-request", "attachments must be a list of attachment ids (strings).")
        return ConversationRequest(conversation_id=cid, text=text, decisions=(), model=model,
                                   attachments=tuple(attachments))
    if messages and all(m.get("role") == "tool" for m in messages) and cid is not None:
        return ConversationRequest(conversation_id=cid, text=None, decisions=tuple(map(_decision, messages)),
                                   model=None)
    raise problem_error("invalid-request", "messages must hold one user message (a new turn) or the decisions on "
                        "the calls the conversation waits for (tool messages with approval).")


class _Follower:
    """The request's end of the conversation's frames (a socket, for the delivery)."""

    def __init__(self, hub: TurnHub) -> None:
        self.hub = hub
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.following: uuid.UUID | None = None
        self.turn_id: str | None = None

    def follow(self, plan: TurnPlan) -> None:
        """Follow the planned turn's conversation (before it is launched: nothing is missed)."""
        self.following, self.turn_id = plan.conversation_id, plan.turn_id
        self.hub.delivery.follow(plan.conversation_id, self)

    def deliver(self, frame: dict[str, Any]) -> None:
        self.queue.put_nowait(frame)

    def refresh(self) -> None:
        """Nothing to resend: the turn runs on this worker, its frames come straight here."""

    def leave(self) -> None:
        if self.following is not None:
            self.hub.delivery.unfollow(self.following, self)


def _data(event: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'), ensure_ascii=False)}\n\n".encode("utf-8")


def _args(text: str) -> Any:
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text


def _translate(event: Mapping[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
    """One loop event → the API's events; ``state`` keeps the last stop reason and whether an
    error was sent. The terminal event is made from ``turn_end``."""
    kind = event.get("type")
    if kind in _STREAM_EVENTS:
        return [dict(event)]
    if kind == "done":
        state["stop"] = event.get("stopReason") or "stop"
    elif kind == "error":
        state["error"] = True
        return [dict(event)]
    elif kind == "tool_result":
        return [{"type": "tool_result", "id": event["callId"], "name": event["name"], "success": event["success"],
                 "result": event["result"]}]
    elif kind == "tool_approval_request":
        return [{"type": "tool_approval_request", "id": event["callId"], "name": event["name"],
                 "args": _args(str(event.get("arguments", "")))}]
    elif kind == "turn_end":
        outcome = event.get("outcome")
        if outcome == "awaiting_approval":
            return [{"type": "done", "stopReason": "approval_required"}]
        if outcome == "cancelled":
            return [{"type": "done", "stopReason": "cancelled"}]
        if outcome in ("complete", "cap_partial"):
            text = [{"type": "delta", "content": event["message"]}] if outcome == "cap_partial" else []
            return [*text, {"type": "done", "stopReason": state.get("stop", "stop")}]
        if state.get("error"):
            return []
        message = str(event.get("message") or "The turn failed.")
        return [{"type": "error", "message": message, "code": str(outcome), "problem": problem("upstream-failure",
                                                                                               message)}]
    return []


async def _events(follower: _Follower, cid: uuid.UUID) -> AsyncIterator[bytes]:
    state: dict[str, Any] = {}
    try:
        yield _data({"type": "conversation", "id": str(cid)})
        if follower.turn_id is None:  # the decisions left calls waiting: nothing runs yet
            yield _data({"type": "done", "stopReason": "approval_required"})
            return
        while True:
            frame = await follower.queue.get()
            if frame.get("type") == "snapshot" and frame.get("turn") is None:  # the turn ended elsewhere (Stop)
                yield _data({"type": "done", "stopReason": "cancelled"})
                return
            if frame.get("type") != "events" or frame.get("turnId") != follower.turn_id:
                continue
            for item in frame.get("items") or []:
                for out in _translate(item["event"], state):
                    yield _data(out)
                if item["event"].get("type") == "turn_end":
                    return
    finally:
        follower.leave()


async def run_conversation_request(hub: TurnHub, *, user: Any,
                                   request: ConversationRequest) -> tuple[uuid.UUID, AsyncIterator[bytes]]:
    """Start the request's turn (or record its decisions and resume the turn) and return the
    conversation id and the SSE body.

    Raises:
        ProblemError: before anything streams, as the websocket's requests do: ``not-found``
            (a foreign, missing or malformed conversation, or a call that does not wait),
            ``conflict`` (a turn runs or waits; a call decided already), ``invalid-request``,
            ``payload-too-large``, ``quota-exceeded`` / ``rate-limited``, ``service-unavailable``.
    """
    await hub.ensure_started()
    follower = _Follower(hub)
    try:
        plan: TurnPlan | None = None
        if request.text is not None:
            plan = await start.send(hub, user=user, conversation_id=request.conversation_id, text=request.text,
                                    model_alias=request.model, attachments=list(request.attachments))
        else:
            assert request.conversation_id is not None
            for call_id, approved, reason in request.decisions:
                plan = await control.decide_approval(hub, user=user, conversation_id=request.conversation_id,
                                                     call_id=call_id, approved=approved, reason=reason)
        if plan is not None:
            follower.follow(plan)
            start.launch(hub, plan)
        cid = plan.conversation_id if plan is not None else uuid.UUID(str(request.conversation_id))
    except BaseException:
        follower.leave()
        raise
    return cid, _events(follower, cid)
