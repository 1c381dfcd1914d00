"""Install llama-cpp-python from a wheel built once per machine (README "What `make run` does").

``make run`` and ``make test`` run ``python -m jxai_app.devtools.llama_wheel`` (with the
Makefile's ``CMAKE_ARGS``) before installing the ``[local]`` extra. llama-cpp-python comes from
PyPI as source only; building it takes 6–9 minutes on 2 cores. So the built wheel is kept in

    ${XDG_CACHE_HOME:-~/.cache}/jxai/wheels/<version>-<key>/

where ``<version>`` is the one pinned in ``pyproject.toml`` and ``<key>`` a hash of what the
build depends on besides the source: ``CMAKE_ARGS`` (the instruction sets, Makefile), the
machine's architecture and the Python version. Every clone on the machine then installs it in
seconds (``pip install --no-index --find-links <that folder>``); a changed pin or flag gives
another folder, so a wheel built with other flags is never reused (pip's own wheel cache would
reuse it: it does not look at ``CMAKE_ARGS``). A cache that is absent, or a folder that cannot
be written, just means a build (CI starts from nothing).

While building, a line says how far the build is (ninja's ``[step/steps]``, at most one line per
10 % or per minute); pip's whole output goes to ``.cache/llama-build.log``. Standard library
only (it runs before Django is configured, from the Makefile).
"""

from __future__ import annotations

import hashlib
import os
import platform
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
PACKAGE = "llama-cpp-python"
LOG_PATH = PROJECT_DIR / ".cache" / "llama-build.log"
"""pip's verbose output of the last build (read it when a build fails)."""
REPORT_EVERY_SECONDS = 60.0
"""At most this long between two progress lines while the build runs."""
_PIN = re.compile(r"^llama-cpp-python(?:\[[^\]]*\])?\s*==\s*([0-9][0-9A-Za-z.+-]*)$")
_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def say(text: str) -> None:
    """One progress line, flushed at once."""
    print(f"== {text}", flush=True)


def pinned_version(pyproject: Path = PROJECT_DIR / "pyproject.toml") -> str:
    """The llama-cpp-python version pinned (``==``) in the ``[local]`` extra of ``pyproject``.

    Raises:
        SystemExit: it is not pinned to one version (the cache is keyed by it).
    """
    extras = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for requirement in extras.get("local", []):
        found = _PIN.match(requirement.strip())
        if found:
            return found.group(1)
    raise SystemExit(f"pyproject.toml: the [local] extra must pin {PACKAGE}==<version> (the wheel cache is keyed by it)")


def wheel_dir(version: str, environ: Mapping[str, str] | None = None) -> Path:
    """The cache folder for ``version`` built with this environment's ``CMAKE_ARGS`` on this machine.

    Returns:
        ``$XDG_CACHE_HOME/jxai/wheels/<version>-<key>`` (``~/.cache`` when unset), ``<key>`` the
        first 16 hex digits of the sha256 of ``CMAKE_ARGS``, the architecture and ``python3.N``.
    """
    env = os.environ if environ is None else environ
    root = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    build = "\n".join((env.get("CMAKE_ARGS", "").strip(), platform.machine(), f"python{sys.version_info[0]}.{sys.version_info[1]}"))
    return root / "jxai" / "wheels" / f"{version}-{hashlib.sha256(build.encode()).hexdigest()[:16]}"


def cached_wheel(folder: Path, version: str) -> Path | None:
    """The wheel of ``version`` in ``folder``, or ``None``."""
    return next(iter(sorted(folder.glob(f"llama_cpp_python-{version}-*.whl"))), None)


