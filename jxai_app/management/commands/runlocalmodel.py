"""``manage.py runlocalmodel``: serve the embedded Gemma 3 270M on 127.0.0.1 until Ctrl-C.

A thin wrapper over :mod:`jxai_app.ops.localmodel` (README "The embedded local model"): assemble and verify the GGUF,
start ``python -m llama_cpp.server`` as a child, wait until ``GET /v1/models`` answers, and stop
the child on SIGINT/SIGTERM. Point the app at it with ``JXAI_LOCAL_MODEL_URL`` (the default,
``http://127.0.0.1:8081/v1``, matches the default port).
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jxai_app.ops import localmodel


class Command(BaseCommand):
    help = "Start the embedded local model (llama-cpp-python's OpenAI-compatible server) until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=localmodel.DEFAULT_HOST,
                            help="address to bind (default 127.0.0.1; the server has no authentication)")
        parser.add_argument("--port", type=int,
                            default=int(os.environ.get("JXAI_LOCAL_MODEL_PORT") or localmodel.DEFAULT_PORT),
                            help="TCP port (default $JXAI_LOCAL_MODEL_PORT or 8081)")
        parser.add_argument("--chat-format", default=None,
                            help=f"the model's own (default; '{localmodel.DIALOGUE_FORMAT}' for Gemma), a "
                                 "tokenizer-config JSON path or a llama-cpp-python chat format name")
        parser.add_argument("--n-ctx", type=int, default=localmodel.DEFAULT_N_CTX, help="context window in tokens")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the server to answer")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            chosen = localmodel.local_model()  # JXAI_LOCAL_MODEL_NAME
            path = localmodel.ensure_model(model=chosen)
            server = localmodel.LocalModelServer(
                path, host=options["host"], port=options["port"], alias=chosen.name,
                chat_format=options["chat_format"] or chosen.chat_format, n_ctx=options["n_ctx"],
            )
            self.stdout.write(f"Starting: {localmodel.format_command(server.command)}")
            server.start(timeout=options["timeout"])
        except localmodel.LocalModelError as exc:
            raise CommandError(str(exc)) from exc
        assert server.process is not None and server.load_seconds is not None
        self.stdout.write(self.style.SUCCESS(
            f"Local model {chosen.name} ready at {server.url} "
            f"(answered after {server.load_seconds:.1f} s). Ctrl-C stops it."))
        code = localmodel.supervise([("the local model server", server.process)], say=self.stdout.write)
        if code:
            raise CommandError(f"the local model server {localmodel.how_it_ended(server.process.returncode)}")
