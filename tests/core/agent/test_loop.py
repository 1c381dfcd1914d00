"""The agent loop's rounds, events and outcomes (docs/agent.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

import pytest

from jxai_app.core.agent import (
    EMPTY_REPLY, STOPPED, AgentPolicy, RoundEndEvent, RoundStartEvent, ToolResultEvent, ToolStartEvent,
    TurnEndEvent, run_turn,
)
from jxai_app.core.repair import SEAL_RELOADED
from jxai_app.core.streaming.events import (
    DeltaEvent, DoneEvent, ErrorEvent, ReasoningEvent, ToolCallStartEvent, UsageEvent, event_from_dict,
)
from tests.core.agent.scripted import (
    FakeTools, Raise, ScriptedClient, Sleep, Stop, call_events, ok, play, text_round, tool_round, usage,
)

USER = {"role": "user", "content": "What is the weather in Oslo?"}


async def test_plain_answer_event_grammar_and_appended_message() -> None:
    client = ScriptedClient([[DeltaEvent(content="Hel"), DeltaEvent(content="lo"), usage(12, 3),
                              DoneEvent(stop_reason="stop")]])
    turn = await play(client, FakeTools({"f": lambda a, c: ok()}), history=[USER], system_prompt="Be brief.")
    assert turn.types == ["round_start", "delta", "delta", "usage", "done", "round_end", "turn_end"]
    answer = {"role": "assistant", "content": "Hello"}
    assert turn.end.outcome == "complete" and turn.end.message is None
    assert list(turn.end.appended) == [answer]
    assert turn.of(RoundEndEvent) == [RoundEndEvent(round=1, stop_reason="stop", message=answer)]
    assert turn.of(RoundStartEvent) == [RoundStartEvent(round=1)]
    assert turn.end.usage.to_dict() == {"inputTokens": 12, "outputTokens": 3, "rounds": 1, "toolRounds": 0,
                                        "last": {"inputTokens": 12, "outputTokens": 3}}
    (request,) = client.requests
    assert request["messages"] == [USER] and request["system_prompt"] == "Be brief."
    assert [t["function"]["name"] for t in request["tools"]] == ["f"]


async def test_every_event_survives_a_json_round_trip_and_streaming_events_pass_through_unchanged() -> None:
    client = ScriptedClient([
        [ReasoningEvent(content="hmm"), *tool_round(("c1", "f", '{"x":1}'), text="Checking")],
        [DeltaEvent(content="done"), UsageEvent(input_tokens=5, output_tokens=2, reasoning_tokens=1),
         DoneEvent(stop_reason="stop")],
    ])
    turn = await play(client, FakeTools({"f": lambda a, c: ok({"when": "now", "n": [1, 2]})}))
    for event in turn.events:
        wire = json.loads(json.dumps(event.to_dict(), ensure_ascii=False))
        assert wire["type"] == event.type
        if event.type in ("delta", "reasoning", "tool_call_start", "tool_call_delta", "tool_call_end", "usage",
                          "done", "error"):
            assert event_from_dict(wire) == event
    assert turn.types.count("round_start") == 2 and turn.types[-1] == "turn_end"
    assert turn.of(ToolStartEvent)[0].to_dict() == {"type": "tool_start", "callId": "c1", "name": "f",
                                                    "arguments": '{"x":1}'}
    result = turn.of(ToolResultEvent)[0].to_dict()
    assert list(result) == ["type", "callId", "name", "success", "result", "message"]
    assert result["result"] == {"success": True, "data": {"when": "now", "n": [1, 2]}}
    end = turn.end.to_dict()
    assert list(end) == ["type", "outcome", "message", "appended", "usage"]


async def test_each_round_sends_history_plus_everything_appended_and_rereads_the_tool_list() -> None:
    tools = FakeTools({"f": lambda a, c: ok(1), "g": lambda a, c: ok(2)},
                      names_by_listing=[["f"], ["f", "g"], ["g"]])
    client = ScriptedClient([tool_round(("c1", "f", "{}")), tool_round(("c2", "g", "{}")), text_round("end")])
    turn = await play(client, tools, history=[USER])
    assert tools.listings == 3
    assert [[t["function"]["name"] for t in r["tools"]] for r in client.requests] == [["f"], ["f", "g"], ["g"]]
    appended = list(turn.end.appended)
    assert client.sent(0) == [USER]
    assert client.sent(1) == [USER, *appended[:2]]
    assert client.sent(2) == [USER, *appended[:4]]
    assert appended[-1] == {"role": "assistant", "content": "end"}


async def test_assistant_message_shape_content_reasoning_and_calls() -> None:
    client = ScriptedClient([
        [ReasoningEvent(content="think "), ReasoningEvent(content="more"), DeltaEvent(content="Let me check."),
         *call_events("a", "f", '{"q":', '"x"}'), *call_events("b", "f", ""), DoneEvent(stop_reason="tool_calls")],
        [*call_events("c", "f", "{}"), DoneEvent(stop_reason="tool_calls")],
        text_round("ok"),
    ])
    turn = await play(client, FakeTools({"f": lambda a, c: ok()}))
    first, second = (m for m in turn.end.appended if m["role"] == "assistant" and m.get("tool_calls"))
    assert list(first) == ["role", "content", "reasoning_content", "tool_calls"]
    assert first["content"] == "Let me check." and first["reasoning_content"] == "think more"
    assert first["tool_calls"] == [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"q":"x"}'}},
        {"id": "b", "type": "function", "function": {"name": "f", "arguments": ""}}]
    assert second == {"role": "assistant", "content": None,
                      "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    # reasoning goes back on the turn that streamed it, and only there
    assert client.sent(1)[1]["reasoning_content"] == "think more"
    assert "reasoning_content" not in client.sent(2)[4]


@pytest.mark.parametrize("finish", ["stop", "tool_calls", "length", "content_filter"])
async def test_calls_run_whatever_the_finish_reason(finish: str) -> None:
    tools = FakeTools({"f": lambda a, c: ok(a)})
    client = ScriptedClient([tool_round(("c1", "f", '{"v":1}'), stop=finish), text_round("fine")])
    turn = await play(client, tools)
    assert [(n, a) for n, a, _ in tools.executed] == [("f", '{"v":1}')]
    assert turn.end.outcome == "complete"
    assert turn.of(RoundEndEvent)[0].stop_reason == finish
    assert client.sent(1)[-1] == {"role": "tool", "tool_call_id": "c1", "content": '{"success":true,"data":{"v":1}}'}


async def test_a_cancelled_round_runs_none_of_its_calls_and_appends_nothing() -> None:
    tools = FakeTools({"f": lambda a, c: ok()})
    client = ScriptedClient([[DeltaEvent(content="partial"), *call_events("c1", "f", "{}"), Stop(),
                              DeltaEvent(content="never")]])
    turn = await play(client, tools)
    assert tools.executed == []
    assert turn.end.outcome == "cancelled" and turn.end.message == STOPPED and turn.end.appended == ()
    assert turn.types[-3:] == ["done", "round_end", "turn_end"]
    assert turn.events[-3] == DoneEvent(stop_reason="cancelled")
    assert turn.of(RoundEndEvent) == [RoundEndEvent(round=1, stop_reason="cancelled", message=None)]


async def test_stop_while_streaming_is_cancelled_even_if_the_provider_then_says_stop() -> None:
    client = ScriptedClient([[DeltaEvent(content="a"), Stop(), *call_events("c1", "f", "{}"),
                              DoneEvent(stop_reason="stop")]], honour_signal=False)
    tools = FakeTools({"f": lambda a, c: ok()})
    turn = await play(client, tools)
    assert turn.end.outcome == "cancelled" and tools.executed == [] and turn.end.appended == ()


async def test_stop_before_the_turn_opens_no_round_and_sends_nothing() -> None:
    signal = asyncio.Event()
    signal.set()
    client = ScriptedClient([text_round("never")])
    turn = await play(client, signal=signal)
    assert client.requests == [] and turn.types == ["turn_end"] and turn.end.outcome == "cancelled"


async def test_error_ends_the_turn_dropping_only_the_failed_rounds_partial_message() -> None:
    failure = ErrorEvent(message="Rate limit reached", code="429")
    client = ScriptedClient([tool_round(("c1", "f", "{}")),
                             [DeltaEvent(content="half"), *call_events("c2", "f", '{"a":'), failure]])
    tools = FakeTools({"f": lambda a, c: ok("r")})
    turn = await play(client, tools)
    assert turn.end.outcome == "error" and turn.end.message == "Rate limit reached"
    assert [m["role"] for m in turn.end.appended] == ["assistant", "tool"]
    assert [n for n, _, _ in tools.executed] == ["f"]
    assert turn.events[-3] is failure
    assert turn.of(RoundEndEvent)[-1] == RoundEndEvent(round=2, stop_reason="error", message=None)


async def test_an_error_with_an_empty_message_is_still_an_error() -> None:
    turn = await play(ScriptedClient([[DeltaEvent(content="x"), ErrorEvent(message="", code="upstream_error")]]))
    assert turn.end.outcome == "error" and turn.end.message == "The model request failed."


class _RaisingClient:
    def __init__(self, when: str) -> None:
        self.when = when

    def stream_chat(self, messages: Any, tools: Any, system_prompt: str, *, signal: Any = None
                    ) -> AsyncIterator[Any]:
        if self.when == "call":
            raise RuntimeError("secret key sk-123 leaked in a traceback")
        return self._gen()

    async def _gen(self) -> AsyncIterator[Any]:
        yield DeltaEvent(content="par")
        raise ConnectionError("socket exploded")


@pytest.mark.parametrize("when", ["call", "midstream"])
async def test_a_client_that_raises_becomes_an_error_event_and_outcome(when: str) -> None:
    turn = await play(_RaisingClient(when))
    err = turn.events[-3]
    assert isinstance(err, ErrorEvent) and err.code == "internal_error"
    assert err.problem is not None and err.problem["status"] == 500
    assert "sk-123" not in err.message and "socket" not in err.message
    assert turn.end.outcome == "error" and turn.end.appended == ()


async def test_raise_inside_a_scripted_round_after_earlier_rounds_keeps_them() -> None:
    client = ScriptedClient([tool_round(("c1", "f", "{}")), [Raise(ValueError("boom"))]])
    turn = await play(client, FakeTools({"f": lambda a, c: ok()}))
    assert turn.end.outcome == "error" and len(turn.end.appended) == 2
    assert client.closed == 2


async def test_a_stream_that_ends_without_done_is_an_incomplete_stream_error() -> None:
    tools = FakeTools({"f": lambda a, c: ok()})
    turn = await play(ScriptedClient([[DeltaEvent(content="a"), *call_events("c1", "f", '{"x":', end=False)]]), tools)
    err = turn.events[-3]
    assert isinstance(err, ErrorEvent) and err.code == "incomplete_stream"
    assert turn.end.outcome == "error" and tools.executed == []


async def test_unknown_frames_are_ignored_and_nothing_after_the_terminal_event_is_read() -> None:
    client = ScriptedClient([[{"type": "stream_start"}, DeltaEvent(content="a"), DoneEvent(stop_reason="stop"),  # type: ignore[list-item]
                              DeltaEvent(content="late"), ErrorEvent(message="late")]])
    turn = await play(client)
    assert turn.types == ["round_start", "delta", "done", "round_end", "turn_end"]
    assert list(turn.end.appended) == [{"role": "assistant", "content": "a"}]
    assert client.closed == 1


async def test_a_silent_round_ends_empty_and_appends_nothing() -> None:
    turn = await play(ScriptedClient([[usage(4, 0), DoneEvent(stop_reason="stop")]]))
    assert turn.end.outcome == "empty" and turn.end.message == EMPTY_REPLY and turn.end.appended == ()
    assert turn.of(RoundEndEvent) == [RoundEndEvent(round=1, stop_reason="stop", message=None)]


async def test_a_silent_round_after_a_drawn_round_completes() -> None:
    client = ScriptedClient([tool_round(("c1", "f", "{}")), [DoneEvent(stop_reason="stop")]])
    turn = await play(client, FakeTools({"f": lambda a, c: ok()}))
    assert turn.end.outcome == "complete" and len(turn.end.appended) == 2


async def test_drawn_before_counts_only_after_the_last_user_message() -> None:
    silent = [DoneEvent(stop_reason="stop")]
    after_user = [USER, {"role": "assistant", "content": "partial answer"}]
    assert (await play(ScriptedClient([silent]), history=after_user)).end.outcome == "complete"
    before_user = [{"role": "user", "content": "0"}, {"role": "assistant", "content": "old"}, USER]
    assert (await play(ScriptedClient([silent]), history=before_user)).end.outcome == "empty"
    reasoning_only = [USER, {"role": "assistant", "content": "", "reasoning_content": "hm"}]
    assert (await play(ScriptedClient([silent]), history=reasoning_only)).end.outcome == "empty"


async def test_a_reasoning_only_round_is_kept_for_display_but_never_sent() -> None:
    client = ScriptedClient([[ReasoningEvent(content="pondering"), DoneEvent(stop_reason="stop")]])
    turn = await play(client, history=[USER])
    thought = {"role": "assistant", "content": "", "reasoning_content": "pondering"}
    assert turn.end.outcome == "complete" and list(turn.end.appended) == [thought]
    nxt = ScriptedClient([text_round("ok")])
    await play(nxt, history=[USER, thought, {"role": "user", "content": "and?"}])
    assert nxt.sent(0) == [USER, {"role": "user", "content": "and?"}]


async def test_history_is_repaired_before_each_request_and_never_mutated() -> None:
    dangling = {"role": "assistant", "content": None,
                "tool_calls": [{"id": "old", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    history = [{"role": "user", "content": "0"}, dangling, {"role": "assistant", "content": ""},
               {"role": "tool", "tool_call_id": "ghost", "content": "{}"}, USER]
    snapshot = json.dumps(history)
    client = ScriptedClient([tool_round(("c1", "f", "{}")), text_round("ok")])
    turn = await play(client, FakeTools({"f": lambda a, c: ok()}), history=history)
    seal = {"role": "tool", "tool_call_id": "old",
            "content": json.dumps({"success": False, "error": SEAL_RELOADED}, separators=(",", ":"),
                                  ensure_ascii=False)}
    for n in range(2):
        assert client.sent(n)[:4] == [{"role": "user", "content": "0"}, dangling, seal, USER]
        assert all(m.get("content") or m.get("tool_calls") for m in client.sent(n))  # no empty assistant
    assert json.dumps(history) == snapshot
    assert all(m["role"] != "tool" or m["tool_call_id"] != "old" for m in turn.end.appended)


async def test_usage_totals_over_rounds() -> None:
    client = ScriptedClient([[*tool_round(("c1", "f", "{}"))[:-1], usage(100, 10), DoneEvent(stop_reason="tool_calls")],
                             [DeltaEvent(content="x"), usage(130, 7), DoneEvent(stop_reason="stop")]])
    turn = await play(client, FakeTools({"f": lambda a, c: ok()}))
    u = turn.end.usage
    assert (u.input_tokens, u.output_tokens, u.rounds, u.tool_rounds) == (230, 17, 2, 1)
    assert u.last == usage(130, 7)


async def test_closing_the_turn_early_closes_the_client_stream_and_cancels_running_tools() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow(args: Any, ctx: Any) -> Any:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ok()

    client = ScriptedClient([tool_round(("c1", "slow", "{}"))])
    signal = asyncio.Event()
    turn = run_turn(client=client, tools=FakeTools({"slow": slow}), history=[USER], system_prompt="",
                    signal=signal, context_factory=lambda i, n: None)
    async for event in turn:
        if isinstance(event, ToolStartEvent):
            await started.wait()
            break
    await turn.aclose()  # type: ignore[attr-defined]
    assert cancelled.is_set() and client.closed == 1

    stream_client = ScriptedClient([[DeltaEvent(content="a"), Sleep(30), DoneEvent(stop_reason="stop")]])
    turn = run_turn(client=stream_client, tools=None, history=[USER], system_prompt="", context_factory=lambda i, n: None)
    async for event in turn:
        if isinstance(event, DeltaEvent):
            break
    await turn.aclose()  # type: ignore[attr-defined]
    assert stream_client.closed == 1


def test_policy_defaults_and_validation() -> None:
    assert AgentPolicy() == AgentPolicy(max_tool_rounds=5, max_rounds=25, tool_concurrency=4, tool_timeout=None)
    for bad in ({"max_tool_rounds": 0}, {"max_rounds": -1}, {"tool_concurrency": 0}, {"max_rounds": True},
                {"tool_concurrency": 1.5}, {"tool_timeout": 0}):
        with pytest.raises(ValueError):
            AgentPolicy(**bad)  # type: ignore[arg-type]


async def test_stream_events_are_the_clients_own_objects_in_order() -> None:
    script = [ReasoningEvent(content="r"), DeltaEvent(content="a"), ToolCallStartEvent(id="x", name="f"),
              DoneEvent(stop_reason="tool_calls")]
    client = ScriptedClient([script, text_round("b")])
    turn = await play(client, FakeTools({"f": lambda a, c: ok()}))
    streamed = [e for e in turn.events if not isinstance(e, (RoundStartEvent, RoundEndEvent, ToolStartEvent,
                                                               ToolResultEvent, TurnEndEvent))]
    assert all(a is b for a, b in zip(streamed, script))


async def test_the_stream_function_is_looked_up_afresh_each_round() -> None:
    first = ScriptedClient([tool_round(("c1", "f", "{}"))])
    second = ScriptedClient([text_round("from the new function")])

    class Swapping:
        stream_chat = first.stream_chat

    client = Swapping()

    def f(args: Any, ctx: Any) -> Any:
        client.stream_chat = second.stream_chat  # type: ignore[method-assign]
        return ok()

    turn = await play(client, FakeTools({"f": f}))
    assert len(first.requests) == 1 and len(second.requests) == 1
    assert turn.end.appended[-1] == {"role": "assistant", "content": "from the new function"}


async def test_a_tool_listing_that_raises_ends_the_turn_with_an_error_not_an_exception() -> None:
    class BrokenListing(FakeTools):
        def list_for_llm(self) -> list[dict[str, Any]]:
            raise KeyError("predicate exploded")

    client = ScriptedClient([text_round("never")])
    turn = await play(client, BrokenListing())
    assert client.requests == []
    assert turn.types == ["round_start", "error", "round_end", "turn_end"]
    assert turn.end.outcome == "error"


def test_the_loop_and_repair_import_without_django() -> None:
    import subprocess
    import sys

    code = ("import sys, jxai_app.core.agent, jxai_app.core.repair; "
            "assert not [m for m in sys.modules if m == 'django' or m.startswith('django.')], 'django imported'")
    env = {k: v for k, v in __import__("os").environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
