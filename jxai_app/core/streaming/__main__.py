"""Command line: run one chat against a provider and print each event as a JSON line
(docs/streaming.md "The command line").

Usage::

    python -m jxai_app.core.streaming --provider openai --base-url http://127.0.0.1:8080/v1 \\
        --model my-model "What is the capital of Peru?"
    python -m jxai_app.core.streaming --provider anthropic --model claude-x --messages history.json
    python -m jxai_app.core.streaming --provider openai-responses --model gpt-5-mini --reasoning-effort low "hi"
    python -m jxai_app.core.streaming --provider proxy --chat-url https://host/ai/chat "hello"

Each event is printed in wire form (compact JSON, raw UTF-8) on stdout, one per line.
Exit status: 0 when the last event is ``done``, 1 when it is ``error``, 2 for bad arguments.
Ctrl-C sets the cancel signal, so the stream ends with ``done: cancelled``.

API keys default to ``OPENAI_API_KEY`` (openai, openai-responses) / ``ANTHROPIC_API_KEY`` /
``JXAI_API_KEY`` (proxy); base URLs to ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``; the model to
``JXAI_MODEL``. ``--provider openai-responses`` speaks OpenAI's Responses API (docs/providers.md
"OpenAI Responses API").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal as signals
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from jxai_app.core.streaming.anthropic import AnthropicChatClient
from jxai_app.core.streaming.events import ErrorEvent, encode_event
from jxai_app.core.streaming.openai import OpenAIChatClient
from jxai_app.core.streaming.proxy import ProxyChatClient
from jxai_app.core.streaming.responses import ResponsesChatClient

_KEY_ENV = {"openai": "OPENAI_API_KEY", "openai-responses": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY",
            "proxy": "JXAI_API_KEY"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse already exits 2; keep it explicit
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (documented in the module docstring)."""
    parser = _Parser(prog="python -m jxai_app.core.streaming",
                     description="Run one chat against a provider; print each normalised event as a JSON line.")
    parser.add_argument("--provider", choices=tuple(_KEY_ENV), default="openai")
    parser.add_argument("--base-url", help="API root (openai, openai-responses, anthropic), e.g. https://api.openai.com/v1")
    parser.add_argument("--chat-url", help="the proxy's chat endpoint (proxy)")
    parser.add_argument("--api-key", help="API key (default from the environment)")
    parser.add_argument("--model", help="the provider's model id (default $JXAI_MODEL)")
    parser.add_argument("--system", default="", help="system prompt (default empty)")
    parser.add_argument("--temperature", type=float, help="sampling temperature (sent only when given)")
    parser.add_argument("--max-tokens", type=int, help="output token limit")
    parser.add_argument("--reasoning-effort", help="reasoning effort, e.g. low (openai, openai-responses; sent only when given)")
    parser.add_argument("--messages", type=Path, help="JSON file: a list of messages in OpenAI shape")
    parser.add_argument("--tools", type=Path, help="JSON file: a list of OpenAI function tools")
    parser.add_argument("prompt", nargs="?", help="a user message appended to the history")
    return parser


def _load_list(parser: argparse.ArgumentParser, path: Path | None, what: str) -> list[Any]:
    if path is None:
        return []
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read {what} file {path}: {exc}")
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        parser.error(f"{what} file {path} must hold a JSON list of objects")
    return value


def build_client(parser: argparse.ArgumentParser, opts: argparse.Namespace, *, transport: Any = None) -> Any:
    """The client the parsed options describe (``parser.error`` → exit 2 when incomplete).

    ``transport`` (an ``httpx.AsyncBaseTransport``) is passed to the client; tests use it."""
    api_key = opts.api_key if opts.api_key is not None else os.environ.get(_KEY_ENV[opts.provider]) or None
    model = opts.model or os.environ.get("JXAI_MODEL") or None
    if opts.provider == "proxy":
        if not opts.chat_url:
            parser.error("--chat-url is required with --provider proxy")
        return ProxyChatClient(chat_url=opts.chat_url, model=model, api_key=api_key, api_base_url=opts.base_url,
                               transport=transport)
    if not model:
        parser.error("--model is required (or set JXAI_MODEL)")
    if opts.provider == "anthropic":
        base = opts.base_url or os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com/v1"
        return AnthropicChatClient(base_url=base, model=model, api_key=api_key, temperature=opts.temperature,
                                   transport=transport, **({"max_tokens": opts.max_tokens} if opts.max_tokens else {}))
    base = opts.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    kind = ResponsesChatClient if opts.provider == "openai-responses" else OpenAIChatClient
    return kind(base_url=base, model=model, api_key=api_key, temperature=opts.temperature,
                max_tokens=opts.max_tokens, reasoning_effort=opts.reasoning_effort, transport=transport)


async def _run(client: Any, messages: list[Any], tools: list[Any], system: str) -> int:

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signals.SIGINT, stop.set)
    except (NotImplementedError, RuntimeError):  # not on this platform / not the main thread
        pass
    last = None
    out = sys.stdout
    async for event in client.stream_chat(messages, tools, system, signal=stop):
        out.write(encode_event(event) + "\n")
        out.flush()
        last = event
    return 1 if last is None or isinstance(last, ErrorEvent) else 0


def conversation(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> tuple[list[Any], list[Any]]:
    """``(messages, tools)`` from ``--messages``/``--tools`` files and the prompt argument."""
    messages = _load_list(parser, opts.messages, "messages")
    tools = _load_list(parser, opts.tools, "tools")
    if opts.prompt is not None:
        messages.append({"role": "user", "content": opts.prompt})
    if not messages:
        parser.error("give a prompt or --messages")
    return messages, tools


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run the chat, print events; return the exit status (0, 1 or 2)."""
    parser = build_parser()
    opts = parser.parse_args(argv)
    messages, tools = conversation(parser, opts)
    client = build_client(parser, opts)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")
    return asyncio.run(_run(client, messages, tools, opts.system))


if __name__ == "__main__":
    sys.exit(main())
