"""Password guessing: django-axes locks a (username, client address) pair after
``JXAI_LOGIN_FAILURE_LIMIT`` failures for ``JXAI_LOGIN_COOLOFF_MINUTES``, on the site's login
page and on admin's, even for the right password; other pairs are not affected. Guesses from
many addresses make the account's tries wait a growing delay, never longer than its cap, and
never for a browser that logged in to it before.

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
from django.db.models import F, Sum
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


def test_guesses_from_many_addresses_wait_a_growing_delay_per_account_and_the_owner_is_never_locked_out(
        settings: Any, member: Any) -> None:
    settings.JXAI_LOGIN_ACCOUNT_DELAY_SECONDS = 60  # no try of this test waits on the clock
    url = PAGES["site"]
    owners_browser = Client()
    assert owners_browser.post(url, {"username": "bob", "password": PASSWORD}, REMOTE_ADDR="10.9.9.9").status_code == 302
    owners_browser.post("/accounts/logout/")  # the site's logout (the test client's own would drop every cookie)

    # 100 wrong passwords from 25 addresses, 4 each: the per-pair lockout (5) never trips.
    statuses = [_login(url, "wrong", address=f"10.1.0.{n // 4}") for n in range(100)]
    assert statuses[:10] == [200] * 10  # the account's limit: 10 failures from any address
    assert set(statuses[10:]) == {429}  # then each try waits, its password unchecked and uncounted
    assert AccessAttempt.objects.filter(username="bob").aggregate(n=Sum("failures_since_start"))["n"] == 10
    refused = Client().post(url, {"username": "bob", "password": PASSWORD}, REMOTE_ADDR="10.2.0.1")
    assert refused.status_code == 429 and 0 < int(refused["Retry-After"]) <= 60
    assert _login(PAGES["admin"], PASSWORD, address="10.2.0.1") == 429  # admin's login page too
    assert _login(url, "wrong", username="carol") == 200  # other accounts are not affected

    # The owner's browser, which logged in before, is not delayed.
    assert owners_browser.post(url, {"username": "bob", "password": PASSWORD}, REMOTE_ADDR="10.9.9.9").status_code == 302

    # The delay grows with every failure that was checked: 60 s, then 120 s.
    _time_passes(1)
    assert _login(url, "wrong", address="10.3.0.1") == 200  # the 11th failure, after the first wait
    second = Client().post(url, {"username": "bob", "password": PASSWORD}, REMOTE_ADDR="10.2.0.1")
    assert second.status_code == 429 and 60 < int(second["Retry-After"]) <= 120
    _time_passes(1)
    assert _login(url, PASSWORD, address="10.2.0.1") == 429
    _time_passes(1)
    assert _login(url, PASSWORD, address="10.2.0.1") == 302  # after the wait the right password logs in


def test_no_account_delay_when_its_limit_is_zero(settings: Any, member: Any) -> None:
    settings.JXAI_LOGIN_ACCOUNT_FAILURE_LIMIT = 0
    url = PAGES["site"]
    assert set(_login(url, "wrong", address=f"10.1.0.{n // 4}") for n in range(40)) == {200}
    assert _login(url, PASSWORD, address="10.2.0.1") == 302
