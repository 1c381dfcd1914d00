"""The core imports without Django (house rule; STYLE "guard test")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import importlib, sys
for name in ("jxai_app.streaming", "jxai_app.streaming.__main__", "jxai_app.tools", "jxai_app.agent"):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:  # a missing module *inside* one of ours is a failure
            raise
        print("absent", name)
print("django" in sys.modules, sorted(m for m in sys.modules if m.split(".")[0] == "django")[:5])
"""


def test_core_imports_without_django() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False []", proc.stdout
