"""The agent loop's own events, next to the streaming events they interleave with (docs/agent.md "Rounds").

Frozen keyword-only dataclasses like :mod:`jxai_app.core.streaming.events`, each with a literal
``type`` and a ``to_dict()`` giving the camelCase wire form::

    {"type":"round_start","round":1}
    {"type":"round_end","round":1,"stopReason":"tool_calls","message":{assistant wire message}|null}
    {"type":"tool_start","callId":"call_1","name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}
    {"type":"tool_result","callId":"call_1","name":"get_weather","success":true,"result":{…},"message":{tool wire message}}
    {"type":"tool_approval_request","callId":"call_2","name":"save_note","arguments":"{\"text\":\"…\"}"}
    {"type":"turn_end","outcome":"complete","message":null,"appended":[…],"usage":{…}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from jxai_app.core.streaming.events import StreamEvent, UsageEvent

__all__ = [
    "AgentEvent", "Decision", "LoopEvent", "Outcome", "RoundEndEvent", "RoundStartEvent", "ToolApprovalRequestEvent",
    "ToolResultEvent", "ToolStartEvent", "TurnEndEvent", "TurnUsage",
]

Outcome: TypeAlias = Literal["complete", "cancelled", "error", "empty", "cap_partial", "cap_failed",
                             "awaiting_approval"]
"""How a turn ended (``awaiting_approval``: paused until a person decides; docs/agent.md "Approval")."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RoundStartEvent:
    """A round begins: one model request follows."""

    round: int
    """1-based round number within the turn."""
    type: Literal["round_start"] = field(default="round_start", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"round_start","round":1}``."""
        return {"type": self.type, "round": self.round}


@dataclass(frozen=True, kw_only=True, slots=True)
class RoundEndEvent:
    """A round's stream ended (right after its ``done``/``error``)."""

    round: int
    stop_reason: str
    """The ``done`` stop reason, ``"cancelled"`` when Stop was seen, or ``"error"``."""
    message: dict[str, Any] | None
    """The assistant wire message this round appended, or ``None`` (error, cancel, silence)."""
    type: Literal["round_end"] = field(default="round_end", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"round_end","round","stopReason","message"}``."""
        return {"type": self.type, "round": self.round, "stopReason": self.stop_reason, "message": self.message}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolStartEvent:
    """A tool call is about to be handled (after the Stop check)."""

    call_id: str
    name: str
    arguments: str
    """The argument text exactly as the model streamed it."""
    type: Literal["tool_start"] = field(default="tool_start", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"tool_start","callId","name","arguments"}``."""
        return {"type": self.type, "callId": self.call_id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResultEvent:
    """A call's result, appended as a ``tool`` message (events come in call order)."""

    call_id: str
    name: str
    success: bool
    result: dict[str, Any]
    """``{"success": true, "data": …[, "summary": …]}`` or ``{"success": false, "error": …}``,
    normalised by a JSON round trip (docs/agent.md "Tool calls")."""
    message: dict[str, Any]
    """The ``{"role":"tool","tool_call_id","content"}`` wire message appended."""
    type: Literal["tool_result"] = field(default="tool_result", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"tool_result","callId","name","success","result","message"}``."""
        return {"type": self.type, "callId": self.call_id, "name": self.name, "success": self.success,
                "result": self.result, "message": self.message}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolApprovalRequestEvent:
    """A call of the round waits for a person's approval and does not run now (docs/agent.md "Approval")."""

    call_id: str
    name: str
    arguments: str
    """The argument text exactly as the model streamed it (it parses as a JSON object)."""
    type: Literal["tool_approval_request"] = field(default="tool_approval_request", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"tool_approval_request","callId","name","arguments"}``."""
        return {"type": self.type, "callId": self.call_id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """A person's answer to a paused call, handed to :func:`run_turn` to resume the turn.

    ``approved`` runs the call as any other; otherwise the model reads ``refusal`` as the
    call's failed result (docs/agent.md "Approval")."""

    call_id: str
    name: str
    arguments: str
    approved: bool
    refusal: str = ""
    """The error sentence the model reads for a call not approved (denied, expired, stopped)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnUsage:
    """Token totals over the turn's rounds (from each round's ``usage`` event)."""

    input_tokens: int = 0
    output_tokens: int = 0
    rounds: int = 0
    """Model requests made."""
    tool_rounds: int = 0
    """Rounds that handled at least one call."""
    last: UsageEvent | None = None
    """The last round's usage, e.g. for the conversation's context size."""

    def to_dict(self) -> dict[str, Any]:
        """``{"inputTokens","outputTokens","rounds","toolRounds","last"}`` (last without ``type``)."""
        last = None if self.last is None else {k: v for k, v in self.last.to_dict().items() if k != "type"}
        return {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens, "rounds": self.rounds,
                "toolRounds": self.tool_rounds, "last": last}


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnEndEvent:
    """The turn is over; always the last event."""

    outcome: Outcome
    message: str | None
    """A sentence for the user: the error, the cap text, :data:`EMPTY_REPLY`, :data:`STOPPED`;
    ``None`` when ``complete``."""
    appended: tuple[dict[str, Any], ...]
    """Every wire message the turn appended, in order."""
    usage: TurnUsage
    type: Literal["turn_end"] = field(default="turn_end", init=False)

    def to_dict(self) -> dict[str, Any]:
        """Wire form ``{"type":"turn_end","outcome","message","appended","usage"}``."""
        return {"type": self.type, "outcome": self.outcome, "message": self.message,
                "appended": list(self.appended), "usage": self.usage.to_dict()}


LoopEvent: TypeAlias = (RoundStartEvent | RoundEndEvent | ToolStartEvent | ToolResultEvent | ToolApprovalRequestEvent
                        | TurnEndEvent)
AgentEvent: TypeAlias = StreamEvent | LoopEvent
"""Everything :func:`run_turn` yields."""
