"""Metrics of turns in one worker, and who may read ``/metrics`` (docs/operations.md "Metrics").

A real websocket (Channels' ``WebsocketCommunicator``) and a FakeProvider on 127.0.0.1 play a
scripted turn, a cancelled one and a provider error; the counters are read from this
process's registry before and after. The same three under two daphne workers, read through
``/metrics`` of either: ``test_ops_workers.py``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.app.turns_support import MODEL, Tab, fake, hub, text_script, tool_script  # noqa: F401
from tests.support.fake_provider import FakeProvider, Script, json_response, openai_chunk, sse_json

pytestmark = pytest.mark.django_db(transaction=True)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """The change of chosen samples between construction and :meth:`__call__`."""

    def __init__(self, *keys: tuple[str, dict[str, str]]) -> None:
        self.keys = keys
        self.before = [sample(name, **labels) for name, labels in keys]

    def __call__(self) -> list[float]:
        return [sample(name, **labels) - b for (name, labels), b in zip(self.keys, self.before)]


async def run_turn(user: Any, text: str = "hi") -> Tab:
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text=text)
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] != "streaming")
    return tab


async def test_a_scripted_turn_a_cancelled_turn_and_a_provider_error_are_counted(
        user: Any, fake: FakeProvider, hub: Any) -> None:
    ended = "jxai_turns_ended_total"
    changes = Delta(
        ("jxai_turns_started_total", {"model": MODEL}),
        (ended, {"model": MODEL, "outcome": "complete", "problem_type": ""}),
        (ended, {"model": MODEL, "outcome": "cancelled", "problem_type": ""}),
        (ended, {"model": MODEL, "outcome": "error", "problem_type": "invalid-request"}),
        ("jxai_provider_requests_total", {"provider": "fake", "status": "ok"}),
        ("jxai_provider_requests_total", {"provider": "fake", "status": "cancelled"}),
        ("jxai_provider_requests_total", {"provider": "fake", "status": "400"}),
        ("jxai_tool_calls_total", {"tool": "calculate", "outcome": "success"}),
        ("jxai_time_to_first_token_seconds_count", {"model": MODEL}),
        ("jxai_turn_duration_seconds_count", {"model": MODEL}),
    )
    tokens = Delta(("jxai_tokens_total", {"model": MODEL, "direction": "input"}),
                   ("jxai_tokens_total", {"model": MODEL, "direction": "output"}))
    active = sample("jxai_active_turns")

    # 1. scripted: a tool round, then the answer (provider usage both times)
    fake.add(tool_script("c1", "calculate", {"expression": "6*7"}),
             text_script(["The answer ", "is 42."], usage={"prompt_tokens": 70, "completion_tokens": 5}))
    tab = await run_turn(user, "What is 6*7?")
    assert tab.text(kind="delta").endswith("is 42.")
    assert tokens() == [50 + 70, 10 + 5]  # the provider's usage of both rounds

    # 2. cancelled mid-answer
    fake.add(text_script(["a "] * 5000, delay=0.01))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Talk.")
    await tab.until_event("delta")
    assert sample("jxai_active_turns") == active + 1
    await tab.send(type="cancel", conversationId=tab.frames[0]["conversation"]["id"])
    await tab.until_event("turn_end", outcome="cancelled")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")

    # 3. the provider refuses (400: not retried)
    fake.add(json_response(400, {"error": {"message": "bad model", "type": "invalid_request_error"}}))
    tab = await run_turn(user)
    assert tab.of_type("conversation")[-1]["conversation"]["status"] == "error"

    await hub.wait_idle()
    assert changes() == [3, 1, 1, 1, 2, 1, 1, 1, 2, 3]
    assert sample("jxai_active_turns") == active


def test_metrics_are_readable_from_allowed_addresses_or_with_the_token(
        client: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    answer = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
    names = {family.name for family in text_string_to_metric_families(answer.content.decode())}
    assert {"jxai_turns_started", "jxai_turns_ended", "jxai_active_turns", "jxai_websockets_open",
            "jxai_time_to_first_token_seconds", "jxai_layer_publish_failures", "jxai_store_write_retries"} <= names

    refused = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert refused.status_code == 403 and refused["Content-Type"] == "application/problem+json"
    assert b"jxai_turns" not in refused.content

    settings.JXAI_METRICS_ALLOWED_IPS = ["10.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403

    monkeypatch.setenv("JXAI_METRICS_TOKEN", "s3cret-scrape-token")
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9",
                      HTTP_AUTHORIZATION="Bearer s3cret-scrape-token").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9",
                      HTTP_AUTHORIZATION="Bearer wrong").status_code == 403


def test_healthz_answers_without_login(client: Any) -> None:
    answer = client.get("/healthz")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


async def test_readyz_answers_ok_then_fails_once_the_worker_drains(hub: Any) -> None:
    from django.test import AsyncClient

    client = AsyncClient()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10.0
    ready = await client.get("/readyz")  # starts the hub; with Redis, ready once the layer is joined
    while ready.status_code != 200 and loop.time() < deadline:
        await asyncio.sleep(0.1)
        ready = await client.get("/readyz")
    assert ready.status_code == 200, ready.content
    assert json.loads(ready.content) == {"status": "ok", "checks": {"database": "ok", "channel_layer": "ok",
                                                                    "drain": "ok"}}
    await hub.drain(0.0)  # what SIGTERM starts under daphne
    draining = await client.get("/readyz")
    assert draining.status_code == 503 and json.loads(draining.content)["checks"]["drain"] == "draining"
    assert (await client.get("/healthz")).status_code == 200  # alive all the same


async def test_a_providers_own_error_codes_map_to_a_bounded_set_of_statuses(
        user: Any, fake: FakeProvider, hub: Any) -> None:
    def requests(status: str) -> tuple[str, dict[str, str]]:
        return ("jxai_provider_requests_total", {"provider": "fake", "status": status})

    codes = [987654, 123456789, 499, 404]  # an error object inside a 200 stream, each with its own integer code
    changes = Delta(requests("other"), requests("4xx"), requests("404"))
    for code in codes:
        fake.add(Script(writes=[openai_chunk({"role": "assistant", "content": ""}),
                                sse_json({"error": {"message": "provider trouble", "code": code}})]))
        tab = await run_turn(user)
        assert tab.of_type("conversation")[-1]["conversation"]["status"] == "error"
    await hub.wait_idle()
    assert changes() == [2, 1, 1]
    statuses = {s.labels["status"] for family in text_string_to_metric_families(generate_latest(REGISTRY).decode())
                for s in family.samples if family.name == "jxai_provider_requests"}
    assert not statuses & {"987654", "123456789", "499"}
