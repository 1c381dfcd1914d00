"""Every shared wire case (tests/data/*.sse) against the real clients, in-process.

Each case is served by a real loopback server (FakeProvider) whole, one byte per write and
seven bytes per write, and additionally through ``httpx.MockTransport`` in exact one-byte
chunks (so every line, CRLF pair and UTF-8 character is split at the client, whatever TCP
does). The client is built from the case's command-line arguments by the CLI's own
functions, and the events are compared with the conformance runner's rules (its
``compare``/``subset``, from the copy in ``conformance_run.py``). One more test runs the
runner itself over ``tests/data`` as a subprocess, the way CI and people use it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import pytest

from jxai_app.core.streaming.__main__ import build_client, build_parser, conversation
from tests.core.streaming import conformance_run as runner
from tests.core.streaming.conftest import collect
from tests.support.fake_provider import FakeProvider, Script

DATA = Path(__file__).resolve().parents[2] / "data"
CASES = sorted(DATA.glob("*.sse"))
ROOT = Path(__file__).resolve().parents[3]


def _argv(case: dict[str, Any], url: str) -> list[str]:
    flag = "--chat-url" if case["provider"] == "proxy" else "--base-url"
    if case["provider"] == "proxy":
        url += "/chat"
    argv = ["--provider", case["provider"], flag, url, "--api-key", "test-key", "--model", "test-model",
            *case["args"]]
    if "--messages" not in case["args"]:
        argv.append("hello")
    return argv


async def _run(case: dict[str, Any], url: str, transport: httpx.AsyncBaseTransport | None = None) -> list[dict]:
    parser = build_parser()
    opts = parser.parse_args(_argv(case, url))
    messages, tools = conversation(parser, opts)
    client = build_client(parser, opts, transport=transport)
    return await collect(client.stream_chat(messages, tools, opts.system))


def test_every_case_is_here() -> None:
    assert len(CASES) == 143


@pytest.mark.parametrize("feed", [None, 1, 7], ids=["whole", "1", "7"])
@pytest.mark.parametrize("path", CASES, ids=[p.name[:-4] for p in CASES])
async def test_wire_case_over_loopback(path: Path, feed: int | None) -> None:
    case = runner.load_case(path)
    body: bytes = case["body"]
    step = feed or len(body) or 1
    script = Script(status=case["status"], content_type=case["content_type"], headers=case["headers"],
                    writes=[body[i:i + step] for i in range(0, len(body), step)], chunked=False)
    with FakeProvider([script]) as fake:
        events = await _run(case, fake.url)
    assert runner.compare(case["expected"], events) is None, (runner.compare(case["expected"], events), events)
    if case["request"] is not None:
        assert fake.requests and runner.subset(case["request"], fake.requests[0].json), fake.requests[0].json


@pytest.mark.parametrize("path", CASES, ids=[p.name[:-4] for p in CASES])
async def test_wire_case_in_exact_one_byte_reads(path: Path) -> None:
    case = runner.load_case(path)
    body: bytes = case["body"]
    sent: list[Any] = []

    async def one_byte_at_a_time() -> AsyncIterator[bytes]:
        for i in range(len(body)):
            yield body[i:i + 1]

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        headers = dict(case["headers"])
        if case["content_type"] is not None:
            headers["Content-Type"] = case["content_type"]
        return httpx.Response(case["status"], headers=headers, content=one_byte_at_a_time())

    events = await _run(case, "http://provider.test/v1", httpx.MockTransport(handler))
    assert runner.compare(case["expected"], events) is None, (runner.compare(case["expected"], events), events)
    assert len(sent) == 1


@pytest.mark.timeout(600)
def test_conformance_runner_passes_over_tests_data(tmp_path: Path) -> None:
    """The shared runner, as a subprocess, over every case of tests/data (feed ``whole``).

    The runner spends about half a second per case stopping its server, so the cases are
    dealt round-robin into six directories of links and six runners work side by side.
    """
    parts = [tmp_path / f"part{i}" for i in range(6)]
    for part in parts:
        part.mkdir()
    for n, case in enumerate(CASES):
        stem = case.name[:-4]
        for file in DATA.glob(stem + ".*"):
            if file.name[len(stem) + 1:] in ("sse", "expected.jsonl", "http", "args", "request.json"):
                (parts[n % 6] / file.name).symlink_to(file)
    for extra in DATA.glob("*.json"):  # files named by .args (tools, messages)
        for part in parts:
            if not (part / extra.name).exists():
                (part / extra.name).symlink_to(extra)
    procs = [subprocess.Popen([sys.executable, str(Path(runner.__file__)), str(part), "--feeds", "whole"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for part in parts]
    passed = 0
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:] + err[-2000:]
        line = out.strip().splitlines()[-1]
        assert line.endswith("wire cases pass under feeds whole"), line
        done, total = line.split()[0].split("/")
        assert done == total
        passed += int(done)
    assert passed == len(CASES)
