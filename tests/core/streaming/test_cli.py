"""The command line ``python -m jxai_app.core.streaming`` (docs/streaming.md "The command line"): JSON lines on
stdout and exit status 0 (done), 1 (error), 2 (bad arguments), against a loopback server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_provider import FakeProvider, Script, anthropic_text_stream, json_response, openai_text_stream

ROOT = Path(__file__).resolve().parents[3]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jxai_app.core.streaming", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_done_exits_0_and_prints_wire_lines(fake: FakeProvider) -> None:
    fake.add(Script(writes=openai_text_stream(["Grüße", " 🌊"])))
    proc = cli("--base-url", fake.url, "--model", "m", "--system", "Be kind.", "--temperature", "0.5", "hi")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ['{"type":"delta","content":"Grüße"}', '{"type":"delta","content":" 🌊"}',
                                        '{"type":"done","stopReason":"stop"}']
    body = fake.requests[0].json
    assert body["messages"] == [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"}]
    assert body["temperature"] == 0.5


def test_error_exits_1(fake: FakeProvider) -> None:
    fake.add(json_response(401, {"error": {"message": "Bad key"}}))
    proc = cli("--base-url", fake.url, "--model", "m", "hi", env={"OPENAI_API_KEY": "from-env"})
    assert proc.returncode == 1
    event = json.loads(proc.stdout)
    assert (event["type"], event["code"], event["message"]) == ("error", "401", "Bad key")
    assert fake.requests[0].headers["authorization"] == "Bearer from-env"


def test_messages_file_and_prompt_are_both_sent(fake: FakeProvider, tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    history.write_text(json.dumps([{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "ok"}]))
    fake.add(Script(writes=anthropic_text_stream(["x"])))
    proc = cli("--provider", "anthropic", "--base-url", fake.url, "--model", "c", "--messages", str(history), "now")
    assert proc.returncode == 0, proc.stderr
    assert [m["content"] for m in fake.requests[0].json["messages"]] == [
        "earlier", [{"type": "text", "text": "ok"}], "now"]


@pytest.mark.parametrize("args", [
    ["--provider", "nobody", "hi"],
    ["--base-url", "http://127.0.0.1:9/v1", "hi"],           # no model
    ["--provider", "proxy", "--model", "m", "hi"],          # proxy without --chat-url
    ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"],  # nothing to say
    ["--model", "m", "--messages", "/no/such/file.json"],
    ["--model", "m", "--temperature", "warm", "hi"],
])
def test_bad_arguments_exit_2(args: list[str]) -> None:
    proc = cli(*args, env={"JXAI_MODEL": ""})
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == "" and "error" in proc.stderr


def test_messages_file_must_be_a_list(tmp_path: Path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text('{"role": "user"}')
    proc = cli("--model", "m", "--messages", str(bad))
    assert proc.returncode == 2 and "JSON list" in proc.stderr
