"""Giving the worker's free memory back to the system after a burst of turns, so its
memory returns to the baseline (docs/streaming.md "Connections").

A burst of streams (``bench/e2e.py``: 500 at once) allocates a few hundred MiB of small,
short-lived objects (events, frames, buffers). Once they are freed, the memory stays with
the process unless the allocator returns it:

- CPython's own small-object allocator (pymalloc) gets memory in 1 MiB arenas and returns an
  arena only when every object in it is gone; a single survivor (a cache entry, a
  connection made during the burst) keeps its whole arena. Measured after a 500-stream
  round: +107 MiB resident, with the objects themselves back to the baseline count.
- glibc's ``malloc`` keeps freed pages in its heaps too, but ``malloc_trim(0)`` hands every
  free page back (``MADV_DONTNEED``), wherever it lies in the heap.

So the worker runs with ``PYTHONMALLOC=malloc`` (every object from glibc; the README's run
commands and ``make run`` set it) and the hub calls :func:`release_free_memory` once a
turn ended or a socket closed and no turn has run since for :data:`IDLE_TRIM_SECONDS`
(after a full garbage collection: a burst leaves reference cycles; at most every
:data:`TRIM_INTERVAL_SECONDS`). Measured the same way:
after the round resident memory is back under the baseline. The trim runs in a thread
(ctypes releases the GIL) and only while no turn runs, so it never delays a token.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import time
from typing import Any, Final

__all__ = ["IDLE_TRIM_SECONDS", "TRIM_INTERVAL_SECONDS", "collect_garbage", "release_free_memory", "trim_available"]

logger = logging.getLogger("jxai_app.ops.memory")

IDLE_TRIM_SECONDS: Final[float] = 1.0
"""How long the worker must have had no running turn before its free memory is returned."""
TRIM_INTERVAL_SECONDS: Final[float] = 10.0
"""At most one return of free memory (a full garbage collection, ~0.1–0.2 s with a thousand
open sockets, then the trim) per this many seconds."""


@functools.cache
def _malloc_trim() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def collect_garbage() -> float:
    """A full collection of reference cycles (what a burst leaves: connections, frames,
    exceptions with their tracebacks), so that their memory is free before the trim.

    Holds the GIL for its duration (tens of milliseconds with a thousand open sockets):
    call it only while no turn runs.

    Returns:
        Its duration in milliseconds.
    """
    started = time.perf_counter()
    gc.collect()
    took = (time.perf_counter() - started) * 1000
    logger.debug("idle garbage collection: %.1f ms", took)
    return took


def trim_available() -> bool:
    """True where glibc's ``malloc_trim`` exists (Linux with glibc)."""
    return _malloc_trim() is not None


def release_free_memory() -> bool:
    """Return the C heap's free pages to the system (glibc ``malloc_trim(0)``).

    Blocking (walks the heap: milliseconds for a few hundred MiB); call it in a thread.
    Memory that pymalloc holds is only returned when the worker runs with
    ``PYTHONMALLOC=malloc`` (see the module docstring).

    Returns:
        True when memory was released, False when there was none to release or the C
        library has no ``malloc_trim``.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    released = bool(trim(0))
    logger.debug("malloc_trim: %s", "memory released" if released else "nothing to release")
    return released
