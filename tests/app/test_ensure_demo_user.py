"""``manage.py ensure_demo_user``: a generated password, printed once, only on an empty database."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.test import RequestFactory

pytestmark = pytest.mark.django_db


def run() -> str:
    out = StringIO()
    call_command("ensure_demo_user", stdout=out)
    return out.getvalue()


def test_an_empty_database_gets_a_demo_user_whose_printed_password_works() -> None:
    output = run()
    match = re.search(r"username: (\S+)  password: (\S+)", output)
    assert match, output
    username, password = match.groups()
    assert username == "demo" and len(password) >= 16
    login = RequestFactory().post("/accounts/login/")  # login throttling authenticates a request
    assert authenticate(login, username=username, password=password) is not None


def test_passwords_differ_between_fresh_databases() -> None:
    first = re.search(r"password: (\S+)", run())
    get_user_model().objects.all().delete()
    second = re.search(r"password: (\S+)", run())
    assert first and second and first.group(1) != second.group(1)


def test_existing_users_are_left_alone_and_nothing_secret_is_printed() -> None:
    get_user_model().objects.create_user(username="alice", password="alice-pass-1")
    output = run()
    assert "password:" not in output and "already exist" in output
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["alice"]


def test_a_second_run_prints_no_password() -> None:
    assert "password: " in run()
    assert "password: " not in run()
    assert get_user_model().objects.count() == 1
