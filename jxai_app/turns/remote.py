"""A running turn's control channel on the channel layer: how sockets on other workers
reach it (issue 4 item 3: Stop from any tab, on any worker).

The runner listens on its own layer channel, in the group ``jxai.turnctl.<hex>``
(:func:`jxai_app.turns.names.control_group`), for:

- ``jxai.cancel``: set the Stop signal; answered at once (``{"cancelled": true, "turnId"}``);
- ``jxai.replay``: answered with the turn's state after ``afterSeq`` (resync, snapshots);
- ``jxai.follow`` / ``jxai.unfollow``: count sockets of other workers following the turn
  (``JXAI_CANCEL_ON_DISCONNECT``).

Answers go to the asker's ``reply_to`` channel as ``jxai.reply`` with its ``request`` id.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from jxai_app.turns import names
from jxai_app.turns.hub import receive_each

if TYPE_CHECKING:
    from jxai_app.turns.runner import TurnRunner

__all__ = ["ControlChannel"]

logger = logging.getLogger("jxai_app.turns")


class ControlChannel:
    """One runner's control channel (see the module docstring); nothing without a layer.

    Args:
        runner: the turn it controls.
    """

    def __init__(self, runner: TurnRunner) -> None:
        self.runner = runner
        self.channel: str | None = None

    async def serve(self) -> None:
        """Open the channel and answer control messages until cancelled."""
        await self._open()
        layer, channel = self.runner.hub.layer, self.channel
        if layer is None or channel is None:
            return
        await receive_each(layer, channel, self._handle, f"turn {self.runner.turn_id}: control channel failed")

    async def close(self) -> None:
        """Leave the control group (errors logged)."""
        layer, channel = self.runner.hub.layer, self.channel
        if layer is None or channel is None:
            return
        try:
            await layer.group_discard(names.control_group(self.runner.conversation_id), channel)
        except Exception:
            logger.exception("turn %s: cannot leave its control group", self.runner.turn_id)

    async def _open(self) -> None:
        layer = self.runner.hub.layer
        if layer is None:
            return
        try:
            self.channel = await layer.new_channel()
            await layer.group_add(names.control_group(self.runner.conversation_id), self.channel)
        except Exception:
            logger.exception("turn %s: cannot open its control channel", self.runner.turn_id)
            self.channel = None

    async def _handle(self, message: dict[str, Any]) -> None:
        runner = self.runner
        kind = message.get("type")
        if kind == names.CANCEL:
            runner.cancel()
            await self._reply(message, {"cancelled": True, "turnId": runner.turn_id})
        elif kind == names.REPLAY:
            after = message.get("afterSeq")
            state = runner.state(after if isinstance(after, int) and after >= 0 else 0)
            await self._reply(message, state.to_message())
        elif kind == names.FOLLOW and isinstance(message.get("follower"), str):
            runner.remote_followers.add(message["follower"])
        elif kind == names.UNFOLLOW:
            runner.remote_followers.discard(message.get("follower"))
            if message.get("closing"):
                runner.follower_left()

    async def _reply(self, request: dict[str, Any], body: dict[str, Any]) -> None:
        reply_to = request.get("reply_to")
        if not isinstance(reply_to, str):
            return
        try:
            await self.runner.hub.layer.send(reply_to, {"type": names.REPLY, "request": request.get("request"), **body})
        except Exception:
            logger.exception("turn %s: cannot answer %s", self.runner.turn_id, request.get("type"))
