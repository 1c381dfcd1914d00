"""What a newcomer does after ``make run`` (README "What `make run` does"), as one test in CI.

The app is started the way ``make run`` starts it: ``python -m jxai_app.devtools.run`` (migrate,
recover, demo user, the embedded Gemma 3 270M on llama.cpp, daphne) from this checkout's
interpreter, but on free ports and a temporary SQLite ``DATABASE_URL`` (a developer's
``db.sqlite3`` is never touched) with no provider configured and the in-memory channel layer.
Then headless Chromium (Debian's ``/usr/bin/chromium``):

* logs in with the credentials the orchestrator printed;
* asks a question and receives the real local model's answer as several streamed ``delta``
  events over the websocket, shown in the page; a reload shows the saved answer;
* picks the ``gemma-3-270m-calculator`` alias (``tool_choice`` forces ``calculate`` on arithmetic)
  and sees a ``calculate`` tool card reach its final state, then the answer of the round after
  it; then asks "What is the capital of Italy?" and gets an answer with no tool card.

Then the model server dies (SIGKILL) while the orchestrator is held (SIGSTOP), so the gap is
certain: daphne keeps serving and the page says the local model is not answering; let go
(SIGCONT), the orchestrator says it restarts the server, and the next question is answered.
Finally SIGINT (Ctrl-C) to the pid the ready line names stops the orchestrator: exit code 0, both
ports closed, and no child or grandchild process left. Needs the ``[local]`` extra (``make test``
installs it). About 40 s.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jxai_app import conf

from jxai_app.ops import localmodel
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, RESULTS, ROOT
from tests.support.net import free_port, port_answers

pytestmark = [pytest.mark.browser, pytest.mark.localmodel]

CREDENTIALS = re.compile(r"username: (\S+)\s+password: (\S+)")
READY = "jxai is running at "


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren…), read from ``/proc``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent and child not in found]
        found.update(children)
        frontier.extend(children)
    return found


def alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class Orchestrator:
    """The ``make run`` process and everything it printed (read by a thread, never blocking)."""

    process: subprocess.Popen[str]
    port: int
    model_port: int
    lines: list[str] = field(default_factory=list)

    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> str:
        """Wait until ``text`` was printed; fail with the output when the process exits first."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert self.process.poll() is None, f"make run exited {self.process.returncode}:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout:.0f} s:\n{self.output()}"
            time.sleep(0.1)
        return self.output()


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[Orchestrator]:
    """``python -m jxai_app.devtools.run`` on free ports and a temporary SQLite file, stopped at the end."""
    port, model_port = free_port(), free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'make-run.sqlite3'}", "JXAI_LOCAL_MODEL": "auto",
           "PYTHONUNBUFFERED": "1", "DJANGO_DEBUG": "1"}
    for name in (*localmodel.PROVIDER_VARIABLES, "REDIS_URL", "JXAI_LOCAL_MODEL_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"):
        env.pop(name, None)
    command = [sys.executable, "-m", "jxai_app.devtools.run", "--port", str(port), "--model-port", str(model_port)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1)
    running = Orchestrator(process, port, model_port)

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            running.lines.append(line)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield running
    finally:
        localmodel.stop_child(process)  # type: ignore[arg-type]
        reader.join(5)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "make-run.log").write_text(running.output())


def delta_frames(frames: list[dict[str, Any]]) -> list[str]:
    """The ``delta`` text of each websocket ``events`` frame that carried any (one string per frame)."""
    texts = []
    for frame in frames:
        if frame.get("type") == "events":
            text = "".join(i["event"].get("content", "") for i in frame["items"] if i["event"]["type"] == "delta")
            if text:
                texts.append(text)
    return texts


def saved_answers(frames: list[dict[str, Any]]) -> list[str]:
    """The content of every assistant message the server announced as saved (``message_saved``)."""
    return [f["message"]["content"] for f in frames
            if f.get("type") == "message_saved" and f["message"]["role"] == "assistant"]


def turn_ends(frames: list[dict[str, Any]]) -> int:
    """How many ``turn_end`` events the page received."""
    return sum(1 for f in frames if f.get("type") == "events" for i in f["items"] if i["event"]["type"] == "turn_end")


