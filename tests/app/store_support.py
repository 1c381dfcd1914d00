"""A turn's stream played into the real store as the turn runner plays it: stream events
are assembled by the agent loop's own :class:`~jxai_app.core.agent.assembly.RoundAssembly`,
and the recorder saves what it assembled when the round ends (docs/store.md)."""

from __future__ import annotations

from typing import Any, Mapping

from jxai_app import store
from jxai_app.core.agent.assembly import RoundAssembly
from jxai_app.core.streaming.events import (
    DeltaEvent, ReasoningEvent, ToolCallDeltaEvent, ToolCallEndEvent, ToolCallStartEvent, UsageEvent,
)


class TurnFeed:
    """A :class:`~jxai_app.store.TurnRecorder` fed stream events.

    Args:
        turn: what ``store.message_send`` returned.
        context_window: the model's window, for the context warning.
    """

    def __init__(self, turn: store.TurnStart, *, context_window: int | None = None) -> None:
        self.recorder = store.TurnRecorder(turn, user=turn.conversation.owner, context_window=context_window)
        self._round = RoundAssembly()
        self._produced = 0

    def __getattr__(self, name: str) -> Any:  # the recorder's own writes and state
        return getattr(self.recorder, name)

    def add_delta(self, content: str) -> None:
        self._feed(DeltaEvent(content=content), len(content))

    def add_reasoning(self, content: str) -> None:
        self._feed(ReasoningEvent(content=content), len(content))

    def tool_call_start(self, call_id: str, name: str) -> None:
        self._feed(ToolCallStartEvent(id=call_id, name=name), len(name))

    def tool_call_delta(self, call_id: str, args: str) -> None:
        self._feed(ToolCallDeltaEvent(id=call_id, args=args), len(args))

    def tool_call_end(self, call_id: str) -> None:
        self._feed(ToolCallEndEvent(id=call_id), 0)

    def set_usage(self, usage: Mapping[str, Any]) -> None:
        self._feed(UsageEvent(input_tokens=usage["inputTokens"], output_tokens=usage["outputTokens"],
                              cached_input_tokens=usage.get("cachedInputTokens"),
                              reasoning_tokens=usage.get("reasoningTokens")), 0)

    def _feed(self, event: Any, chars: int) -> None:
        self._round.feed(event)
        self._produced += chars

    def finish_round(self, *, stop_reason: str, usage: Mapping[str, Any] | None = None, input_estimate: int = 0,
                     last: bool = False) -> bool:
        """Save the assembled round (usage: ``usage``, else the fed ``usage`` event, else an
        estimate), and end the turn too when ``last``."""
        reported = usage if usage is not None else self._round.usage
        doc, estimated = store.round_usage(reported, produced_chars=self._produced, input_estimate=input_estimate)
        ok = self.recorder.finish_round(message=self._round.message(), stop_reason=stop_reason, usage=doc,
                                        estimated=estimated)
        self._round, self._produced = RoundAssembly(), 0
        return ok and (self.recorder.end_turn() if last else True)


def saved_answer(owner: Any, chars: int) -> str:
    """A new saved conversation of ``owner``: one question and an answer of ``chars``
    characters (cut at the length limit); its id."""
    turn = store.message_send(user=owner, conversation_id=None, text="Write at length.")
    feed = TurnFeed(turn)
    feed.add_delta(("All work and no play. " * (chars // 22 + 1))[:chars])
    assert feed.finish_round(stop_reason="length", last=True)
    return str(turn.conversation.pk)
