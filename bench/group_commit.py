"""Group commit, measured before choosing it (docs/turns.md "Writes"): N sends prepared each in
its own transaction (what a worker does) against the same N in one transaction, each in a
savepoint (a refused send must not undo the others), in one process on PostgreSQL.

It calls the start's own preparation (``jxai_app.turns.start._prepare``: the send's save, the
entitlements, the admission and the plan's reads) for N users, each with a conversation of
its own, so both sides run exactly the statements a send runs. Prints the CPU and wall
milliseconds per send of each way, three times each, interleaved.

Usage (the database must exist; its tables are migrated here)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/jxai_bench .venv/bin/python bench/group_commit.py [--sends 40]

Run twice on 2026-12-03 (2 vCPU, PostgreSQL 15 on 127.0.0.1, 40 sends, six rounds each): a
transaction each 7.9–8.8 ms CPU and 11.1–12.0 ms wall per send; one transaction with a
savepoint each 8.2–9.9 ms CPU and 10.8–13.8 ms wall. Grouping saves no CPU and at most about
0.5 ms of wall time: the cost is the ORM's work per statement (about 0.4–0.5 ms of CPU each,
compiling and binding included), which grouping keeps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.e2e import bench_models, make_users, new_conversations, setup_django  # noqa: E402


def prepare_all(users: list[Any], grouped: bool) -> tuple[float, float]:
    """Prepare one send for each of ``users`` (a new conversation each); return CPU and wall
    milliseconds per send. The conversations are set idle again afterwards."""
    from django.db import transaction

    from jxai_app import store
    from jxai_app.models import Conversation
    from jxai_app.turns import start

    cids = new_conversations(users)

    def one(user: Any, cid: str) -> None:
        def save(**kwargs: Any) -> Any:
            return store.message_send(user=user, conversation_id=cid, text="hello", attachments=(), **kwargs)
        start._prepare(user, save, None, False, False)

    cpu, wall = time.process_time(), time.perf_counter()
    if grouped:
        with transaction.atomic():
            for user, cid in zip(users, cids):
                one(user, cid)
    else:
        for user, cid in zip(users, cids):
            one(user, cid)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    Conversation.objects.filter(pk__in=cids).update(status="idle", turn_id=None)
    return cpu * 1000 / len(users), wall * 1000 / len(users)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=40)
    args = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL", "")
    if not database_url.startswith("postgres"):
        print("DATABASE_URL must name a PostgreSQL database", file=sys.stderr)
        return 2
    os.environ.update(JXAI_DB_POOL="0", JXAI_TURNS_PER_MINUTE=str(10**9), JXAI_TOKENS_PER_DAY=str(10**15),
                      JXAI_MODELS_JSON=json.dumps(bench_models("http://127.0.0.1:9/v1")))
    setup_django(database_url)
    users = [user for user, _ in make_users(args.sends, f"group-{os.getpid()}")]
    for grouped in (False, True) * 3:
        cpu, wall = prepare_all(users, grouped)
        label = "one transaction, a savepoint each" if grouped else "a transaction each"
        print(f"{label:34} CPU {cpu:5.2f} ms/send   wall {wall:5.2f} ms/send")
    return 0


if __name__ == "__main__":
    sys.exit(main())
