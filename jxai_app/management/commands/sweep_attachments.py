"""``manage.py sweep_attachments``: remove uploads no message claimed within a day, rows and
files (docs/attachments.md "Unclaimed uploads"). Run it from cron or a scheduler, e.g. hourly;
``--older-than`` in hours (default 24).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jxai_app.store import attachments_sweep
from jxai_app.store.attachments import UNCLAIMED_FOR


class Command(BaseCommand):
    help = "Remove attachments no message claimed within --older-than hours (default 24), with their files."

    def add_arguments(self, parser: CommandParser) -> None:
        hours = UNCLAIMED_FOR / timedelta(hours=1)
        parser.add_argument("--older-than", type=float, default=hours, metavar="HOURS",
                            help=f"age in hours after which an unclaimed upload is removed (default {hours:g})")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["older_than"] < 0:
            raise CommandError("--older-than must not be negative", returncode=2)
        removed = attachments_sweep(older_than=timedelta(hours=options["older_than"]))
        self.stdout.write(f"removed {removed} unclaimed attachment{'s' if removed != 1 else ''}")
