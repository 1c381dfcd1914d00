"""The agent loop: rounds of model requests and tool calls until the turn has an answer (docs/agent.md).

A *turn* answers one user message. It runs in *rounds*; each round makes exactly one
streaming request with the repaired history plus everything the turn appended so far and
the tool list as re-read that round (docs/agent.md "Rounds"). The client's events pass
straight through (so a UI can stream), and the loop adds its own events::

    round_start → delta/reasoning/tool_call_*/usage… → done|error → round_end
      → (tool_start → tool_result)* → round_start … → turn_end

The loop persists nothing; a host stores ``turn_end.appended`` (every wire message the
turn added, in order) or follows the per-round events. Nothing raises out of
:func:`run_turn`: a client or tool that raises becomes an ``error`` event or a failed tool
result, and the last event is always exactly one :class:`TurnEndEvent`.

Rules (each a section of docs/agent.md):

- The assistant message is assembled from the events: ``content`` (``None`` when the round
  made calls and wrote nothing), ``reasoning_content`` only when reasoning streamed,
  ``tool_calls`` with each call's concatenated argument text ("The round's assistant message").
- Calls run whatever the finish reason, ``length`` included (a cut-off call's arguments do
  not parse → the failed result :data:`CUT_OFF`, which says so plainly); a cancelled round runs none and its
  partial message is not appended. An ``error`` ends the turn ``error``; that round's
  partial message is not appended, earlier rounds stay. An ``error`` with an empty message
  is still an error; a stream that ends with neither ``done`` nor ``error`` is an
  ``incomplete_stream`` error, so a half call never runs ("Tool calls", "How a turn ends").
- Calls run concurrently (``tool_concurrency``), results become ``tool`` messages in call
  order, and ``tool_result`` events come in call order too. Argument text is parsed here:
  empty means ``{}``; unparseable or non-object JSON never reaches the tools ("Tool calls").
- A call id streamed twice in one round keeps both calls on the wire; the later one is
  renamed ``<id>_dup<k>`` (unique in the round) and answered with a failed result without
  running, so the history stays valid and the model sees why ("The round's assistant message").
- Stop is checked before each call starts and after the last: a running call finishes and
  its result is kept, Stop never opens a round; calls of the round that never started get
  a failed "not run" result at once, so the stored history never holds a dangling call
  ("Stop").
- Budgets: ``max_tool_rounds`` counts rounds that handled at least one call, ``max_rounds``
  every round. Running out after any successful call appends an ordinary assistant message
  saying what was done (``cap_partial``, not an error); with nothing succeeded the turn ends
  ``cap_failed`` with that text and appends nothing. "Succeeded" means a successful result,
  and the text names the budget that actually ran out ("Budgets").
- A round with no text, no reasoning and no calls appends nothing; it ends the turn
  ``empty`` ("The model sent back an empty reply.") unless something was drawn earlier in
  the turn, or after the last user message of the history, in which case ``complete``. A
  round with reasoning only is appended (the thinking is kept for display) and ends
  ``complete``; the wire export keeps it out of later requests ("How a turn ends").
- A round during which Stop was set is ``cancelled`` even if the provider then says
  ``stop``; a signal already set when the turn starts sends no request at all ("Stop").
- A call whose tool requires approval (``tools.requires_approval(name)``) does not run: the
  round's other calls run, then each waiting call yields ``tool_approval_request`` and the
  turn ends ``awaiting_approval``. A later ``run_turn(decided=…)`` answers them (approved
  ones run, refused ones get the refusal as a failed result) before its first round ("Approval").
- Before each request the history is repaired (:mod:`jxai_app.core.repair`), so dangling
  calls are sealed, orphan replies dropped and empty assistants never sent ("History repair").

Modules: ``base`` (what the loop needs: ``ChatClient``, ``ToolSource``, ``AgentPolicy``),
``events`` (the loop events), ``assembly`` (a round's assistant message), ``calls`` (running
a round's calls), ``loop`` (``run_turn``).
"""

from __future__ import annotations

from jxai_app.core.agent.base import AgentPolicy, ChatClient, ContextFactory, Signal, ToolSource
from jxai_app.core.agent.calls import CUT_OFF, NOT_RUN
from jxai_app.core.agent.events import (
    AgentEvent, Decision, LoopEvent, Outcome, RoundEndEvent, RoundStartEvent, ToolApprovalRequestEvent,
    ToolResultEvent, ToolStartEvent, TurnEndEvent, TurnUsage,
)
from jxai_app.core.agent.loop import EMPTY_REPLY, STOPPED, cap_text, run_turn

__all__ = [
    "CUT_OFF", "EMPTY_REPLY", "NOT_RUN", "STOPPED", "AgentEvent", "AgentPolicy", "ChatClient", "ContextFactory",
    "Decision", "LoopEvent", "Outcome", "RoundEndEvent", "RoundStartEvent", "Signal", "ToolApprovalRequestEvent",
    "ToolResultEvent", "ToolSource",
    "ToolStartEvent", "TurnEndEvent", "TurnUsage", "cap_text", "run_turn",
]
