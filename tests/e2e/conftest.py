"""Browser tests: the real app served by daphne, driven through Debian's Chromium.

How the pieces fit:

* ``fake_llm`` (session): a :class:`FakeProvider` on 127.0.0.1 answering through
  :class:`~tests.e2e.scripted_model.ScriptedModel` (the test picks a behaviour by what it types).
* ``app_server`` (session): ``python -m daphne project.asgi:application`` in a subprocess on a
  free 127.0.0.1 port, against the **test database** pytest-django created (SQLite file or
  PostgreSQL, whichever the run uses: its ``DATABASE_URL`` is built from the test connection),
  the channel layer of the run (``REDIS_URL`` is passed through), and ``JXAI_MODELS_JSON``
  naming the fake provider, with ``JXAI_CONVERSATIONS_PAGE_SIZE`` = :data:`PAGE_SIZE`. Its log goes
  to ``test-results/e2e/daphne.log``.
* ``oidc_idp`` (session): a real OpenID Connect provider on 127.0.0.1
  (:class:`~tests.support.oidc_provider.OidcProvider`); the server is configured to sign in
  through it (``JXAI_OIDC_*``, groups starting with ``idp-`` synced) beside the password form.
* ``browser`` (module): ``/usr/bin/chromium`` headless through Playwright (never a
  downloaded browser); each test gets a fresh context and page.
* ``logged_in``: a page where a new user has logged in (most chat tests start there).
* Data: tests use the ``live_db`` fixture (transactional, so the server sees committed rows).
  Sync Playwright keeps an asyncio loop marked running in the test's thread, which Django's
  async-safety check would take for an async context; the ORM here runs while that loop is
  parked, so ``DJANGO_ALLOW_ASYNC_UNSAFE`` is set for these tests only, torn down after the
  database flush.

Screenshots and failure captures go to ``test-results/e2e/``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.scripted_model import ScriptedModel
from tests.support.database import database_url
from tests.support.fake_provider import FakeProvider
from tests.support.oidc_provider import CLIENT_ID, CLIENT_SECRET, OidcProvider

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "test-results" / "e2e"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PASSWORD = "e2e-pass-4821"
MODELS = ("fake-model", "fake-large")
PAGE_SIZE = 5
"""``JXAI_CONVERSATIONS_PAGE_SIZE`` of the test server: small, so paging shows with a few rows."""


@dataclass
class LiveServer:
    """The daphne subprocess serving the app."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class BrowserPage:
    """A page plus what it reported: uncaught errors, console errors, every request URL."""

    page: Any
    errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    accept_dialogs: bool = False
    """Accept (``confirm()`` → OK) instead of dismissing; dialogs are recorded either way."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_serving(url: str, process: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{url}/accounts/login/", timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    return False


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[tuple[FakeProvider, ScriptedModel]]:
    fake = FakeProvider()
    model = ScriptedModel(leak_url=f"{fake.base}/leak?q=secret")
    fake.handler = model
    with fake:
        yield fake, model


@pytest.fixture(scope="session")
def oidc_idp() -> Iterator[OidcProvider]:
    with OidcProvider() as provider:
        yield provider


@pytest.fixture(scope="session")
def app_server(django_db_setup: Any, django_db_blocker: Any,
                fake_llm: tuple[FakeProvider, ScriptedModel], oidc_idp: OidcProvider) -> Iterator[LiveServer]:
    from django.db import connection

    with django_db_blocker.unblock():
        db_url = database_url(connection.settings_dict)
    fake, _ = fake_llm
    registry = {
        "providers": {"fake": {"kind": "openai", "base_url": fake.url, "api_key_env": None}},
        "models": {
            "fake-model": {"provider": "fake", "model_id": "fake-model", "context_window": 1000,
                           "label": "Fake model"},
            "fake-large": {"provider": "fake", "model_id": "fake-large", "context_window": 128000,
                           "label": "Fake large"},
        },
        "roles": {"default": "fake-model"},
    }
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "DATABASE_URL": db_url,
           "JXAI_MODELS_JSON": json.dumps(registry), "DJANGO_DEBUG": "1", "JXAI_UPSTREAM_RETRIES": "0",
           "JXAI_CONVERSATIONS_PAGE_SIZE": str(PAGE_SIZE), "PYTHONUNBUFFERED": "1", "DJANGO_LOG_LEVEL": "WARNING",
           "JXAI_OIDC_ISSUER": oidc_idp.issuer, "JXAI_OIDC_CLIENT_ID": CLIENT_ID,
           "JXAI_OIDC_CLIENT_SECRET": CLIENT_SECRET, "JXAI_OIDC_NAME": "Test IdP", "JXAI_OIDC_GROUP_PREFIX": "idp-",
           "DJANGO_MEDIA_ROOT": str(RESULTS / "media")}  # uploaded attachments (docs/attachments.md)
    for name in ("JXAI_MODELS_FILE", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE"):
        env.pop(name, None)
    RESULTS.mkdir(parents=True, exist_ok=True)
    log_path = RESULTS / "daphne.log"
    for _attempt in range(3):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "--access-log", os.devnull,
                 "project.asgi:application"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        if _wait_until_serving(url, process, timeout=40):
            break
        process.kill()
        process.wait()
    else:
        raise RuntimeError(f"daphne did not start; its log:\n{log_path.read_text(errors='replace')}")
    server = LiveServer(url=url, process=process, log_path=log_path)
    oidc_idp.redirect_uris.add(f"{url}/accounts/oidc/callback/")
    yield server
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def browser(app_server: LiveServer) -> Iterator[Any]:
    """Chromium, one per test module. Sync Playwright marks an asyncio loop running in this
    thread while it is up, which async tests and Django's database setup must not see: so it
    starts after the server (and the test database) and stops at the end of each module."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium chromium-driver (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def _orm_beside_playwright() -> Iterator[None]:
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def live_db(_orm_beside_playwright: None, transactional_db: Any) -> None:
    """Committed rows the server process can see (flushed after the test)."""


