"""Shared helpers for the streaming-core tests: a running FakeProvider and event collection."""

from __future__ import annotations

from typing import Any, AsyncIterator, Iterator

import pytest

from jxai_app.core.streaming.events import StreamEvent
from tests.support.fake_provider import FakeProvider

USER = [{"role": "user", "content": "hello"}]
"""The one-message history most tests send."""

GET_WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
"""The get_weather function tool of unit-only.md."""


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    """A started FakeProvider, stopped after the test."""
    with FakeProvider() as provider:
        yield provider


async def collect(stream: AsyncIterator[StreamEvent]) -> list[dict[str, Any]]:
    """Every event of a stream, in wire form."""
    return [event.to_dict() async for event in stream]