def idle_after(frames: list[dict[str, Any]], turns: int) -> bool:
    """True once ``turns`` turns ended and a ``conversation`` frame reported the conversation idle after that."""
    ended = 0
    for frame in frames:
        if frame.get("type") == "events":
            ended += sum(1 for i in frame["items"] if i["event"]["type"] == "turn_end")
        elif frame.get("type") == "conversation" and ended >= turns and frame["conversation"]["status"] == "idle":
            return True
    return False


def wait_until(page: Any, condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` while the page keeps receiving frames; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        page.wait_for_timeout(100)


def test_make_run_then_a_newcomer_chats_with_the_local_model(make_run: Orchestrator) -> None:
    started = time.monotonic()
    output = make_run.wait_for(READY, timeout=120)
    credentials = CREDENTIALS.search(output)
    assert credentials, output
    username, password = credentials.groups()
    url = f"http://127.0.0.1:{make_run.port}"
    assert f"{READY}{url}/" in output
    assert port_answers(make_run.model_port)
    children = descendants(make_run.process.pid)
    assert len(children) >= 2, children  # the model server and daphne

    from playwright.sync_api import expect, sync_playwright

    frames: list[dict[str, Any]] = []
    page_errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1280, "height": 820}, base_url=url).new_page()
        page.set_default_timeout(30_000)
        try:
            page.on("pageerror", lambda exc: page_errors.append(str(exc)))
            page.on("websocket", lambda ws: ws.on(
                "framereceived", lambda payload: frames.append(json.loads(payload))))
            page.goto("/")
            page.get_by_test_id("login-username").fill(username)
            page.get_by_test_id("login-password").fill(password)
            page.get_by_test_id("login-submit").click()
            page.locator("html[data-connection='open']").wait_for(state="attached")
            picker = page.get_by_test_id("model")
            assert picker.input_value() == conf.LOCAL_MODEL_ALIAS
            assert picker.locator("option").all_inner_texts() == [
                "Gemma 3 270M (local)", "Gemma 3 270M + calculator (local)",
                "Gemma 3 270M + notes, with approval (local)"]

            # A question: the local model's answer streams in (several delta frames) and is shown.
            page.get_by_test_id("composer").fill("What is the capital of France?")
            page.get_by_test_id("composer").press("Enter")
            answer = page.get_by_test_id("message-assistant").first.locator(".message-body")
            wait_until(page, lambda: idle_after(frames, 1), "the first turn's end")
            expect(page.locator("[data-testid=message-assistant].streaming")).to_have_count(0)
            page.get_by_test_id("send").wait_for(state="visible")
            streamed = delta_frames(frames)
            assert len(streamed) >= 2, frames
            assert "".join(streamed).strip(), streamed
            assert saved_answers(frames) == ["".join(streamed)]  # saved exactly as streamed
            shown = answer.inner_text()
            assert re.search(r"\w", shown), shown  # shown (rendered as Markdown)
            saved = [f["conversation"] for f in frames if f.get("type") == "conversation"]
            assert saved[-1]["model"] == conf.LOCAL_MODEL_ALIAS and saved[-1]["status"] == "idle", saved[-1]
            page.screenshot(path=str(RESULTS / "make-run-answer.png"))

            # Reload: the conversation and its answer come back from the database.
            before_reload = len(frames)
            page.reload()
            page.locator("html[data-connection='open']").wait_for(state="attached")
            page.get_by_test_id("message-user").filter(has_text="What is the capital of France?").wait_for()
            expect(page.get_by_test_id("message-assistant").first.locator(".message-body")).to_have_text(shown)
            snapshot = next(f for f in frames[before_reload:] if f.get("type") == "snapshot")
            assert [m["content"] for m in snapshot["messages"] if m["role"] == "assistant"] == saved_answers(frames)

            # The calculator alias: the forced call runs the real tool, then the model answers.
            page.get_by_test_id("new-conversation").click()
            page.get_by_test_id("model").select_option(conf.LOCAL_CALCULATOR_ALIAS)
            page.get_by_test_id("composer").fill("What is 12 times 7?")
            page.get_by_test_id("composer").press("Enter")
            card = page.get_by_test_id("tool-call").first
            card.wait_for(timeout=60_000)
            assert card.locator(".tool-name").inner_text() == "calculate"
            wait_until(page, lambda: idle_after(frames, 2), "the calculator turn's end")
            expect(page.locator("[data-testid=message-assistant].streaming")).to_have_count(0)
            page.get_by_test_id("send").wait_for(state="visible")
            results = [i["event"] for f in frames if f.get("type") == "events" for i in f["items"]
                       if i["event"]["type"] == "tool_result"]
            assert [r["name"] for r in results] == ["calculate"], results  # the real tool ran once
            # The model's arguments decide success ("12 * 7" → 84); the card shows what happened.
            assert card.get_attribute("data-state") == ("success" if results[0]["success"] else "failure")
            assert page.get_by_test_id("message-assistant").count() == 2  # the call's round, then the answer's
            page.screenshot(path=str(RESULTS / "make-run-calculator.png"))
            if os.environ.get("JXAI_UPDATE_SCREENSHOT") == "1":  # the README's picture: the real default app
                page.get_by_test_id("composer").blur()
                page.screenshot(path=str(ROOT / "docs" / "screenshot.png"))

            # No arithmetic in the next question: the calculator alias answers without the tool.
            page.get_by_test_id("composer").fill("What is the capital of Italy?")
            page.get_by_test_id("composer").press("Enter")
            wait_until(page, lambda: idle_after(frames, 3), "the third turn's end")
            expect(page.locator("[data-testid=message-assistant].streaming")).to_have_count(0)
            expect(page.get_by_test_id("tool-call")).to_have_count(1)  # still only the first one
            assert page.get_by_test_id("message-assistant").count() == 3
            page.screenshot(path=str(RESULTS / "make-run-calculator-no-tool.png"))

            # The model server dies: daphne stays, the page says why, the server comes back.
            [model_pid] = [pid for pid in descendants(make_run.process.pid)
                           if b"llama_cpp.server" in Path(f"/proc/{pid}/cmdline").read_bytes()]
            make_run.process.send_signal(signal.SIGSTOP)
            try:
                os.kill(model_pid, signal.SIGKILL)
                page.get_by_test_id("new-conversation").click()
                page.get_by_test_id("composer").fill("Are you there?")
                page.get_by_test_id("composer").press("Enter")
                expect(page.get_by_test_id("error")).to_contain_text("is not answering", timeout=60_000)
                page.get_by_test_id("send").wait_for(state="visible")
            finally:
                make_run.process.send_signal(signal.SIGCONT)
            make_run.wait_for("is running again", timeout=120)
            assert "local model server (log: .cache/localmodel.log) was killed by SIGKILL; restarting it in 1 s " \
                   "(daphne keeps running)" in make_run.output()
            assert port_answers(make_run.port) and port_answers(make_run.model_port)
            page.get_by_test_id("composer").fill("What is the capital of Spain?")
            page.get_by_test_id("composer").press("Enter")
            wait_until(page, lambda: idle_after(frames, 5), "the answer after the restart")
            expect(page.get_by_test_id("error")).to_be_hidden()
            assert re.search(r"\w", page.get_by_test_id("message-assistant").last.inner_text())
        except BaseException:
            RESULTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(RESULTS / "make-run-failure.png"))
            (RESULTS / "make-run-frames.json").write_text(json.dumps(frames, indent=1))
            raise
        finally:
            browser.close()
    assert page_errors == []
    assert "Traceback" not in make_run.output(), make_run.output()

    # Ctrl-C, to the pid the ready line names (make's own process does not pass it on):
    # everything stops, nothing is left behind.
    assert f"kill -INT {make_run.process.pid}" in output
    make_run.process.send_signal(signal.SIGINT)
    assert make_run.process.wait(30) == 0, make_run.output()
    assert not port_answers(make_run.port) and not port_answers(make_run.model_port)
    assert [pid for pid in children if alive(pid)] == []
    assert time.monotonic() - started < 180  # a generous bound; about 40 s on 2 cores
