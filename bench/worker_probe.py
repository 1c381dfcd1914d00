"""Run daphne with a memory probe: ``SIGUSR1`` writes what the worker holds to a JSON file.

Used by ``bench/e2e.py --probe`` to tell a leak (live Python objects that stay after the
streams end) from allocator retention (RSS the C allocator keeps after the objects are
freed). Each signal appends one JSON line to ``$JXAI_PROBE_FILE``:

``{"rss_kib", "allocated_blocks", "threads", "tasks", "types": {type name: count},
"traced_kib", "top": [[file:line, KiB diff]]}``; ``types`` lists the 40 most common object
types, ``traced_kib``/``top`` come from :mod:`tracemalloc` when ``PYTHONTRACEMALLOC`` is set
(``top``: the 25 biggest growths since the first probe). With ``JXAI_PROBE_TRIM=1`` each
probe first calls glibc's ``malloc_trim(0)``.

Usage: ``python bench/worker_probe.py <daphne arguments>``.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import os
import signal
import sys
import threading
import tracemalloc
from typing import Any

_first: list[Any] = []


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _malloc_trim() -> None:
    """Ask glibc to give free heap pages back (``JXAI_PROBE_TRIM=1``)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def probe(*_: object) -> None:
    """``SIGUSR1`` handler: append one JSON line (module docstring) to ``$JXAI_PROBE_FILE``."""
    import time

    started = time.perf_counter()
    gc.collect()
    gc_ms = round((time.perf_counter() - started) * 1000, 1)
    if os.environ.get("JXAI_PROBE_TRIM") == "1":
        _malloc_trim()
    counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
    try:
        tasks = len(asyncio.all_tasks(asyncio.get_event_loop()))
    except RuntimeError:
        tasks = -1
    row: dict[str, Any] = {"rss_kib": _rss_kib(), "allocated_blocks": sys.getallocatedblocks(), "gc_ms": gc_ms,
                           "threads": threading.active_count(), "tasks": tasks,
                           "types": dict(counts.most_common(40))}
    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        row["traced_kib"] = tracemalloc.get_traced_memory()[0] // 1024
        if not _first:
            _first.append(snapshot)
        else:
            diff = snapshot.compare_to(_first[0], "lineno")[:25]
            row["top"] = [[str(d.traceback), d.size_diff // 1024] for d in diff]
    with open(os.environ["JXAI_PROBE_FILE"], "a") as out:
        out.write(json.dumps(row) + "\n")


def main() -> None:
    signal.signal(signal.SIGUSR1, probe)
    from daphne.cli import CommandLineInterface

    sys.argv = ["daphne", *sys.argv[1:]]
    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
