"""``make run``: prepare the database, start the local model when needed and daphne, until Ctrl-C.

Run as ``python -m jxai_app.devtools.run`` from the project's virtualenv (the
Makefile creates it and installs the ``[local]`` extra first when :func:`local_model_needed`):

0. both ports free (daphne's and, when wanted, the model's), before anything else;
1. ``manage.py migrate``, then ``manage.py recover_partial_messages`` (turns whose lease lapsed)
   when that command exists, then ``manage.py ensure_demo_user`` (prints a generated password once);
2. with no provider configured, the embedded model: the GGUF is assembled and verified, then
   ``llama_cpp.server`` starts on 127.0.0.1 (default port 8081, log in ``.cache/localmodel.log``)
   and daphne is told where it is through ``JXAI_LOCAL_MODEL_URL`` and ``JXAI_LOCAL_CONTEXT_WINDOW``;
3. daphne on 127.0.0.1:8000 with ``project.asgi:application``; the URL is printed once it
   accepts connections.

This process owns both children (each in its own session, and killed by the kernel if this
process dies): Ctrl-C or SIGTERM stops daphne, then the model server. A model server that dies
is started again (a line says so; the wait grows while it keeps dying) while daphne keeps
serving, and the page says the model is not answering until it is back; daphne dying stops
both. ``--needs-local`` only
answers, by its exit code, whether the embedded model is wanted (used by the Makefile).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from jxai_app.ops.localmodel import (
    DEFAULT_HOST, DEFAULT_N_CTX, DEFAULT_PORT, PROJECT_DIR, LocalModelError, LocalModelServer,
    app_environment, ensure_model, local_model, local_model_needed, spawn_child, stop_child, supervise,
)

STOP_GRACE_SECONDS = 10.0
"""Seconds a child gets between SIGTERM and SIGKILL when ``make run`` stops."""
DRAIN_SECONDS = 5
"""``JXAI_DRAIN_SECONDS`` for ``make run``'s daphne (unless set): well inside the grace."""
LOG_PATH = PROJECT_DIR / ".cache" / "localmodel.log"
"""Where the llama.cpp server's output goes (it is verbose: one timing block per request)."""


def say(text: str) -> None:
    """One progress line, flushed at once (the children write to the same terminal)."""
    print(f"== {text}", flush=True)


