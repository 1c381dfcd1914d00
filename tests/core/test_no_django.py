"""The core imports without Django: every module under ``jxai_app.core``, and the streaming
command line, in a fresh interpreter with no settings (``docs/architecture.md``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, pkgutil, sys
import jxai_app.core
names = [m.name for m in pkgutil.walk_packages(jxai_app.core.__path__, "jxai_app.core.")
         if not m.name.endswith("__main__")]
for name in names + ["jxai_app.core.streaming.__main__", "jxai_app.streaming"]:
    importlib.import_module(name)
print(len(names), sorted(m for m in sys.modules if m.split(".")[0] in ("django", "channels", "daphne")))
"""


def test_every_core_module_imports_without_django() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    count, modules = proc.stdout.strip().split(" ", 1)
    assert int(count) >= 30  # the whole core was walked, not an empty package
    assert modules == "[]", modules
