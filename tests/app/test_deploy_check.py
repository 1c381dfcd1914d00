"""The production profile (docs/security.md, threat 16): ``DJANGO_DEBUG=0`` with the documented
variables passes ``manage.py check --deploy`` with no warning, ``collectstatic`` works with
the manifest storage, and the pages it serves carry the hardening headers. Every run is a
fresh subprocess, so the settings module is read exactly as in production."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
HOST = "chat.example.com"


def _production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: the documented production variables and nothing from this run
    (no provider keys, no DATABASE_URL, no test settings)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),  # 86 random characters
        "DJANGO_ALLOWED_HOSTS": HOST,
        "DJANGO_CSRF_TRUSTED_ORIGINS": f"https://{HOST}",
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }
    env.update(extra)
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_check_deploy_is_clean_in_the_production_profile(tmp_path: Path) -> None:
    result = _manage(_production_env(tmp_path), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout
    assert "WARNINGS" not in result.stdout + result.stderr


def test_check_deploy_has_teeth(tmp_path: Path) -> None:
    """The same check fails on a weak key, so the clean run above means something."""
    weak = _manage(_production_env(tmp_path, DJANGO_SECRET_KEY="django-insecure-short"),
                   "check", "--deploy", "--fail-level", "WARNING")
    assert weak.returncode != 0 and "security.W009" in weak.stdout + weak.stderr


def test_production_refuses_to_start_without_a_secret_key(tmp_path: Path) -> None:
    env = _production_env(tmp_path)
    del env["DJANGO_SECRET_KEY"]
    result = _manage(env, "check")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG=0" in result.stderr


PROBE = r"""
import json, os, re, sys
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django.setup()
from django.test import Client
client = Client(HTTP_HOST=sys.argv[1])
plain = client.get("/accounts/login/")
page = client.get("/accounts/login/", secure=True)
html = page.content.decode()
css = re.search(r'href="(/static/jxai_app/chat\.[0-9a-f]{12}\.css)"', html)
asset = client.get(css.group(1), secure=True) if css else None
print(json.dumps({
    "plain_status": plain.status_code, "plain_location": plain.get("Location"),
    "status": page.status_code, "headers": dict(page.headers),
    "cookies": {k: {"secure": bool(v["secure"]), "httponly": bool(v["httponly"])} for k, v in page.cookies.items()},
    "css": css.group(1) if css else None,
    "asset_status": asset.status_code if asset else None,
    "asset_cache": asset.get("Cache-Control") if asset else None,
}))
"""


def test_collectstatic_with_the_manifest_storage_and_the_pages_it_serves(tmp_path: Path) -> None:
    env = _production_env(tmp_path)
    collected = _manage(env, "collectstatic", "--noinput")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    static = tmp_path / "static"
    manifest = json.loads((static / "staticfiles.json").read_text())["paths"]
    for name in ("jxai_app/chat.js", "jxai_app/chat.css", "jxai_app/socket.js", "jxai_app/render.js",
                 "jxai_app/vendor/purify.min.js", "jxai_app/vendor/marked.min.js", "admin/css/base.css"):
        hashed = manifest[name]
        assert re.search(r"\.[0-9a-f]{12}\.", hashed) and (static / hashed).is_file(), name
        assert (static / (hashed + ".gz")).is_file(), f"{name}: compressed copy"

    probe = subprocess.run([sys.executable, "-c", PROBE, HOST], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert seen["plain_status"] == 301 and seen["plain_location"] == f"https://{HOST}/accounts/login/"
    assert seen["status"] == 200
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert headers["strict-transport-security"] == "max-age=31536000; includeSubDomains; preload"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "same-origin"
    assert "script-src 'self'" in headers["content-security-policy"]
    assert seen["cookies"]["csrftoken"]["secure"] is True
    # The page names the hashed stylesheet from the manifest, and WhiteNoise serves it with a
    # far-future cache lifetime.
    assert seen["css"] == "/static/" + manifest["jxai_app/chat.css"]
    assert seen["asset_status"] == 200 and "immutable" in (seen["asset_cache"] or "")


def test_hosts_default_to_loopback_only(tmp_path: Path) -> None:
    """Without the host list a production server answers only for loopback names: the
    public host gets 400, never a page."""
    env = _production_env(tmp_path)
    del env["DJANGO_ALLOWED_HOSTS"]
    probe = subprocess.run([sys.executable, "-c", PROBE, HOST], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout.strip().splitlines()[-1])["status"] == 400