def progress_lines(lines: Iterable[str | None], clock: Callable[[], float] = time.monotonic) -> Iterable[str]:
    """The progress lines to print for a build's output.

    Args:
        lines: the build's output lines, and ``None`` whenever a second passed with none.
        clock: seconds (monotonic).

    Yields:
        ``"building llama.cpp: step 40/120 (2 min)"`` when ninja reaches the next tenth of its
        steps, or ``"still building (3 min)"`` after :data:`REPORT_EVERY_SECONDS` without one.
    """
    started = last = clock()
    tenth = 0
    for line in lines:
        now = clock()
        minutes = f"{int(now - started) // 60} min"
        step = _STEP.match(line.lstrip()) if line else None
        if step is not None:
            done, total = int(step.group(1)), int(step.group(2))
            if done * 10 // total > tenth:
                tenth = done * 10 // total
                last = now
                yield f"building llama.cpp: step {done}/{total} ({minutes})"
                continue
        if now - last >= REPORT_EVERY_SECONDS:
            last = now
            yield f"still building ({minutes})"


def _output_with_ticks(process: subprocess.Popen[str], log: Path) -> Iterable[str | None]:
    """``process``'s output lines (also written to ``log``), with ``None`` for each quiet second."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        with log.open("w", encoding="utf-8") as out:
            for line in process.stdout:
                out.write(line)
                lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while True:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            yield None
            continue
        if line is None:
            break
        yield line
    reader.join()


def build(version: str, folder: Path) -> Path:
    """Build the wheel of ``version`` into ``folder`` (through a temporary sibling, renamed at
    the end, so an interrupted build leaves nothing under the final name).

    Raises:
        SystemExit: pip failed (its last lines are printed; the whole output is in :data:`LOG_PATH`).
    """
    say(f"building {PACKAGE} {version} once for this machine (6-9 min on 2 idle cores, longer on busy ones; kept in {folder})")
    temporary = folder.with_name(f".{folder.name}.{os.getpid()}")
    LOG_PATH.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-v",
               "--wheel-dir", str(temporary), f"{PACKAGE}=={version}"]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    try:
        for line in progress_lines(_output_with_ticks(process, LOG_PATH)):
            say(line)
        code = process.wait()
        if code != 0:
            tail = LOG_PATH.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
            print("\n".join(tail), flush=True)
            raise SystemExit(f"the build of {PACKAGE} failed (pip exited {code}); its whole output: {LOG_PATH}")
        wheel = cached_wheel(temporary, version)
        if wheel is None:
            raise SystemExit(f"pip built no {PACKAGE} {version} wheel; its output: {LOG_PATH}")
        try:
            temporary.rename(folder)
        except OSError:  # another clone finished the same build first: keep its wheel
            if cached_wheel(folder, version) is None:
                raise
    finally:
        if process.poll() is None:
            process.kill()
        shutil.rmtree(temporary, ignore_errors=True)
    say(f"built {PACKAGE} {version} in {(time.monotonic() - started) / 60:.1f} min")
    return folder


def ensure_installed(environ: Mapping[str, str] | None = None) -> Path:
    """Install the pinned llama-cpp-python into this interpreter from the machine's cached
    wheel, building and caching it first when there is none (module docstring).

    Returns:
        The folder the wheel was installed from.

    Raises:
        SystemExit: the pin is missing, the build failed, or pip could not install the wheel.
    """
    version = pinned_version()
    folder = wheel_dir(version, environ)
    if cached_wheel(folder, version) is not None:
        say(f"{PACKAGE} {version}: the wheel built earlier on this machine ({folder})")
    else:
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # no writable cache: build into the project (not shared)
            say(f"cannot write the wheel cache {folder.parent} ({exc}); building for this checkout only")
            folder = PROJECT_DIR / ".cache" / "wheels" / folder.name
            folder.parent.mkdir(parents=True, exist_ok=True)
        build(version, folder)
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                                "--find-links", str(folder), f"{PACKAGE}=={version}"], check=False)
    if installed.returncode != 0:
        raise SystemExit(f"pip could not install {PACKAGE} {version} from {folder}")
    return folder


if __name__ == "__main__":
    ensure_installed()
