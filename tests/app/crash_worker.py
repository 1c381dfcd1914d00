"""A worker process that starts a turn, streams some text, then hangs until it is
killed (the crash test kills it with SIGKILL mid-turn).

Usage: ``DATABASE_URL=… python -m tests.app.crash_worker USER_ID CONVERSATION_ID``; prints
``READY <message id>`` once the partial text is saved.
"""

from __future__ import annotations

import os
import sys
import time


def main(user_id: str, conversation_id: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from jxai_app import store
    from tests.app.store_support import TurnFeed

    user = get_user_model().objects.get(pk=int(user_id))
    turn = store.message_send(user=user, conversation_id=conversation_id, text="Tell me a long story")
    recorder = TurnFeed(turn)
    recorder.add_delta("Once upon a time")
    assert store.leases_renew([recorder.turn_id])
    print(f"READY {turn.assistant_message_id}", flush=True)
    while True:
        recorder.add_delta(" and then")
        time.sleep(0.05)


if __name__ == "__main__":
    main(*sys.argv[1:3])
