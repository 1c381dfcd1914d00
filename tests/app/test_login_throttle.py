"""Password guessing: django-axes locks a (username, client address) pair after
``JXAI_LOGIN_FAILURE_LIMIT`` failures for ``JXAI_LOGIN_COOLOFF_MINUTES``, on the site's login
page and on admin's, even for the right password; other pairs are not affected.

Real parts: Django's test client on the real login views, the real axes backend and
middleware, the real database (failures are ``AccessAttempt`` rows; the cool-off passes by
moving those rows back in time).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.db.models import F
from django.test import Client

from tests.app.test_deploy_check import ROOT

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
PAGES = {"site": "/accounts/login/", "admin": "/admin/login/"}


@pytest.fixture
def member(settings: Any, django_user_model: Any) -> Any:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast checks, same views
    return django_user_model.objects.create_superuser("bob", "bob@example.com", PASSWORD)


def _login(url: str, password: str, *, username: str = "bob", address: str = "10.0.0.1", **meta: str) -> int:
    """POST the login form from ``address``; the status: 302 logged in, 200 the form again
    (wrong password), 429 locked out."""
    return Client().post(url, {"username": username, "password": password}, REMOTE_ADDR=address, **meta).status_code


def _fail(url: str, times: int, **options: Any) -> list[int]:
    return [_login(url, "wrong", **options) for _ in range(times)]


@pytest.mark.parametrize("page", PAGES)
def test_the_pair_is_locked_after_five_failures_even_for_the_right_password(member: Any, page: str) -> None:
    url = PAGES[page]
    assert _fail(url, 4) == [200] * 4
    assert _login(url, "wrong") == 429  # the fifth failure locks
    assert _login(url, PASSWORD) == 429
    assert _login(url, PASSWORD, address="10.0.0.2") == 302  # the same name from elsewhere
    assert _fail(url, 1, username="carol") == [200]  # another name from the same address


def _time_passes(minutes: int) -> None:
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=minutes))


@pytest.mark.parametrize("page", PAGES)
def test_the_lock_ends_after_the_cool_off(member: Any, page: str) -> None:
    url = PAGES[page]
    _fail(url, 5)
    _time_passes(14)
    assert _login(url, PASSWORD) == 429  # still locked; a try while locked starts the wait again
    _time_passes(14)
    assert _login(url, PASSWORD) == 429
    _time_passes(16)
    assert _login(url, PASSWORD) == 302


def test_a_success_clears_the_count(member: Any) -> None:
    url = PAGES["site"]
    assert _fail(url, 4) == [200] * 4
    assert _login(url, PASSWORD) == 302
    assert _fail(url, 4) == [200] * 4
    assert _login(url, PASSWORD) == 302


def test_behind_a_proxy_the_address_it_appended_is_counted(settings: Any, member: Any) -> None:
    settings.JXAI_LOGIN_IP_HEADER = "HTTP_X_FORWARDED_FOR"
    url = PAGES["site"]
    proxy = {"address": "127.0.0.1"}
    # The client writes whatever it likes first; the proxy appends the address it saw.
    assert [_login(url, "wrong", HTTP_X_FORWARDED_FOR=f"1.2.3.{n}, 203.0.113.7", **proxy)
            for n in range(5)][-1] == 429
    assert _login(url, PASSWORD, HTTP_X_FORWARDED_FOR="9.9.9.9, 203.0.113.7", **proxy) == 429
    assert _login(url, PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.8", **proxy) == 302  # another client


def test_the_limits_come_from_the_environment() -> None:
    env = {**os.environ, "JXAI_LOGIN_FAILURE_LIMIT": "2", "JXAI_LOGIN_COOLOFF_MINUTES": "90"}
    code = ("from django.conf import settings as s; "
            "print(s.AXES_ENABLED, s.AXES_FAILURE_LIMIT, int(s.AXES_COOLOFF_TIME.total_seconds()))")
    run = subprocess.run([sys.executable, "manage.py", "shell", "-v", "0", "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.stdout.split() == ["True", "2", "5400"], run.stderr
    env["JXAI_LOGIN_FAILURE_LIMIT"] = "0"
    run = subprocess.run([sys.executable, "manage.py", "shell", "-v", "0", "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.stdout.split()[0] == "False", run.stderr
