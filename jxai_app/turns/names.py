"""Channel-layer names and message types of the turn runner (``/work/notes/ws-protocol.md``).

Groups (Channels group names: ASCII letters, digits, ``-_.``, under 100 characters)::

    jxai.conv.<conversation uuid hex>     every socket following the conversation, on any worker
    jxai.user.<user pk>                   every socket of the user (conversation-list notices)
    jxai.turnctl.<conversation uuid hex>  the control channel of the conversation's running turn

Layer messages (``type`` → handler name with dots as underscores)::

    jxai.frames   {"origin": worker id, "conversationId", "scope": "conv"|"user",
                   "frames": [protocol frames…]}              → sockets (conv / user group)
    jxai.cancel   {"request", "reply_to"}                     → a runner; answers jxai.reply
    jxai.replay   {"request", "reply_to", "afterSeq"}         → a runner; answers jxai.reply
    jxai.follow / jxai.unfollow {"follower"}                  → a runner (remote followers)
    jxai.reply    {"request", …}                              → the asking worker's hub
"""

from __future__ import annotations

import uuid
from typing import Any, Final

FRAMES: Final[str] = "jxai.frames"
CANCEL: Final[str] = "jxai.cancel"
REPLAY: Final[str] = "jxai.replay"
FOLLOW: Final[str] = "jxai.follow"
UNFOLLOW: Final[str] = "jxai.unfollow"
REPLY: Final[str] = "jxai.reply"


def _hex(conversation_id: uuid.UUID | str) -> str:
    return (conversation_id if isinstance(conversation_id, uuid.UUID) else uuid.UUID(str(conversation_id))).hex


def conversation_group(conversation_id: uuid.UUID | str) -> str:
    """``jxai.conv.<hex>``: the sockets following a conversation."""
    return f"jxai.conv.{_hex(conversation_id)}"


def control_group(conversation_id: uuid.UUID | str) -> str:
    """``jxai.turnctl.<hex>``: the running turn's control channel (cancel, replay)."""
    return f"jxai.turnctl.{_hex(conversation_id)}"


def user_group(user_pk: Any) -> str:
    """``jxai.user.<pk>``: every socket of one user (list notices)."""
    return f"jxai.user.{user_pk}"
