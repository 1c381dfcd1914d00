"""The turn runner: agent loop → chat store → every socket, on any worker (issue 4, SPEC §5–§7).

Modules::

    hub.py      TurnHub: the worker's live runners, local followers, layer plumbing; get_hub()
    runner.py   TurnRunner: one turn as a task (seq numbering, replay log, store writes)
    batches.py  LayerBatcher: a turn's frames to the layer every 50 ms, merged
    starts.py   StartingTurns: turns awaiting their first output; work that waits for them
    remote.py   ControlChannel: cancel, replay, follow from other workers
    log.py      ReplayLog: a running turn's events, compact, replayed exactly
    launch.py   start_turn: the send's transaction, then the runner and its model request
    control.py  cancel_turn, retry_turn, conversation_retitle, conversation_remove
    session.py  Session: one socket's ordered output, sequencer, snapshot and requests
    names.py    group names and layer message types

Public API (all async, keyword-only; ``ProblemError`` for refusals)::

    start_turn(*, user, conversation_id | None, text, model_alias=None, origin=None, hub=None) -> TurnInfo
    cancel_turn(*, user, conversation_id, hub=None) -> bool
    retry_turn(*, user, conversation_id, origin=None, hub=None) -> TurnInfo
    conversation_retitle(*, user, conversation_id, title, hub=None) -> dict
    conversation_remove(*, user, conversation_id, hub=None) -> None
    get_hub() -> TurnHub          (hub.shutdown(), hub.wait_idle(), hub.runner(cid))
"""

from __future__ import annotations

from jxai_app.turns.control import (
    Origin, TurnInfo, cancel_turn, conversation_remove, conversation_retitle, retry_turn, start_turn, tool_view,
)
from jxai_app.turns.hub import Follower, TurnHub, TurnState, get_hub
from jxai_app.turns.log import ReplayLog
from jxai_app.turns.names import control_group, conversation_group, user_group
from jxai_app.turns.runner import TurnRunner

__all__ = [
    "Follower", "Origin", "ReplayLog", "TurnHub", "TurnInfo", "TurnRunner", "TurnState", "cancel_turn",
    "control_group", "conversation_group", "conversation_remove", "conversation_retitle", "get_hub",
    "retry_turn", "start_turn", "tool_view", "user_group",
]
