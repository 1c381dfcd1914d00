"""What one send and one one-round answer cost the database (docs/turns.md "Writes"): the
statements Django sends and the database thread hops, counted in one worker process on the
embedded default (SQLite), a send into an existing conversation, the provider answering at once.

Run from a checkout (the numbers of another checkout: run its copy of this file from there)::

    .venv/bin/python bench/send_cost.py [--sql]

Prints ``{"statements", "hops", "first_request_statements", "first_request_hops"}``: all of the
turn, and those before the provider received the model request; ``--sql`` prints the
statements too, in order (the first 200 characters of each). A hop is one call handed to a
database thread (``asgiref.sync.SyncToAsync.thread_handler``, which every way in uses). The
fewest of three runs: the worker's lease watch looks once a second, and its query can land
inside the measured turn.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TEST = '''
import asyncio, json, threading
from typing import Any
import pytest
from asgiref.sync import SyncToAsync
from django.db.backends.utils import CursorWrapper
from tests.app.turns_support import Tab, fake, hub, text_script  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


async def test_send_cost(user: Any, fake: Any, hub: Any, monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.JXAI_TURN_LEASE_SECONDS = 600  # no lease renewal inside the measured turn
    counts = {"statements": 0, "hops": 0}
    statements: list[str] = []
    lock = threading.Lock()
    real_execute, real_handler = CursorWrapper.execute, SyncToAsync.thread_handler

    def execute(self, *args, **kwargs):
        with lock:
            counts["statements"] += 1
            statements.append(str(args[0] if args else kwargs.get("sql"))[:200])
        return real_execute(self, *args, **kwargs)

    def handler(self, *args, **kwargs):
        if getattr(self.func, "__name__", "") != "no_op":  # Channels' test harness, not the app
            with lock:
                counts["hops"] += 1
        return real_handler(self, *args, **kwargs)

    monkeypatch.setattr(CursorWrapper, "execute", execute)
    monkeypatch.setattr(SyncToAsync, "thread_handler", handler)
    fake.add(text_script(["Hel", "lo"]), text_script(["Hel", "lo"]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="warm up")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    cid = tab.of_type("conversation")[0]["conversation"]["id"]
    await asyncio.sleep(0.3)
    counts["statements"] = counts["hops"] = 0
    statements.clear()
    fake.request_received.clear()
    first: dict[str, int] = {}
    def at_request() -> None:
        fake.request_received.wait(10)
        first.update(counts)

    watcher = threading.Thread(target=at_request)
    watcher.start()
    await tab.send(type="send", conversationId=cid, text="Say hello.")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    watcher.join(5)
    await asyncio.sleep(0.3)
    print("SEND_COST " + json.dumps({**counts, "first_request_statements": first.get("statements"),
                                     "first_request_hops": first.get("hops"), "sql": statements}))
    await tab.close()
'''


def main() -> int:
    path = ROOT / "tests" / "app" / "test_zz_send_cost.py"  # the test support's fixtures live there
    path.write_text(TEST)
    runs = []
    try:
        for _ in range(3):
            out = subprocess.run([sys.executable, "-m", "pytest", str(path), "-q", "-s", "-p", "no:cacheprovider"],
                                 cwd=ROOT, capture_output=True, text=True)
            lines = [line for line in out.stdout.splitlines() if line.startswith("SEND_COST ")]
            if not lines:
                print(out.stdout[-3000:], out.stderr[-2000:])
                return 1
            runs.append(json.loads(lines[0].removeprefix("SEND_COST ")))
    finally:
        path.unlink()
    best = min(runs, key=lambda run: (run["statements"], run["hops"]))
    sql = best.pop("sql")
    print(json.dumps(best))
    if "--sql" in sys.argv[1:]:
        for number, statement in enumerate(sql, 1):
            print(f"{number:3} {statement}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
