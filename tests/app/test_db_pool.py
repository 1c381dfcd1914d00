"""PostgreSQL sessions stay bounded under a burst of ``POST /ai/chat`` (marker ``scaleout``;
docs/operations.md "Database connections").

Real ``daphne`` workers (:class:`tests.support.workers.Cluster`) on the test database with a
small connection pool (``JXAI_DB_POOL_MAX=4``, fewer than the 8 database threads, so the pool
is where a burst queues), a FakeProvider as the model, and real HTTP from ``httpx``. While
the burst runs, a thread on a connection of its own samples ``pg_stat_activity`` every few
milliseconds. Every request either streams its whole answer (SSE ending in ``done``) or is
refused with the ``service-unavailable`` problem and ``Retry-After``; none is a 500, and the
workers never hold more than ``JXAI_DB_POOL_MAX`` sessions each.

The workers' sessions carry an ``application_name`` of their own (a query parameter of their
``DATABASE_URL``), so the sampler tells them from this test process's own connections (the
headroom the count allows beside them).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from channels.db import database_sync_to_async
from django.middleware.csrf import _get_new_csrf_string

from tests.app.cluster_support import SCALEOUT_MARKS, cluster  # noqa: F401  (cluster: on this module's provider)
from tests.app.turns_support import MODEL, models_config, text_script
from tests.support.fake_provider import FakeProvider, Script
from tests.support.workers import Cluster, Worker, session_cookie

pytestmark = SCALEOUT_MARKS

POOL_MAX = 4
"""``JXAI_DB_POOL_MAX`` of the test workers (their ``JXAI_DB_THREADS`` stays at 8)."""
POOL_TIMEOUT = 1.0
"""``JXAI_DB_POOL_TIMEOUT`` of the test workers, seconds."""
HEADROOM = 4
"""Sessions on the test database besides the workers' own: this test process's (pytest-django's
connection, the sync thread's, the lock holder's; the sampler leaves itself out)."""
WORKER_ENV = {
    "JXAI_DB_POOL_MAX": str(POOL_MAX),
    "JXAI_DB_POOL_MIN": "1",
    "JXAI_DB_POOL_TIMEOUT": str(POOL_TIMEOUT),
    "JXAI_TURNS_PER_MINUTE": "0",  # one user sends the whole burst
}
HELLO = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello to the pool."}]}
SLOW = {"model": MODEL, "messages": [{"role": "user", "content": "Take your time."}]}
ANSWER = ["Hello", ", ", "pool", "."]


def _answer(request: Any) -> Script:
    """:data:`ANSWER` in about 0.2 s, or 2 s when the question is :data:`SLOW`."""
    slow = SLOW["messages"][0]["content"] in json.dumps(request.json)
    return text_script(ANSWER, delay=0.5 if slow else 0.05, usage={"prompt_tokens": 8, "completion_tokens": 4})


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    """A FakeProvider answering every request with :data:`ANSWER` (:func:`_answer`)."""
    fake = FakeProvider(handler=_answer)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def _pg_params(application_name: str) -> dict[str, Any]:
    """psycopg connection parameters for the test database (directly, not through the proxy)."""
    from django.db import connection

    s = connection.settings_dict
    return {"host": s.get("HOST") or "127.0.0.1", "port": int(s.get("PORT") or 5432), "user": s.get("USER") or None,
            "password": s.get("PASSWORD") or None, "dbname": s["NAME"], "application_name": application_name,
            "autocommit": True}


@dataclass
class SessionSampler:
    """Counts the test database's sessions in ``pg_stat_activity`` every ``every`` seconds on a
    connection of its own (itself left out), until stopped."""

    workers_name: str
    every: float = 0.005
    peak_workers: int = 0
    peak_total: int = 0
    peak_others: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def _run(self) -> None:
        try:
            with psycopg.connect(**_pg_params("jxai-test-sampler")) as conn:
                while True:
                    row = conn.execute(
                        "SELECT count(*) FILTER (WHERE application_name = %s), count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
                        [self.workers_name]).fetchone()
                    assert row is not None
                    workers, total = int(row[0]), int(row[1])
                    self.peak_workers = max(self.peak_workers, workers)
                    self.peak_total = max(self.peak_total, total)
                    self.peak_others = max(self.peak_others, total - workers)
                    self.samples += 1
                    if self._stop.wait(self.every):
                        return
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> SessionSampler:
        self._thread = threading.Thread(target=self._run, name="pg-session-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(10)
        if self.error is not None:
            raise AssertionError(f"the session sampler failed: {self.error!r}") from self.error


@dataclass
class Outcome:
    """One ``POST /ai/chat``: its status, headers and body."""

    status: int
    headers: httpx.Headers
    body: bytes

    def events(self) -> list[dict[str, Any]]:
        text = self.body.decode()
        return [json.loads(block[len("data: "):]) for block in text.split("\n\n") if block.startswith("data: ")]


async def _post_chat(client: httpx.AsyncClient, worker: Worker, headers: dict[str, str],
                     payload: dict[str, Any] = HELLO) -> Outcome:
    async with client.stream("POST", f"http://127.0.0.1:{worker.port}/ai/chat", json=payload,
                             headers=headers) as response:
        return Outcome(response.status_code, response.headers, await response.aread())


def assert_completed_or_refused(outcome: Outcome) -> str:
    """``"done"`` for a whole answer, ``"refused"`` for the 503 problem; anything else fails."""
    if outcome.status == 200:
        events = outcome.events()
        assert events and events[-1] == {"type": "done", "stopReason": "stop"}, outcome.body[-500:]
        assert "".join(e["content"] for e in events if e["type"] == "delta") == "".join(ANSWER)
        return "done"
    assert outcome.status == 503, f"HTTP {outcome.status}: {outcome.body[:800]!r}"
    assert outcome.headers["Content-Type"] == "application/problem+json", outcome.headers
    problem = json.loads(outcome.body)
    assert problem["type"].endswith("/service-unavailable") and problem["status"] == 503, problem
    assert int(outcome.headers["Retry-After"]) == problem["retry_after"] >= 1, (outcome.headers, problem)
    return "refused"


def _start(cluster: Cluster, *names: str) -> tuple[list[Worker], str]:
    """Start the workers with the small pool; their sessions' ``application_name``."""
    name = f"jxai-pooltest-{os.urandom(3).hex()}"
    url = f"{cluster.env['DATABASE_URL']}?application_name={name}"
    return cluster.start(*names, DATABASE_URL=url, **WORKER_ENV), name


