"""A running turn: agent loop → chat store → every socket, on any worker (docs/turns.md).

Modules::

    control.py   start_turn, cancel_turn, retry_turn, conversation_retitle, conversation_remove,
                 decide_approval, resume_turn, expire_approvals (docs/approval.md)
    httpturn.py  POST /ai/chat?conversation=…: a saved conversation's turn as SSE
    runner.py    TurnRunner: one turn as a task (seq numbering, the store's writes, retries)
    delivery.py  frames to sockets: in-process, or through the channel layer to every worker
    replay.py    ReplayLog: a running turn's events, compact, replayed exactly
    recovery.py  LeaseWatch: turns whose worker died are recovered and their tabs told
    hub.py       TurnHub: one worker's runners, delivery, lease watch and drain; get_hub()
    session.py   Session: one socket's ordered output, sequencer, snapshot and requests
    framing.py   how large an outgoing message may be: events batches by size, chunk frames
    answercap.py JXAI_MAX_ANSWER_CHARS: the turn's client stops the answer at the cap
"""

from __future__ import annotations

from jxai_app.turns.control import (
    Origin, TurnInfo, cancel_turn, conversation_remove, conversation_retitle, retry_turn, start_turn, tool_view,
)
from jxai_app.turns.hub import TurnHub, TurnState, get_hub
from jxai_app.turns.replay import ReplayLog
from jxai_app.turns.runner import TurnRunner

__all__ = [
    "Origin", "ReplayLog", "TurnHub", "TurnInfo", "TurnRunner", "TurnState", "cancel_turn", "conversation_remove",
    "conversation_retitle", "get_hub", "retry_turn", "start_turn", "tool_view",
]
