"""Websocket routes (docs/websocket.md): ``ws/chat/``."""

from __future__ import annotations

from typing import Any

from django.urls import path

from jxai_app.consumers import ChatConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/chat/", ChatConsumer.as_asgi()),
]
