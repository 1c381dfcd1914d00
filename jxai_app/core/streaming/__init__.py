"""jxai's framework-free streaming core (docs/streaming.md): normalised events and the
clients that produce them. Never imports Django.

Public names::

    ChatClient, ClientTimeouts, Signal                   (base)
    OpenAIChatClient, ResponsesChatClient, AnthropicChatClient, ProxyChatClient
    PROVIDER_PRESETS, ProviderPreset                     (presets)
    the eight events, StreamEvent, event_from_dict, encode_event, is_terminal   (events)
"""

from __future__ import annotations

from jxai_app.core.streaming.anthropic import AnthropicChatClient
from jxai_app.core.streaming.base import ChatClient, ClientTimeouts, Signal
from jxai_app.core.streaming.events import (
    EVENT_TYPES,
    DeltaEvent,
    DoneEvent,
    ErrorEvent,
    ReasoningEvent,
    StopReason,
    StreamEvent,
    TerminalEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UsageEvent,
    encode_event,
    event_from_dict,
    is_terminal,
)
from jxai_app.core.streaming.openai import OpenAIChatClient
from jxai_app.core.streaming.presets import PROVIDER_PRESETS, ProviderPreset
from jxai_app.core.streaming.proxy import ProxyChatClient
from jxai_app.core.streaming.responses import ResponsesChatClient

__all__ = [
    "AnthropicChatClient",
    "ChatClient",
    "ClientTimeouts",
    "DeltaEvent",
    "DoneEvent",
    "EVENT_TYPES",
    "ErrorEvent",
    "OpenAIChatClient",
    "PROVIDER_PRESETS",
    "ProviderPreset",
    "ProxyChatClient",
    "ReasoningEvent",
    "ResponsesChatClient",
    "Signal",
    "StopReason",
    "StreamEvent",
    "TerminalEvent",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallStartEvent",
    "UsageEvent",
    "encode_event",
    "event_from_dict",
    "is_terminal",
]
