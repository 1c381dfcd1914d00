"""``manage.py group_entitlements GROUP [--models ALIAS,...] [--turns-per-minute N]
[--tokens-per-day N] [--cost-per-day USD] [--storage-bytes-per-user N]``: set a group's
entitlements and print what a member of it gets (docs/security.md "Group entitlements").

For operators who keep configuration in code; the same row admin edits inline on the group's
page. Options given are written (the group and its row are created when missing), options left
out are kept. ``--models ""`` = every configured model; a limit of ``0`` = unlimited, and ``""``
unsets it (the settings' default applies, unless another group of the member sets it). With no
option the group's entitlements are only printed. The printout is the group's alone: a member's
own ``UserLimits`` row and their other groups may change theirs (admin's user entitlements page).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from jxai_app import conf
from jxai_app.models import GroupEntitlements
from jxai_app.policy.entitlements import group_entitlements


def _count(text: str) -> int | None:
    if text.strip() == "":
        return None
    if not text.strip().isdigit():
        raise CommandError(f"A limit is a whole number ≥ 0 (0 = unlimited) or \"\" (unset), not {text!r}.")
    return int(text)


def _usd(text: str) -> Decimal | None:
    if text.strip() == "":
        return None
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        value = Decimal(-1)
    if not value.is_finite() or value < 0 or value != round(value, 4):
        raise CommandError(f"--cost-per-day is USD ≥ 0 with at most 4 decimals (0 = unlimited) or \"\", not {text!r}.")
    return value


class Command(BaseCommand):
    help = "Set a group's jxai entitlements (models and limits) and print what its members get."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("group", help="The Django group's name.")
        parser.add_argument("--models", help='Comma-separated model aliases members may use; "" = every model.')
        parser.add_argument("--turns-per-minute", dest="turns_per_minute", help="Turns per member per minute.")
        parser.add_argument("--tokens-per-day", dest="tokens_per_day", help="Tokens per member per UTC day.")
        parser.add_argument("--cost-per-day", dest="cost_per_day", help="USD per member per UTC day.")
        parser.add_argument("--storage-bytes-per-user", dest="storage_bytes_per_user",
                            help="Bytes of stored files per member.")

    def handle(self, *args: Any, **options: Any) -> None:
        changes = self._changes(options)
        name = options["group"]
        if changes:
            with transaction.atomic():
                group, _ = Group.objects.get_or_create(name=name)
                row, _ = GroupEntitlements.objects.select_for_update().get_or_create(group=group)
                for field, value in changes.items():
                    setattr(row, field, value)
                row.save()
        group = Group.objects.select_related("jxai_entitlements").filter(name=name).first()
        if group is None:
            raise CommandError(f"No group named {name!r}.")
        granted = group_entitlements(group)
        self.stdout.write(f"group {group.name}")
        models = "every configured model" if granted.models is None else ", ".join(sorted(granted.models))
        self.stdout.write(f"models: {models}")
        for limit in granted.limit_rows():
            self.stdout.write(f"{limit['label']}: {limit['value']} ({limit['source']})")

    @staticmethod
    def _changes(options: dict[str, Any]) -> dict[str, Any]:
        """The fields the options set, checked (aliases against the model registry)."""
        changes: dict[str, Any] = {}
        if options["models"] is not None:
            aliases = list(dict.fromkeys(a.strip() for a in options["models"].split(",") if a.strip()))
            configured = conf.get_model_registry().aliases()
            unknown = [alias for alias in aliases if alias not in configured]
            if unknown:
                raise CommandError(f"Unknown model alias(es) {', '.join(unknown)}; configured: {', '.join(configured)}.")
            changes["model_aliases"] = aliases
        for field in ("turns_per_minute", "tokens_per_day", "storage_bytes_per_user"):
            if options[field] is not None:
                changes[field] = _count(options[field])
        if options["cost_per_day"] is not None:
            changes["cost_per_day"] = _usd(options["cost_per_day"])
        return changes
