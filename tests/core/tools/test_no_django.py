"""The tools package and the model registry are framework-free (STYLE.md, seed WS-3)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_importing_tools_and_providers_never_imports_django() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys, jxai_app.tools, jxai_app.tools.builtin, jxai_app.providers\n"
        "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "[]"
