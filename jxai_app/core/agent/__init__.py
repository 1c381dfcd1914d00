"""The agent loop: rounds of model requests and tool calls until the turn has an answer (SPEC §5).

A *turn* answers one user message. It runs in *rounds*; each round makes exactly one
streaming request with the repaired history plus everything the turn appended so far and
the tool list as re-read that round (HA-12). The client's events pass straight through (so a
UI can stream), and the loop adds its own events::

    round_start → delta/reasoning/tool_call_*/usage… → done|error → round_end
      → (tool_start → tool_result)* → round_start … → turn_end

The loop persists nothing; a host stores ``turn_end.appended`` (every wire message the
turn added, in order) or follows the per-round events. Nothing raises out of
:func:`run_turn`: a client or tool that raises becomes an ``error`` event or a failed tool
result, and the last event is always exactly one :class:`TurnEndEvent`.

Rules (SPEC §5, seed HA-12 … HA-43 in spirit; choices of our own are marked *ours*):

- The assistant message is assembled from the events: ``content`` (``None`` when the round
  made calls and wrote nothing), ``reasoning_content`` only when reasoning streamed (CS-31),
  ``tool_calls`` with each call's concatenated argument text.
- Calls run whatever the finish reason, ``length`` included (a cut-off call's arguments do
  not parse → a failed result the model sees); a cancelled round runs none (HA-38) and its
  partial message is not appended (CS-19). An ``error`` ends the turn ``error``; that
  round's partial message is not appended, earlier rounds stay (HA-18). *Ours:* an
  ``error`` with an empty message is still an error (HA-19 dropped); a stream that ends
  with neither ``done`` nor ``error`` is an ``incomplete_stream`` error (not HA-16's
  "truncated but complete"), so a half call never runs.
- Calls run concurrently (``tool_concurrency``), results become ``tool`` messages in call
  order, and ``tool_result`` events come in call order too. Argument text is parsed here:
  empty means ``{}`` (TI-2); unparseable or non-object JSON never reaches the tools (TI-3).
- *Ours:* a call id streamed twice in one round (HA-32) keeps both calls on the wire; the
  later one is renamed ``<id>_dup<k>`` (unique in the round) and answered with a failed
  result without running, so the history stays valid and the model sees why.
- Stop is checked before each call starts and after the last: a running call finishes and
  its result is kept (HA-36, HA-37), Stop never opens a round. *Ours:* calls of the round
  that never started get a failed "not run" result at once, so the stored history never
  holds a dangling call.
- Budgets: ``max_tool_rounds`` counts rounds that handled at least one call, ``max_rounds``
  every round (HA-24, HA-25, HA-31). Running out after any successful call appends an
  ordinary assistant message saying what was done (``cap_partial``, not an error; HA-26,
  HA-29); with nothing succeeded the turn ends ``cap_failed`` with that text and appends
  nothing (HA-27). *Ours:* "applied" means a successful result (we have no write ledger),
  and the text names the budget that actually ran out (§6 lists the seed's quirk).
- A round with no text, no reasoning and no calls appends nothing; it ends the turn
  ``empty`` ("The model sent back an empty reply.") unless something was drawn earlier in
  the turn, or after the last user message of the history, in which case ``complete``
  (HA-20 … HA-22). A round with reasoning only is appended (the thinking is kept for display)
  and ends ``complete``; repair keeps it off the wire later (CS-30).
- A round during which Stop was set is ``cancelled`` even if the provider then says ``stop``
  (HA-23); a signal already set when the turn starts sends no request at all.
- Before each request the history is repaired (:mod:`jxai_app.core.repair`, RP-1 … RP-14), so
  dangling calls are sealed, orphan replies dropped and empty assistants never sent.

Modules: ``base`` (what the loop needs: ``ChatClient``, ``ToolSource``, ``AgentPolicy``),
``events`` (the loop events), ``assembly`` (a round's assistant message), ``calls`` (running
a round's calls), ``loop`` (``run_turn``).
"""

from __future__ import annotations

from jxai_app.core.agent.base import AgentPolicy, ChatClient, ContextFactory, Signal, ToolSource
from jxai_app.core.agent.calls import NOT_RUN
from jxai_app.core.agent.events import (
    AgentEvent, LoopEvent, Outcome, RoundEndEvent, RoundStartEvent, ToolResultEvent, ToolStartEvent,
    TurnEndEvent, TurnUsage,
)
from jxai_app.core.agent.loop import EMPTY_REPLY, STOPPED, cap_text, run_turn

__all__ = [
    "EMPTY_REPLY", "NOT_RUN", "STOPPED", "AgentEvent", "AgentPolicy", "ChatClient", "ContextFactory",
    "LoopEvent", "Outcome", "RoundEndEvent", "RoundStartEvent", "Signal", "ToolResultEvent", "ToolSource",
    "ToolStartEvent", "TurnEndEvent", "TurnUsage", "cap_text", "run_turn",
]