def _session_headers(cookie: str) -> dict[str, str]:
    """A logged-in session's headers for a POST: its cookie and the CSRF pair."""
    csrf = _get_new_csrf_string()  # the secret Django itself puts in the cookie
    return {"Cookie": f"{cookie}; csrftoken={csrf}", "X-CSRFToken": csrf}


def _token(user: Any) -> str:
    from jxai_app.models import ApiToken

    return str(ApiToken.issue(user=user, name="pool burst")[1])


def client() -> httpx.AsyncClient:
    """Real HTTP, no connection limit (every request of a burst is in flight at once)."""
    return httpx.AsyncClient(timeout=60, trust_env=False,
                             limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))


async def test_a_burst_of_three_pools_completes_or_is_refused_and_sessions_stay_bounded(
        user: Any, cluster: Cluster) -> None:
    workers, name = _start(cluster, "a", "b")
    token = await database_sync_to_async(_token)(user)
    headers = {"Authorization": f"Bearer {token}"}
    per_worker = 3 * POOL_MAX
    async with client() as http:
        with SessionSampler(name) as sampler:
            outcomes = await asyncio.gather(*[_post_chat(http, worker, headers)
                                              for worker in workers for _ in range(per_worker)])
    kinds = [assert_completed_or_refused(o) for o in outcomes]
    print(f"burst of {len(outcomes)}: {kinds.count('done')} done, {kinds.count('refused')} refused; "
          f"peak sessions: workers {sampler.peak_workers}, total {sampler.peak_total} ({sampler.samples} samples)")
    assert kinds.count("done") >= 1
    assert sampler.samples >= 20
    assert 1 <= sampler.peak_workers <= POOL_MAX * len(workers)
    assert sampler.peak_others <= HEADROOM
    assert sampler.peak_total <= POOL_MAX * len(workers) + HEADROOM


