"""``/metrics`` and ``/readyz`` of two daphne workers sharing PostgreSQL and Redis (marker
``scaleout``; docs/operations.md "Metrics", "Health").

The workers share one ``PROMETHEUS_MULTIPROC_DIR`` (this test's own), so either worker's
``/metrics`` counts what both did: a scripted turn on A, a cancelled one on B and a provider
error on A (a 503, retried once, then given up). ``/readyz`` fails while the database is cut
(the cluster's TCP proxy) and comes back with it, and fails on a worker draining after SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from channels.db import database_sync_to_async as sync_to_async
from prometheus_client.parser import text_string_to_metric_families

from tests.app.cluster_support import SCALEOUT_MARKS, cluster, provider  # noqa: F401
from tests.app.turns_support import MODEL, text_script
from tests.support.fake_provider import FakeProvider, json_response
from tests.support.workers import Cluster, Worker, WsClient, session_cookie

pytestmark = SCALEOUT_MARKS


def get(worker: Worker, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}{path}", timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


async def aget(worker: Worker, path: str) -> tuple[int, bytes]:
    return await asyncio.to_thread(get, worker, path)


def samples(worker: Worker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = get(worker, "/metrics")
    assert status == 200, body
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def until_ready(worker: Worker, want: int, timeout: float = 20.0) -> dict[str, Any]:
    """Ask ``/readyz`` until it answers ``want``; its body."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        status, body = await aget(worker, "/readyz")
        if status == want:
            return dict(json.loads(body))
        assert loop.time() < deadline, f"/readyz stayed {status}: {body!r}"
        await asyncio.sleep(0.2)


async def turn(client: WsClient, cid: str, text: str, outcome: str) -> None:
    await client.send(type="send", conversationId=cid, text=text)
    await client.until_event("turn_end", outcome=outcome)
    await client.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] != "streaming")


async def test_metrics_of_both_workers_count_a_turn_a_stop_and_a_provider_error(
        user: Any, provider: FakeProvider, cluster: Cluster, tmp_path: Path) -> None:
    from jxai_app import store

    shared = tmp_path / "prometheus"
    shared.mkdir()
    worker_a, worker_b = cluster.start("a", "b", PROMETHEUS_MULTIPROC_DIR=str(shared), JXAI_UPSTREAM_RETRIES="1")
    cookie = await sync_to_async(session_cookie)(user)
    one, two, three = [str((await sync_to_async(store.conversation_create)(user=user, model=MODEL)).pk)
                       for _ in range(3)]
    provider.add(text_script(["Hello ", "there."], usage={"prompt_tokens": 11, "completion_tokens": 4}),
                 text_script(["word "] * 3000, delay=0.01),
                 json_response(503, {"error": {"message": "overloaded"}}),
                 json_response(503, {"error": {"message": "still overloaded"}}))

    async with WsClient(worker_a.port, cookie) as a, WsClient(worker_b.port, cookie) as b:
        await turn(a, one, "Say hello.", "complete")
        await b.send(type="send", conversationId=two, text="Talk until stopped.")
        await b.until_event("delta")
        during = await asyncio.to_thread(samples, worker_a)
        assert value(during, "jxai_active_turns") == 1  # B's turn, seen through A
        await b.send(type="cancel", conversationId=two)
        await b.until_event("turn_end", outcome="cancelled")
        await turn(a, three, "Fail, please.", "error")
        seen = [await asyncio.to_thread(samples, worker) for worker in (worker_a, worker_b)]
        assert value(seen[0], "jxai_websockets_open") == 2

    for found in seen:  # the same merged counts from either worker
        assert value(found, "jxai_turns_started_total", model=MODEL) == 3
        ended = {(labels["outcome"], labels["problem_type"]): count for (name, pairs), count in found.items()
                 if name == "jxai_turns_ended_total" for labels in [dict(pairs)]}
        assert ended == {("complete", ""): 1, ("cancelled", ""): 1, ("error", "upstream-failure"): 1}
        assert value(found, "jxai_provider_requests_total", provider="fake", status="ok") == 1
        assert value(found, "jxai_provider_requests_total", provider="fake", status="cancelled") == 1
        assert value(found, "jxai_provider_requests_total", provider="fake", status="503") == 1
        assert value(found, "jxai_provider_retries_total", provider="fake", status="503") == 1
        assert value(found, "jxai_tokens_total", model=MODEL, direction="input") >= 11
        assert value(found, "jxai_time_to_first_token_seconds_count", model=MODEL) == 2
        assert value(found, "jxai_turn_duration_seconds_count", model=MODEL) == 3
        assert value(found, "jxai_active_turns") == 0
        labels = {k for (_, pairs) in found for k, _ in pairs}
        assert not labels & {"user", "user_id", "conversation", "conversation_id", "text"}


async def test_readyz_fails_while_the_database_is_cut_and_while_draining(
        user: Any, provider: FakeProvider, cluster: Cluster) -> None:
    from jxai_app import store

    worker_a, worker_b = cluster.start("a", "b", JXAI_DRAIN_SECONDS="20")
    assert (await until_ready(worker_a, 200))["checks"] == {"database": "ok", "channel_layer": "ok", "drain": "ok"}

    cluster.db_proxy.cut()
    down = await until_ready(worker_a, 503)
    assert down["checks"]["database"] == "unreachable" and down["checks"]["drain"] == "ok"
    assert (await aget(worker_a, "/healthz"))[0] == 200  # alive, not ready
    cluster.db_proxy.restore()
    await until_ready(worker_a, 200)

    cookie = await sync_to_async(session_cookie)(user)
    cid = str((await sync_to_async(store.conversation_create)(user=user, model=MODEL)).pk)
    provider.add(text_script(["slow "] * 400, delay=0.02))
    async with WsClient(worker_a.port, cookie) as a:
        await a.send(type="send", conversationId=cid, text="Take your time.")
        await a.until_event("delta")
        worker_a.signal(signal.SIGTERM)  # drains: the turn may run on for up to 20 s
        draining = await until_ready(worker_a, 503)
        assert draining["checks"] == {"database": "ok", "channel_layer": "ok", "drain": "draining"}
        await until_ready(worker_b, 200)  # the other worker takes the traffic
        await a.until_event("turn_end", timeout=30)
    assert worker_a.wait_exit(30) is not None
