"""``manage.py recover_partial_messages``: recover turns whose worker died (docs/turns.md "Leases").

The workers do this themselves within seconds; the command is for a start-up (``make run``)
and for operators. A turn is dead when its lease was not renewed for ``--stale-after``
seconds (default ``JXAI_TURN_LEASE_SECONDS``); ``--all`` treats every streaming turn as dead
(a single-process start, when no turn can be alive). Each recovered conversation's tabs are
told, on every worker, through the channel layer when one is shared.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.core.management.base import BaseCommand, CommandError, CommandParser

from jxai_app import conf
from jxai_app.store import strays_drop
from jxai_app.turns.frames import snapshot_of
from jxai_app.turns.hub import choose_delivery
from jxai_app.turns.recovery import publish_recovered, recover_turns


class Command(BaseCommand):
    help = "Recover turns whose lease lapsed: drop their partial messages and tell their tabs."

    def add_arguments(self, parser: CommandParser) -> None:
        lease = conf.get_turn_timing().lease
        parser.add_argument(
            "--stale-after", type=float, default=lease, metavar="SECONDS",
            help=f"seconds without a lease renewal after which a turn is dead (default {lease:g})",
        )
        parser.add_argument(
            "--all", action="store_true", dest="everything",
            help="end every streaming turn regardless of its lease (single-process start-up only)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["stale_after"] < 0:
            raise CommandError("--stale-after must not be negative", returncode=2)
        recovered = recover_turns(lease=options["stale_after"], everything=options["everything"])
        strays_drop()
        frames = [(turn.owner_id, snapshot_of(turn.conversation_id)) for turn in recovered]
        async_to_sync(self._publish)(frames)
        count = len(recovered)
        self.stdout.write(f"recovered {count} conversation{'s' if count != 1 else ''}")

    async def _publish(self, frames: list[tuple[Any, dict[str, Any] | None]]) -> None:
        delivery = choose_delivery("recover_partial_messages")
        for owner, frame in frames:
            if frame is not None:
                publish_recovered(delivery, owner, frame)
        await delivery.flush()
