"""``manage.py purge_conversations [--dry-run]``: remove conversations idle longer than
``JXAI_RETENTION_DAYS`` (docs/data.md "Retention"; run it daily from cron or a systemd timer).

With the setting off (0, the default) it removes nothing and says so. Prints one line per
conversation removed (``id owner=<user id> idle since <time> messages=<n>``) and a total;
never a title or any content.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from jxai_app import conf
from jxai_app.store.retention import conversations_purge


class Command(BaseCommand):
    help = "Remove conversations idle longer than JXAI_RETENTION_DAYS (never running, waiting or held ones)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        days = conf.retention_days()
        if not days:
            self.stdout.write("JXAI_RETENTION_DAYS is not set: conversations are kept forever; nothing removed.")
            return
        dry_run = bool(options["dry_run"])
        purged = conversations_purge(now=timezone.now(), days=days, dry_run=dry_run)
        verb = "would remove" if dry_run else "removed"
        for row in purged:
            self.stdout.write(f"{verb} {row.id} owner={row.owner_id} idle since {row.updated_at.isoformat()} "
                              f"messages={row.messages}")
        self.stdout.write(f"{verb} {len(purged)} conversation(s) idle more than {days} day(s).")
