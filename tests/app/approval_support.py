"""Helpers for the tool-approval tests (docs/approval.md): a provider round that
calls several tools at once, the policy that makes ``probe`` wait for approval, and what the
fake provider's later requests carried."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.fake_provider import FakeProvider, Script, openai_chunk

__all__ = ["calls_script", "require_approval", "tool_replies", "tools"]


def calls_script(*calls: tuple[str, str, dict[str, Any]]) -> Script:
    """One provider round calling every ``(call_id, name, args)`` of ``calls``, in order."""
    writes = [openai_chunk({"role": "assistant", "content": None})]
    for index, (call_id, name, args) in enumerate(calls):
        writes.append(openai_chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                    "function": {"name": name, "arguments": json.dumps(args)}}]}))
    writes += [openai_chunk({}, "tool_calls"), openai_chunk(usage={"prompt_tokens": 40, "completion_tokens": 8},
                                                            choices=False), b"data: [DONE]\n\n"]
    return Script(writes=writes)


def require_approval(tool_name: str = "probe", **fields: Any) -> Any:
    """A ``ToolPolicy`` row saying every call of ``tool_name`` waits for approval (sync)."""
    from jxai_app.models import ToolPolicy

    return ToolPolicy.objects.create(tool_name=tool_name, requires_approval="always", **fields)


def tool_replies(provider: FakeProvider, request_index: int) -> dict[str, Any]:
    """The ``tool`` messages of one request the provider received, by call id, parsed."""
    messages = provider.requests[request_index].json["messages"]
    return {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


@pytest.fixture
def tools(probe_tools: None) -> None:
    """``probe`` registered (the ``probe_tools`` fixture of tests.app.turns_support, which the
    test module imports) and requiring approval."""
    require_approval("probe")
