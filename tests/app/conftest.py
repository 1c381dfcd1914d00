"""Fixtures for the Django-layer tests: users, a fake monotonic clock, a write counter."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection


class FakeClock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class WriteCounter:
    """Counts INSERT/UPDATE/DELETE statements run on the default connection."""

    _WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)

    def __init__(self) -> None:
        self.statements: list[str] = []

    @property
    def count(self) -> int:
        return len(self.statements)

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if self._WRITE.match(sql):
            self.statements.append(sql)
        return execute(sql, params, many, context)


@contextmanager
def count_writes() -> Iterator[WriteCounter]:
    """Count the writes of the block (this thread's connection)."""
    counter = WriteCounter()
    with connection.execute_wrapper(counter):
        yield counter


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice")


@pytest.fixture
def other_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("mallory")
