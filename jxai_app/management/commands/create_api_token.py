"""``manage.py create_api_token <username> [--name NAME]``: issue a jxai API token (docs/api.md "Authentication").

The plaintext token is printed once on standard output (nothing else goes there, so it can
be captured: ``TOKEN=$(manage.py create_api_token alice)``); only its SHA-256 hash and a
short prefix are stored. Use it as ``Authorization: Bearer <token>`` or ``X-Api-Key: <token>``
on ``POST /ai/chat``. Revoke it in admin (set *revoked at*).

The command issues for any active user: it runs with the shell's rights (the database and
the settings are the operator's already), like a superuser in admin, where other staff may
issue tokens only for themselves (:mod:`jxai_app.policy.tokens`).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from jxai_app.models import ApiToken, SignInEvent
from jxai_app.policy import audit


class Command(BaseCommand):
    help = "Issue a jxai API token for a user and print its plaintext once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="The user the token acts as.")
        parser.add_argument("--name", default="cli", help="A label for the token (where it is used). Default: cli.")

    def handle(self, *args: Any, **options: Any) -> None:
        name = str(options["name"]).strip()
        if not name or len(name) > 100:
            raise CommandError("--name must be 1 to 100 characters.")
        user_model = get_user_model()
        try:
            user = user_model.objects.get(**{user_model.USERNAME_FIELD: options["username"]})
        except user_model.DoesNotExist:
            raise CommandError(f"No user named {options['username']!r}.") from None
        if not user.is_active:
            raise CommandError(f"The user {options['username']!r} is inactive; its tokens would not work.")
        token, plaintext = ApiToken.issue(user=user, name=name)
        audit.record(SignInEvent.TOKEN_ISSUED, user=user, actor="manage.py create_api_token",
                     detail=f"{name} ({token.prefix}…) from the command line")
        self.stdout.write(plaintext)
        self.stderr.write(f"Issued token {token.prefix}… ({name!r}) for {options['username']}. "
                          "It is shown only this once.")
