"""``manage.py recover_partial_messages``: drop partial messages of turns that no longer run.

Run at start-up (``make run``) and, with several workers, from time to time. A turn is
dead when neither its heartbeat nor any write to its conversation's messages is newer than
``--stale-after`` seconds; ``--all`` treats every streaming turn as dead (a single-process
start, when no turn can be alive). See :mod:`jxai_app.store.recovery`.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jxai_app.store import STALE_AFTER_SECONDS, turns_recover


class Command(BaseCommand):
    help = "Drop streaming placeholders whose turn no longer runs and return their conversations to idle."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--stale-after", type=float, default=STALE_AFTER_SECONDS, metavar="SECONDS",
            help=f"seconds without a sign of life after which a turn is dead (default {STALE_AFTER_SECONDS:g})",
        )
        parser.add_argument(
            "--all", action="store_true", dest="everything",
            help="end every streaming turn regardless of its heartbeat (single-process start-up only)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["stale_after"] < 0:
            raise CommandError("--stale-after must not be negative", returncode=2)
        count = turns_recover(stale_after=options["stale_after"], everything=options["everything"])
        self.stdout.write(f"recovered {count} conversation{'s' if count != 1 else ''}")