@pytest.fixture
def make_user(live_db: None, django_user_model: Any) -> Any:
    counter = iter(range(1, 1000))

    def make(name: str = "alice") -> Any:
        return django_user_model.objects.create_user(f"{name}{next(counter)}", password=PASSWORD)

    return make


@pytest.fixture
def open_page(app_server: LiveServer, browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``open_page(viewport=None, context=None) -> BrowserPage``: a new page (a new context
    unless one is given), with its errors, console errors, dialogs and requests recorded."""
    contexts: list[Any] = []
    pages: list[BrowserPage] = []

    def new_context(viewport: dict[str, int] | None = None) -> Any:
        context = browser.new_context(viewport=viewport or {"width": 1280, "height": 820}, base_url=app_server.url)
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context

    def open_(viewport: dict[str, int] | None = None, context: Any = None) -> BrowserPage:
        ctx = context or new_context(viewport)
        page = ctx.new_page()
        recorded = BrowserPage(page)
        page.on("pageerror", lambda exc: recorded.errors.append(str(exc)))
        page.on("console", lambda msg: recorded.console_errors.append(msg.text) if msg.type == "error" else None)
        page.on("request", lambda req: recorded.requests.append(req.url))

        def on_dialog(dialog: Any) -> None:
            recorded.dialogs.append(f"{dialog.type}: {dialog.message}")
            if recorded.accept_dialogs:
                dialog.accept()
            else:
                dialog.dismiss()

        page.on("dialog", on_dialog)
        pages.append(recorded)
        return recorded

    open_.new_context = new_context  # type: ignore[attr-defined]
    yield open_
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        RESULTS.mkdir(parents=True, exist_ok=True)
        for index, recorded in enumerate(pages):
            try:
                recorded.page.screenshot(path=str(RESULTS / f"{request.node.name}-failure-{index}.png"))
            except Exception:
                pass
    for context in contexts:
        context.close()


@pytest.fixture
def logged_in(open_page: Any, make_user: Any) -> Any:
    """``logged_in(viewport=None) -> BrowserPage``: a new page (in a new context) where a new
    user has logged in through the login page, its websocket open (``steps.login``)."""
    from tests.e2e.steps import login  # steps imports this module

    def open_logged_in(viewport: dict[str, int] | None = None) -> BrowserPage:
        recorded = open_page(viewport=viewport)
        login(recorded, make_user())
        return recorded

    return open_logged_in


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
