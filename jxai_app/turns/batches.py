"""A turn's frames to the channel layer in batches (issue 4 item 2: the layer drops messages
past a channel's capacity, so never one message per delta).

The runner pushes every frame to this process's followers itself; a :class:`LayerBatcher`
gathers the same frames and sends them to the conversation's group as one ``jxai.frames``
message every ``hub.batch_interval`` (50 ms by default), consecutive ``events`` frames
merged into one. Only used when the hub fans out (a layer other processes share).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from jxai_app.turns import names

if TYPE_CHECKING:
    from jxai_app.turns.hub import TurnHub

__all__ = ["LayerBatcher", "merge_frames"]


def merge_frames(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive ``events`` frames of one turn become one (items concatenated, in order);
    the given frames are not changed (they were pushed locally as they are)."""
    out: list[dict[str, Any]] = []
    for frame in frames:
        last = out[-1] if out else None
        if last is not None and last["type"] == "events" == frame["type"] and last["turnId"] == frame["turnId"]:
            last["items"].extend(frame["items"])
        elif frame["type"] == "events":
            out.append({**frame, "items": list(frame["items"])})
        else:
            out.append(frame)
    return out


class LayerBatcher:
    """Gathers one turn's frames and forwards them to the layer in batches.

    Args:
        hub: the worker's hub (its layer, ``batch_interval`` and task registry).
        conversation_id: the turn's conversation (its group receives the batches).
        turn_id: for the task's name.
    """

    def __init__(self, hub: TurnHub, conversation_id: uuid.UUID, turn_id: str) -> None:
        self.hub, self.conversation_id, self.turn_id = hub, conversation_id, turn_id
        self._frames: list[dict[str, Any]] = []
        self._ready = asyncio.Event()
        self._closing = False

    def start(self) -> None:
        """Start forwarding (a hub task, so it finishes even after the runner's task)."""
        self.hub.spawn(self._forward(), name=f"jxai-turn-batches-{self.turn_id}")

    def add(self, frame: dict[str, Any]) -> None:
        """Queue ``frame`` for the next batch."""
        self._frames.append(frame)
        self._ready.set()

    def close(self) -> None:
        """The turn ended: send what is left at once, then stop."""
        self._closing = True
        self._ready.set()

    async def _forward(self) -> None:
        group = names.conversation_group(self.conversation_id)
        while True:
            await self._ready.wait()
            if not self._closing:
                await asyncio.sleep(self.hub.batch_interval)
            self._ready.clear()
            frames, self._frames = self._frames, []
            await self.hub.group_frames(group, self.conversation_id, merge_frames(frames))
            if self._closing and not self._frames:
                return
