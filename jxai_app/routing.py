"""Websocket routes (SPEC §7): ``ws/chat/``."""

from django.urls import path

websocket_urlpatterns: list = []