async def test_a_pool_held_full_refuses_with_service_unavailable_never_500(user: Any, cluster: Cluster) -> None:
    """Every connection of the pool blocked (a lock this test holds on the token table): the
    token lookups beyond the pool wait ``JXAI_DB_POOL_TIMEOUT`` and are refused with the 503
    problem, as are session-authenticated requests (their user is read by Django in the
    request's sync thread: the middleware's case); once the lock goes, the blocked ones finish
    and the worker answers again."""
    from jxai_app.models import ApiToken

    (worker,), name = _start(cluster, "a")
    token = await database_sync_to_async(_token)(user)
    cookie = await database_sync_to_async(session_cookie)(user)
    by_token = {"Authorization": f"Bearer {token}"}
    by_session = _session_headers(cookie)
    async with client() as http:
        assert assert_completed_or_refused(await _post_chat(http, worker, by_token)) == "done"  # warm
        assert assert_completed_or_refused(await _post_chat(http, worker, by_session)) == "done"
        with SessionSampler(name) as sampler, psycopg.connect(**{**_pg_params("jxai-test-lock"),
                                                                 "autocommit": False}) as lock:
            lock.execute(f'LOCK TABLE "{ApiToken._meta.db_table}" IN ACCESS EXCLUSIVE MODE')
            token_burst = [asyncio.create_task(_post_chat(http, worker, by_token)) for _ in range(3 * POOL_MAX)]
            await asyncio.sleep(0.5)  # the first lookups hold every pooled connection, blocked
            session_burst = [asyncio.create_task(_post_chat(http, worker, by_session)) for _ in range(3)]
            await asyncio.sleep(POOL_TIMEOUT * 2 + 1.5)
            lock.rollback()
            token_outcomes = await asyncio.gather(*token_burst)
            session_outcomes = await asyncio.gather(*session_burst)
        after = await _post_chat(http, worker, by_token)
    token_kinds = [assert_completed_or_refused(o) for o in token_outcomes]
    session_kinds = [assert_completed_or_refused(o) for o in session_outcomes]
    print(f"held pool: tokens {token_kinds}, sessions {session_kinds}; peak sessions: workers "
          f"{sampler.peak_workers}, total {sampler.peak_total}")
    assert "refused" in token_kinds and "done" in token_kinds
    assert session_kinds == ["refused"] * 3
    assert assert_completed_or_refused(after) == "done"
    assert sampler.peak_workers <= POOL_MAX
    assert sampler.peak_total <= POOL_MAX + HEADROOM
    assert "Internal Server Error" not in worker.log()


async def test_session_streams_do_not_hold_the_pool(user: Any, cluster: Cluster) -> None:
    """Twice as many session-authenticated streams as the pool, each 2 s long, all at once:
    Django reads each one's user in its request thread, and that connection goes back to the
    pool before the stream (the middleware), so none of them waits for the pool; kept for the
    stream, the fifth would wait ``JXAI_DB_POOL_TIMEOUT`` and be refused."""
    (worker,), name = _start(cluster, "a")
    headers = _session_headers(await database_sync_to_async(session_cookie)(user))
    async with client() as http:
        with SessionSampler(name) as sampler:
            outcomes = await asyncio.gather(*[_post_chat(http, worker, headers, SLOW) for _ in range(2 * POOL_MAX)])
    assert [assert_completed_or_refused(o) for o in outcomes] == ["done"] * (2 * POOL_MAX)
    assert sampler.peak_workers <= POOL_MAX
