"""The transcript corpus (our own fixtures in tests/data/transcripts/): scripted rounds
in, the exact wire of every request and the appended messages out, compared byte for byte."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

from jxai_app.core.agent import AgentPolicy, RoundEndEvent
from jxai_app.core.repair import SEAL_CUT_OFF, SEAL_RELOADED, is_empty_assistant
from jxai_app.core.tools import ToolContext
from tests.core.agent.scripted import FakeTools, ScriptedClient, play, step_from_json

CORPUS = Path(__file__).resolve().parents[2] / "data" / "transcripts"
FIXTURES = sorted(CORPUS.glob("*.json"))


def _wire(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _fake_tools(spec: Mapping[str, Mapping[str, Any]]) -> FakeTools:
    """``{"name": {"results": [...], "sleep": s, "stop": bool}}``: results in call order (the last repeats)."""
    def make(behaviour: Mapping[str, Any]) -> Callable[[dict[str, Any], ToolContext], Any]:
        results = list(behaviour["results"])

        async def run(args: dict[str, Any], ctx: ToolContext) -> Any:
            if behaviour.get("sleep"):
                await asyncio.sleep(float(behaviour["sleep"]))
            if behaviour.get("stop"):
                assert ctx.signal is not None
                ctx.signal.set()
            return results.pop(0) if len(results) > 1 else results[0]
        return run
    return FakeTools({name: make(b) for name, b in spec.items()})


async def _replay(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    """Run every turn; returns per turn {"turn", "requests", "appended", "end"}."""
    tools = _fake_tools(fixture.get("tools", {})) if fixture.get("tools") else None
    policy = AgentPolicy(**fixture.get("policy", {}))
    history: list[dict[str, Any]] = json.loads(json.dumps(fixture["history"]))
    played = []
    for turn in fixture["turns"]:
        if turn.get("retry"):
            last_user = max(i for i, m in enumerate(history) if m.get("role") == "user")
            history = history[:last_user + 1]
        else:
            history.append({"role": "user", "content": turn["user"]})
        client = ScriptedClient([[step_from_json(e) for e in r] for r in turn["rounds"]])
        executed_before = len(tools.executed) if tools else 0
        result = await play(client, tools, history=history, policy=policy, signal=asyncio.Event())
        played.append({"turn": turn, "requests": [r["messages"] for r in client.requests],
                       "appended": list(result.end.appended), "end": result.end, "result": result,
                       "executed": [[n, a] for n, a, _ in (tools.executed[executed_before:] if tools else [])]})
        history = history + list(result.end.appended)
    return played


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
async def test_transcript_fixture(path: Path) -> None:
    fixture = json.loads(path.read_text(encoding="utf-8"))
    assert fixture["name"] == path.stem
    for n, run in enumerate(await _replay(fixture)):
        expect = run["turn"]["expect"]
        where = f"{path.stem} turn {n + 1}"
        assert run["end"].outcome == expect["outcome"], where
        if "message" in expect:
            assert run["end"].message == expect["message"], where
        assert _wire(run["appended"]) == _wire(expect["appended"]), where
        assert len(run["requests"]) == len(expect["requests"]), where
        for got, want in zip(run["requests"], expect["requests"]):
            assert _wire(got) == _wire(want), where
        if "executed" in expect:
            assert run["executed"] == expect["executed"], where
        if "usage" in expect:
            assert run["end"].usage.to_dict() == expect["usage"], where
        if "stop_reasons" in expect:
            assert [e.stop_reason for e in run["result"].of(RoundEndEvent)] == expect["stop_reasons"], where
        assert run["result"].events[-1] is run["end"]


# -- the corpus claims every required shape, and each claim holds ----------------------------
def _messages(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    out = list(fixture["history"])
    for turn in fixture["turns"]:
        out += turn["expect"]["appended"]
    return out


def _sent(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for turn in fixture["turns"] for req in turn["expect"]["requests"] for m in req]


def _outcomes(fixture: dict[str, Any]) -> list[str]:
    return [t["expect"]["outcome"] for t in fixture["turns"]]


def _calls_per_round(fixture: dict[str, Any]) -> list[int]:
    return [sum(e["type"] == "tool_call_start" for e in r) for t in fixture["turns"] for r in t["rounds"]]


def _seals(fixture: dict[str, Any], sentence: str) -> bool:
    return any(m["role"] == "tool" and json.loads(m["content"]) == {"success": False, "error": sentence}
               for m in _sent(fixture))


def _all_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for m in messages if isinstance(m.get("tool_calls"), list) for c in m["tool_calls"]]


SHAPES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "stream-error-partial-kept": lambda f: "error" in _outcomes(f) and _seals(f, SEAL_CUT_OFF),
    "cancelled-mid-stream": lambda f: any(t["expect"]["outcome"] == "cancelled" and t["expect"]["appended"] == []
                                          for t in f["turns"]),
    "retried-turn": lambda f: any(t.get("retry") for t in f["turns"]),
    "plain-exchange": lambda f: all(set(m) == {"role", "content"} for m in _sent(f)),
    "placeholder-dropped": lambda f: any(is_empty_assistant(m) for m in f["history"])
    and not any(is_empty_assistant(m) for m in _sent(f)),
    "reasoning-replayed": lambda f: any("reasoning_content" in m for m in _sent(f)),
    "reasoning-only-dropped": lambda f: any(is_empty_assistant(m) and m.get("reasoning_content")
                                            for m in _messages(f))
    and not any(is_empty_assistant(m) for m in _sent(f)),
    "single-tool-call": lambda f: 1 in _calls_per_round(f),
    "parallel-tool-calls": lambda f: max(_calls_per_round(f) + [0]) >= 2,
    "tool-result-message": lambda f: any(m["role"] == "tool" for m in _sent(f)),
    "tool-record-result-null": lambda f: any("result" in c and c["result"] is None for c in _all_calls(f["history"]))
    and not any("result" in c for c in _all_calls(_sent(f))),
    "tool-record-result-set": lambda f: any(c.get("result") for c in _all_calls(f["history"]))
    and not any("result" in c for c in _all_calls(_sent(f))),
    "content-null-with-tool-calls": lambda f: any(m.get("tool_calls") and m["content"] is None for m in _sent(f)),
    "text-and-tool-calls": lambda f: any(m.get("tool_calls") and m["content"] for m in _sent(f)),
    "ask-user-round": lambda f: sum(c["function"]["name"] == "ask_user" for c in _all_calls(_messages(f))) >= 2
    and not any(m["role"] == "user" and "answer" in str(m["content"]) for m in _sent(f)),
    "sealed-orphan": lambda f: _seals(f, SEAL_RELOADED),
    "usage-recorded": lambda f: any("usage" in t["expect"] for t in f["turns"])
    and "usage" not in json.dumps(_sent(f)) and "Tokens" not in json.dumps(_messages(f)),
    "length-cutoff-text": lambda f: any(r[-1] == {"type": "done", "stopReason": "length"}
                                        and not any(e["type"] == "tool_call_start" for e in r)
                                        for t in f["turns"] for r in t["rounds"]),
    "length-cutoff-tool-call": lambda f: any(r[-1] == {"type": "done", "stopReason": "length"}
                                             and any(e["type"] == "tool_call_start" for e in r)
                                             for t in f["turns"] for r in t["rounds"]),
    "round-cap-tail": lambda f: "cap_partial" in _outcomes(f),
    "system-role": lambda f: any(m["role"] == "system" for m in _sent(f)),
    "foreign-fields-ignored": lambda f: any(set(m) - {"role", "content", "reasoning_content", "tool_calls",
                                                      "tool_call_id"} for m in f["history"]) or
    any("result" in c for c in _all_calls(f["history"])),
}


def test_the_corpus_claims_every_required_shape_and_each_claim_holds() -> None:
    claimed: set[str] = set()
    for path in FIXTURES:
        fixture = json.loads(path.read_text(encoding="utf-8"))
        for shape in fixture["shapes"]:
            assert shape in SHAPES, f"{path.stem}: unknown shape {shape}"
            assert SHAPES[shape](fixture), f"{path.stem} claims {shape} but does not show it"
            claimed.add(shape)
    assert claimed == set(SHAPES)
    assert len(FIXTURES) >= 17
