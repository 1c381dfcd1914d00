"""``manage.py purge_conversations [--dry-run]``: remove temporary chats idle longer than
``JXAI_TEMPORARY_CHAT_HOURS`` and conversations idle longer than ``JXAI_RETENTION_DAYS``
(docs/data.md "Temporary chats", "Retention"; run it from cron or a systemd timer).

With retention off (0, the default) it removes only expired temporary chats and says so. Prints one line per
conversation removed (``id owner=<user id> idle since <time> messages=<n>``) and a total;
never a title or any content.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from jxai_app import conf
from jxai_app.store.retention import conversations_purge
from jxai_app.store.temporary import temporary_chats_purge


class Command(BaseCommand):
    help = ("Remove expired temporary chats and conversations idle longer than JXAI_RETENTION_DAYS "
            "(never running, waiting or held ones).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = bool(options["dry_run"])
        verb = "would remove" if dry_run else "removed"
        temporary = temporary_chats_purge(now=timezone.now(), dry_run=dry_run)
        for pk in temporary:
            self.stdout.write(f"{verb} temporary chat {pk}")
        self.stdout.write(f"{verb} {len(temporary)} temporary chat(s) idle more than "
                          f"{conf.temporary_chat_hours():g} hour(s).")
        days = conf.retention_days()
        if not days:
            self.stdout.write("JXAI_RETENTION_DAYS is not set: other conversations are kept forever.")
            return
        purged = conversations_purge(now=timezone.now(), days=days, dry_run=dry_run)
        for row in purged:
            self.stdout.write(f"{verb} {row.id} owner={row.owner_id} idle since {row.updated_at.isoformat()} "
                              f"messages={row.messages}")
        self.stdout.write(f"{verb} {len(purged)} conversation(s) idle more than {days} day(s).")