def manage(*args: str, check: bool = True, quiet: bool = False) -> int:
    """Run ``manage.py ARGS`` with this interpreter in the project folder; return its exit code.

    Raises:
        subprocess.CalledProcessError: ``check`` and a non-zero exit.
    """
    output = subprocess.DEVNULL if quiet else None
    done = subprocess.run([sys.executable, str(PROJECT_DIR / "manage.py"), *args], cwd=PROJECT_DIR,
                          stdout=output, stderr=output, check=check)
    return done.returncode


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port``. Bound with ``SO_REUSEADDR``, as daphne and
    the model server bind: connections of a stopped run still in ``TIME_WAIT`` do not count
    (on Linux a listening socket still refuses the bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def wait_for_tcp(host: str, port: int, process: subprocess.Popen[bytes], timeout: float = 60.0) -> bool:
    """Wait until ``host:port`` accepts a connection; ``False`` when ``process`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def prepare_database() -> None:
    """Migrate, recover partial messages (when the command exists) and ensure a first user."""
    say("migrating the database")
    manage("migrate", "--noinput")
    if manage("help", "recover_partial_messages", check=False, quiet=True) == 0:
        # only turns silent for 30 s: a turn of another instance on the same database is live
        say("recovering messages left partial by an earlier stop")
        manage("recover_partial_messages")
    manage("ensure_demo_user")


def start_local_model(host: str, port: int) -> subprocess.Popen[bytes]:
    """Assemble/verify the GGUF and start the llama.cpp server; return its process once it answers.

    Raises:
        LocalModelError: the port is taken, the model or llama-cpp-python is missing, or the
            server exits or does not answer in time.
    """
    if not port_free(host, port):
        raise LocalModelError(f"port {port} is in use; free it or set JXAI_LOCAL_MODEL_PORT")
    chosen = local_model()  # JXAI_LOCAL_MODEL_NAME
    say(f"preparing the embedded model ({chosen.label})")
    model = ensure_model(model=chosen)
    LOG_PATH.parent.mkdir(parents=True, exist_ok=True)
    server = LocalModelServer(model, host=host, port=port, n_ctx=DEFAULT_N_CTX, log=LOG_PATH.open("ab"),
                              alias=chosen.name, chat_format=chosen.chat_format)
    server.start()
    say(f"local model ready at {server.url} after {server.load_seconds or 0:.1f} s (log: {LOG_PATH})")
    assert server.process is not None
    return server.process


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; defaults come from the environment where the README says so."""
    parser = argparse.ArgumentParser(prog="python -m jxai_app.devtools.run", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default=DEFAULT_HOST, help="address for daphne and the model (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="daphne's port (8000)")
    parser.add_argument("--model-port", type=int,
                        default=int(os.environ.get("JXAI_LOCAL_MODEL_PORT") or DEFAULT_PORT),
                        help="the local model's port ($JXAI_LOCAL_MODEL_PORT or 8081)")
    parser.add_argument("--needs-local", action="store_true",
                        help="only exit 0 when the embedded model is wanted, 1 when a provider is configured")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the whole ``make run`` sequence; return the process exit code."""
    args = parse_args(argv)
    if args.needs_local:
        return 0 if local_model_needed() else 1
    for sig in (signal.SIGINT, signal.SIGTERM):  # both stop us cleanly, even as a background job
        signal.signal(sig, signal.default_int_handler)
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    restart: dict[str, Callable[[], subprocess.Popen[bytes]]] = {}
    try:
        env = dict(os.environ)
        wanted = [(args.port, "--port")] + ([(args.model_port, "--model-port")] if local_model_needed(env) else [])
        for port, option in wanted:  # before touching the database: a second run must change nothing
            if not port_free(args.host, port):
                say(f"port {port} is in use: is jxai already running? (make run RUN_ARGS='{option} N')")
                return 1
        prepare_database()
        if local_model_needed(env):
            label = f"the local model server (log: {LOG_PATH.relative_to(PROJECT_DIR)})"
            children.append((label, start_local_model(args.host, args.model_port)))
            restart[label] = lambda: start_local_model(args.host, args.model_port)
            env.update(app_environment(args.host, args.model_port, DEFAULT_N_CTX))
        else:
            say("a provider is configured: not starting the embedded model")
        argv_daphne = [sys.executable, "-m", "daphne", "-b", args.host, "-p", str(args.port), "project.asgi:application"]
        env.setdefault("PYTHONMALLOC", "malloc")  # free memory goes back after a burst (jxai_app.ops.memory)
        # Ctrl-C stops daphne with SIGTERM, which lets running answers finish first (docs/turns.md):
        # for less time than the stop's grace before SIGKILL, so no turn is cut off unsaved.
        env.setdefault("JXAI_DRAIN_SECONDS", str(DRAIN_SECONDS))
        daphne = spawn_child(argv_daphne, env=env)
        children.append(("daphne", daphne))
        if not wait_for_tcp(args.host, args.port, daphne):
            say("daphne did not start")
            return 1
        # make does not pass a signal sent to its own process on: name the one that stops us.
        say(f"jxai is running at http://{args.host}:{args.port}/  (Ctrl-C stops it; from elsewhere: "
            f"kill -INT {os.getpid()})")
        say(f"admin is at http://{args.host}:{args.port}/admin/ for staff "
            "(.venv/bin/python manage.py createsuperuser makes a staff account; the demo user is not one)")
        return supervise(children, say=say, grace=STOP_GRACE_SECONDS, advice="make run starts jxai again",
                         restart=restart)
    except KeyboardInterrupt:
        say("interrupted")
        return 0
    except (LocalModelError, subprocess.CalledProcessError) as exc:
        say(f"cannot start: {exc}")
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        for _label, process in reversed(children):  # supervise() has stopped them already, if it ran
            stop_child(process)


if __name__ == "__main__":
    sys.exit(main())
