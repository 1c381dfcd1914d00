"""A worker process for the usage-ledger tests: many processes hit the same database at once.

Usage: ``DATABASE_URL=… python -m tests.app.usage_worker MODE USER_ID COUNT``; it prints
``READY``, waits for a line on stdin (so every worker starts together), then

- ``usage``: records ``COUNT`` requests of 3 input + 2 output tokens (odd ones estimated);
- ``turns``: asks ``COUNT`` times for a turn and prints ``ADMITTED <n> REFUSED <m>``;
- ``quota``: the same for requests of a 100-token prompt, whose reservations the daily
  quota must hold (``JXAI_RESERVE_OUTPUT_TOKENS`` from the environment).
"""

from __future__ import annotations

import os
import sys


def main(mode: str, user_id: str, count: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from jxai_app.policy import ratelimit
    from jxai_app.core.errors import ProblemError

    user = get_user_model().objects.get(pk=int(user_id))
    print("READY", flush=True)
    sys.stdin.readline()
    admitted = refused = 0
    for i in range(int(count)):
        if mode == "usage":
            ratelimit.record_usage(user, {"inputTokens": 3, "outputTokens": 2}, estimated=bool(i % 2))
        else:
            try:
                ratelimit.check_turn_allowed(user, prompt_tokens=100 if mode == "quota" else 0)
                admitted += 1
            except ProblemError:
                refused += 1
    print(f"ADMITTED {admitted} REFUSED {refused}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
