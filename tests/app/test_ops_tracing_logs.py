"""OpenTelemetry spans of a turn (captured with the SDK's ``InMemorySpanExporter``) and JSON
log lines carrying the turn's ids (docs/operations.md "Tracing", "Logs")."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from jxai_app.core.logsafety import RedactSecretsFilter
from jxai_app.ops import tracing
from jxai_app.ops.jsonlog import JsonFormatter
from tests.app.turns_support import MODEL, Tab, fake, hub, text_script, tool_script  # noqa: F401
from tests.support.fake_provider import FakeProvider, json_response

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Install an in-memory exporter for this test; the tracing state is restored after it."""
    for name in ("_tracer", "_configured", "_capture_content"):
        monkeypatch.setattr(tracing, name, getattr(tracing, name))
    exporter = InMemorySpanExporter()
    yield exporter, lambda capture: tracing.install(SimpleSpanProcessor(exporter), capture_content=capture)


async def one_turn(user: Any, text: str) -> Tab:
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text=text)
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] != "streaming")
    await tab.close()
    return tab


async def test_a_turn_is_a_span_with_a_child_per_model_request_and_tool_call(
        user: Any, fake: FakeProvider, hub: Any, spans: Any) -> None:
    exporter, install = spans
    install(False)
    fake.add(tool_script("c1", "calculate", {"expression": "6*7"}),
             text_script(["It is ", "forty-two."], usage={"prompt_tokens": 70, "completion_tokens": 5}))
    tab = await one_turn(user, "What is 6*7? (secret words)")
    cid = tab.frames[0]["conversation"]["id"]

    finished = exporter.get_finished_spans()
    by_name = {s.name: s for s in finished}
    assert sorted(s.name for s in finished) == ["chat m", "chat m", "execute_tool calculate", "invoke_agent jxai"]
    turn = by_name["invoke_agent jxai"]
    assert turn.parent is None and turn.status.status_code is StatusCode.UNSET
    assert {k: turn.attributes[k] for k in ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model",
                                            "gen_ai.conversation.id", "jxai.model.alias", "jxai.turn.outcome",
                                            "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "fake", "gen_ai.request.model": "m",
        "gen_ai.conversation.id": cid, "jxai.model.alias": MODEL, "jxai.turn.outcome": "complete",
        "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 15}
    requests = [s for s in finished if s.name == "chat m"]
    for request in requests:
        assert request.parent.span_id == turn.context.span_id and request.kind is SpanKind.CLIENT
        assert request.attributes["gen_ai.operation.name"] == "chat"
    assert [r.attributes["gen_ai.response.finish_reasons"] for r in requests] == [("tool_calls",), ("stop",)]
    assert [r.attributes["gen_ai.usage.input_tokens"] for r in requests] == [50, 70]
    assert [r.attributes["jxai.usage.estimated"] for r in requests] == [False, False]
    tool = by_name["execute_tool calculate"]
    assert tool.parent.span_id == turn.context.span_id
    assert (tool.attributes["gen_ai.tool.name"], tool.attributes["gen_ai.tool.call.id"]) == ("calculate", "c1")
    every_value = json.dumps([dict(s.attributes) for s in finished])
    assert "forty-two" not in every_value and "6*7" not in every_value and "gen_ai.output.messages" not in every_value

    exporter.clear()
    install(True)  # JXAI_OTEL_CAPTURE_CONTENT=1
    fake.add(tool_script("c2", "calculate", {"expression": "2+2"}), text_script(["Four."]))
    await one_turn(user, "2+2?")
    captured = {s.name: s for s in exporter.get_finished_spans()}
    assert "2+2" in captured["execute_tool calculate"].attributes["gen_ai.tool.call.arguments"]
    assert "4" in captured["execute_tool calculate"].attributes["gen_ai.tool.call.result"]
    assert "Four." in captured["chat m"].attributes["gen_ai.output.messages"]


async def test_a_provider_error_marks_the_request_and_the_turn(user: Any, fake: FakeProvider, hub: Any,
                                                               spans: Any) -> None:
    exporter, install = spans
    install(False)
    fake.add(json_response(400, {"error": {"message": "bad"}}))
    await one_turn(user, "hi")
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    assert by_name["chat m"].attributes["error.type"] == "400"
    assert by_name["chat m"].status.status_code is StatusCode.ERROR
    assert by_name["invoke_agent jxai"].attributes["error.type"] == "invalid-request"
    assert by_name["invoke_agent jxai"].attributes["jxai.turn.outcome"] == "error"


async def test_log_lines_logged_for_a_turn_carry_its_ids(user: Any, fake: FakeProvider, hub: Any) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactSecretsFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        fake.add(text_script(["Hello."]))
        tab = await one_turn(user, "hi")
        logging.getLogger("jxai_app.test").warning("outside any turn: Bearer abcdefgh12345678")
    finally:
        root.removeHandler(handler)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    turn_end = next(i for i in tab.events() if i["event"]["type"] == "turn_end")
    assert turn_end
    request = next(line for line in lines if line["logger"] == "httpx")  # the model request, in the turn's task
    assert request["conversation_id"] == tab.frames[0]["conversation"]["id"]
    assert request["turn_id"] == next(iter(tab.items))
    assert {"time", "level", "message"} <= set(request)
    outside = lines[-1]
    assert "turn_id" not in outside and outside["message"] == "outside any turn: Bearer [redacted]"


def test_django_log_format_json_makes_every_line_json_with_credentials_redacted() -> None:
    code = ("import logging, django; django.setup(); log = logging.getLogger('jxai_app.check')\n"
            "log.warning('key %s', 'sk-proj-abcdefghijklmnopqrstuvwxyz')\n"
            "try:\n    raise RuntimeError('Authorization: Bearer abcdefgh12345678')\n"
            "except RuntimeError:\n    log.exception('failed')\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "DJANGO_LOG_FORMAT": "json",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [line["message"] for line in lines] == ["key [redacted]", "failed"]
    assert "RuntimeError" in lines[1]["exception"] and "abcdefgh12345678" not in lines[1]["exception"]
    assert all(line["logger"] == "jxai_app.check" and line["level"] in ("WARNING", "ERROR") for line in lines)
