"""``make run``'s start checks and supervision (jxai_app.devtools.run): its ports are checked before anything
touches the database, and a port left in ``TIME_WAIT`` by a run just stopped is free."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from jxai_app.devtools.run import port_free
from jxai_app.ops.localmodel import LocalModelError, spawn_child, supervise

ROOT = Path(__file__).resolve().parents[2]


def test_a_listening_port_is_busy_and_a_port_in_time_wait_is_free() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    assert not port_free("127.0.0.1", port)

    client = socket.create_connection(("127.0.0.1", port))
    server_side, _ = listener.accept()
    server_side.close()  # the server closes first: its end of the connection waits in TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    plain = socket.socket()
    try:
        plain.bind(("127.0.0.1", port))
        in_time_wait = False
    except OSError:
        in_time_wait = True  # a bind without SO_REUSEADDR fails: "in use" though nothing listens
    finally:
        plain.close()
    assert in_time_wait
    assert port_free("127.0.0.1", port)


def test_a_busy_model_port_stops_make_run_before_it_touches_the_database(tmp_path: Path) -> None:
    # A second `make run` beside a live one: it must not migrate, nor recover (end) the
    # first one's running turns, before finding the local model's port taken.
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    free_port = free.getsockname()[1]
    free.close()
    database = tmp_path / "second-run.sqlite3"
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JXAI_MODELS_FILE", "JXAI_MODELS_JSON")}
    env["DATABASE_URL"] = f"sqlite:///{database}"
    try:
        out = subprocess.run([sys.executable, "-m", "jxai_app.devtools.run", "--port", str(free_port),
                              "--model-port", str(busy.getsockname()[1])],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    finally:
        busy.close()
    said = out.stdout + out.stderr
    assert out.returncode == 1, said
    assert "is in use" in said and "RUN_ARGS='--model-port N'" in said
    assert not database.exists()  # not migrated, nothing recovered


def test_a_child_killed_by_a_signal_is_said_in_one_line_and_the_others_are_stopped() -> None:
    # The model server killed by SIGSEGV used to end `make run` with the raw code (-11: the
    # shell's 245) and make's own "*** Error 245" line.
    model = spawn_child([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    web = spawn_child([sys.executable, "-c", "import time; time.sleep(60)"])
    said: list[str] = []
    code = supervise([("the local model server (log: .cache/localmodel.log)", model), ("daphne", web)],
                     poll=0.05, say=said.append, advice="make run starts jxai again")
    assert code == 1
    assert said == ["the local model server (log: .cache/localmodel.log) was killed by SIGSEGV; stopping daphne. "
                    "make run starts jxai again"]
    assert web.poll() is not None  # stopped with it


def test_a_child_with_a_restarter_is_started_again_with_a_growing_wait_and_the_others_keep_running() -> None:
    exits = [sys.executable, "-c", "raise SystemExit(3)"]
    sleeps = [sys.executable, "-c", "import time; time.sleep(60)"]
    web = spawn_child(sleeps)
    started: list[subprocess.Popen[bytes]] = []

    def dies_again() -> subprocess.Popen[bytes]:
        started.append(spawn_child(exits))
        return started[-1]

    def cannot_start() -> subprocess.Popen[bytes]:
        raise LocalModelError("port 8081 is in use; free it or set JXAI_LOCAL_MODEL_PORT")

    def stays_up() -> subprocess.Popen[bytes]:
        started.append(spawn_child(sleeps))
        web.terminate()  # now daphne ends: supervise stops the restarted model and returns
        return started[-1]

    plan = iter([dies_again, cannot_start, stays_up])

    def restart() -> subprocess.Popen[bytes]:
        assert web.poll() is None  # daphne kept running through every restart
        return next(plan)()

    said: list[str] = []
    code = supervise([("model", spawn_child(exits)), ("daphne", web)], poll=0.02, say=said.append,
                     restart={"model": restart}, backoff=(0.01, 0.02, 0.03))
    assert said == ["model exited with code 3; restarting it in 0.01 s (daphne keeps running)",
                    "model is running again",
                    "model exited with code 3; restarting it in 0.02 s (daphne keeps running)",
                    "model did not start again: port 8081 is in use; free it or set JXAI_LOCAL_MODEL_PORT",
                    "model exited with code 3; restarting it in 0.03 s (daphne keeps running)",
                    "model is running again",
                    "daphne was killed by SIGTERM; stopping model"]
    assert code == 1 and started[-1].poll() is not None  # the restarted model was stopped too
