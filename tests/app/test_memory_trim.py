"""Free memory goes back to the system after a burst (jxai_app.ops.memory; docs/streaming.md
"Connections"): glibc's ``malloc_trim`` under ``PYTHONMALLOC=malloc``, called by the hub once
no turn has run for a moment."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from jxai_app.ops import memory
from jxai_app.turns import hub as hub_module
from jxai_app.turns.hub import TurnHub
from tests.app.turns_support import fake, send_turn, text_script  # noqa: F401
from tests.support.fake_provider import FakeProvider

needs_glibc = pytest.mark.skipif(not memory.trim_available(), reason="needs glibc's malloc_trim (Linux)")

_BURST = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {root!r})
    from jxai_app.ops.memory import release_free_memory

    def rss():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

    base = rss()
    burst = [{{"seq": i, "event": {{"type": "delta", "content": "t%d " % i}}}} for i in range(400_000)]
    survivors = burst[::5000]  # a few objects of the burst live on, scattered through it
    peak = rss()
    del burst
    before = rss()
    release_free_memory()
    print(json.dumps({{"base": base, "peak": peak, "before": before, "after": rss()}}))
""")


@needs_glibc
def test_a_burst_freed_under_the_system_allocator_goes_back_to_the_system() -> None:
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", _BURST.format(root=root)], capture_output=True, text=True,
                         env={"PYTHONMALLOC": "malloc", "PATH": "/usr/bin:/bin"}, timeout=60, check=True)
    import json

    kib = json.loads(out.stdout)
    grown = kib["peak"] - kib["base"]
    assert grown > 50_000, kib  # the burst really took memory (> 50 MiB)
    assert kib["after"] - kib["base"] < grown * 0.2, kib  # and at least 80 % of it went back


@pytest.mark.django_db(transaction=True)
async def test_the_hub_returns_free_memory_once_no_turn_has_run_for_a_moment(
        user: Any, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(hub_module, "release_free_memory", lambda: calls.append(len(hub.runners())) or True)
    hub = TurnHub(idle_trim=0.2)
    hub.idle_trim = 0.2  # also where the C library has no malloc_trim: the schedule is what is tested
    fake.add(text_script(["a", "b"], delay=0.05), text_script(["c", "d", "e"], delay=0.2))
    info, first = await send_turn(hub, user=user, conversation_id=None, text="One.")
    await asyncio.wait_for(first.task, 10)
    assert await hub.wait_idle(5)  # the trim is not one of the hub's tasks: nothing waits for it
    assert calls == []
    _, second = await send_turn(hub, user=user, conversation_id=info.conversation_id, text="Two.")
    await asyncio.sleep(0.3)
    assert calls == [] and not second.task.done()  # the first trim found a turn running: skipped
    await asyncio.wait_for(second.task, 10)
    await hub.wait_idle(5)
    await asyncio.sleep(0.4)
    assert calls == [0]  # once, with no turn running
    await hub.shutdown()
