"""``manage.py ensure_demo_user``: a first account for ``make run`` on a fresh database.

When no user exists, creates ``demo`` (or ``--username``) with a freshly generated password and
prints both once (never a fixed password). When users exist, it changes
nothing and prints nothing secret.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

PASSWORD_BYTES = 12
"""Entropy of the generated password: 12 random bytes, 16 URL-safe characters."""
CHANGE_PASSWORD = ".venv/bin/python manage.py changepassword"
"""The command a ``make run`` user types to set a password (from the project folder)."""


class Command(BaseCommand):
    help = "Create a demo user with a generated password (printed once) when no user exists."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo", help="the demo user's name (default: demo)")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        password = secrets.token_urlsafe(PASSWORD_BYTES)
        with transaction.atomic():
            if user_model.objects.exists():
                created = False
            else:
                user_model.objects.create_user(username=options["username"], password=password)
                created = True
        if created:
            self.stdout.write(self.style.SUCCESS(
                f"Created the demo user. Log in with  username: {options['username']}  password: {password}\n"
                f"(shown once; change it with: {CHANGE_PASSWORD} {options['username']})"))
        else:
            self.stdout.write("Users already exist: log in with your account (no password shown; forgot it? "
                              f"{CHANGE_PASSWORD} USERNAME).")
