"""A real HTTP/1.1 server on 127.0.0.1 that plays an LLM provider in tests.

It runs in a background thread, so sync tests, async tests and subprocesses (the CLI) can
all talk to it over a real TCP socket. Each incoming request is recorded and answered by a
:class:`Script`: a status, headers, and a list of writes (bytes, each with an optional delay
before it), sent with chunked transfer encoding or a ``Content-Length``. A script can keep
the response open after its body (``hold``), stop writing part-way and keep the connection
open (``stall_after``), or drop the connection mid-body (``close_abruptly``); a :class:`Write`
with a ``gate`` (a ``threading.Event``) waits until the test sets it, e.g. to hold an answer's
last chunk while the test plays a fault.

Typical use::

    from tests.support.fake_provider import FakeProvider, Script, openai_text_stream

    with FakeProvider() as fake:
        fake.add(Script(writes=openai_text_stream(["Hel", "lo"])))
        client = OpenAIChatClient(base_url=fake.url, model="m")
        ...                                   # fake.requests[0].json is the body sent

Scripts are consumed one per request, in order (:meth:`FakeProvider.add`). For multi-round
conversations pass ``handler=`` instead: a callable ``handler(request) -> Script`` that sees
every request (its :class:`Request` with path, headers and parsed JSON) and decides the
answer, e.g. "round 1: a tool call; round 2: the answer". When neither a queued script nor
a handler is available the server answers 500 with a plain-text explanation. Each
:class:`Request` carries ``received_at`` (``time.monotonic()``), comparable with the clients'
times in other processes of the machine.

``fake.closed_by_client`` (a :class:`threading.Event`) is set when the client closes the
connection while the server still had a response open (held, stalled, or mid-write);
``fake.wait_closed(timeout)`` waits for it. ``fake.url`` is ``http://127.0.0.1:PORT/v1``;
``fake.base`` is the same without ``/v1``.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "FakeProvider",
    "Request",
    "Script",
    "Write",
    "sse",
    "sse_json",
    "openai_chunk",
    "openai_text_stream",
    "openai_tool_call_stream",
    "anthropic_text_stream",
    "responses_event",
    "responses_text_stream",
    "responses_function_call_stream",
    "proxy_stream",
    "json_response",
]


@dataclass(frozen=True)
class Write:
    """One write of the response body: wait ``delay`` seconds, then (when ``gate`` is set)
    until ``gate`` is set by the test, then send ``data``. A gate lets a test hold a chunk,
    e.g. the last one of an answer, until it has played a fault."""

    data: bytes
    delay: float = 0.0
    gate: threading.Event | None = field(default=None, compare=False)


@dataclass
class Script:
    """How the fake answers one request.

    Attributes:
        status: HTTP status code.
        content_type: ``Content-Type`` header value; ``None`` sends no such header.
        headers: extra response headers.
        writes: body pieces, ``bytes`` or :class:`Write` (``bytes`` means no delay).
        delay: default pause in seconds before each write that is plain ``bytes``.
        chunked: ``True`` for ``Transfer-Encoding: chunked``; ``False`` for a
            ``Content-Length`` covering every write.
        headers_delay: seconds to wait before sending the status line (first-byte tests).
        hold: after the last write, keep the response open (no terminating chunk) until the
            client closes the connection or the server stops.
        stall_after: send only the first N writes, then keep the connection open like ``hold``.
        close_abruptly: after the writes, reset the TCP connection (RST) without finishing
            the body.
        content_length: with ``chunked=False``, announce this length instead of the real one
            (announce more than is sent to play a body cut short by a clean close).
        keep_alive: keep the connection open for the client's next request after a complete
            response, as real providers do (default: ``Connection: close``).
    """

    status: int = 200
    content_type: str | None = "text/event-stream"
    headers: Mapping[str, str] = field(default_factory=dict)
    writes: Sequence[bytes | Write] = ()
    delay: float = 0.0
    chunked: bool = True
    headers_delay: float = 0.0
    hold: bool = False
    stall_after: int | None = None
    close_abruptly: bool = False
    content_length: int | None = None
    keep_alive: bool = False


@dataclass
class Request:
    """A request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes
    json: Any
    """The body parsed as JSON, or ``None`` when it is not JSON."""
    received_at: float = 0.0
    """``time.monotonic()`` when the request (head and body) had been read: one clock for
    every process of the machine, so a benchmark can compare it with its clients' times."""


Handler = Callable[[Request], Script]


class _Server(ThreadingHTTPServer):
    """socketserver listens with a backlog of 5: a burst of requests would see SYNs dropped
    (and retried a second later); real providers take bursts."""

    request_queue_size = 1024


class FakeProvider:
    """A loopback HTTP/1.1 server answering with scripted responses (see module docstring).

    Args:
        scripts: responses to queue, one per request, in order.
        handler: ``handler(request) -> Script`` used when the queue is empty.
    """

    def __init__(self, scripts: Iterable[Script] = (), *, handler: Handler | None = None) -> None:
        self.requests: list[Request] = []
        self.closed_by_client = threading.Event()
        self.request_received = threading.Event()
        self.handler = handler
        self._queue: deque[Script] = deque(scripts)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-provider", daemon=True)
        self.port: int = self._server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self.base + "/v1"

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> "FakeProvider":
        """Start serving in a background thread (``with`` does this for you)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release held responses, stop serving and close the listening socket."""
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "FakeProvider":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting ---------------------------------------------------------------------
    def add(self, *scripts: Script) -> "FakeProvider":
        """Queue responses, one per future request."""
        with self._lock:
            self._queue.extend(scripts)
        return self

    def wait_closed(self, timeout: float = 2.0) -> bool:
        """Wait until the client closed a held/stalled/in-progress response; True if it did."""
        return self.closed_by_client.wait(timeout)

    def _next_script(self, request: Request) -> Script:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.handler is not None:
            return self.handler(request)
        return Script(status=500, content_type="text/plain",
                      writes=[b"fake provider: no script queued for this request"], chunked=False)

    # -- the HTTP side -----------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    parsed = json.loads(raw) if raw else None
                except ValueError:
                    parsed = None
                request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                  raw, parsed, time.monotonic())
                with outer._lock:
                    outer.requests.append(request)
                outer.request_received.set()
                script = outer._next_script(request)
                self.close_connection = True
                try:
                    outer._play(self, script)
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    outer.closed_by_client.set()
                    return
                simple = not (script.hold or script.stall_after is not None or script.close_abruptly)
                self.close_connection = not (script.keep_alive and simple)

        return _Handler

    def _play(self, h: BaseHTTPRequestHandler, script: Script) -> None:
        sock: socket.socket = h.connection
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if script.headers_delay and self._sleep(script.headers_delay, sock):
            return
        writes = [w if isinstance(w, Write) else Write(w, script.delay) for w in script.writes]
        h.send_response(script.status)
        if script.content_type is not None:
            h.send_header("Content-Type", script.content_type)
        for key, value in script.headers.items():
            h.send_header(key, str(value))
        if script.chunked:
            h.send_header("Transfer-Encoding", "chunked")
        else:
            length = script.content_length
            h.send_header("Content-Length", str(sum(len(w.data) for w in writes) if length is None else length))
        if not script.keep_alive:
            h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.flush()
        limit = len(writes) if script.stall_after is None else min(script.stall_after, len(writes))
        for write in writes[:limit]:
            if write.delay and self._sleep(write.delay, sock):
                return
            if write.gate is not None and self._wait_gate(write.gate, sock):
                return
            if not write.data:
                continue
            h.wfile.write(b"%x\r\n%s\r\n" % (len(write.data), write.data) if script.chunked else write.data)
            h.wfile.flush()
        if script.close_abruptly:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            return
        if script.hold or script.stall_after is not None:
            self._hold(sock)
            return
        if script.chunked:
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()

    def _client_gone(self, sock: socket.socket, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the client to close; True when it did."""
        try:
            readable, _, _ = select.select([sock], [], [], timeout)
            if readable and not sock.recv(65536):
                self.closed_by_client.set()
                return True
        except OSError:
            self.closed_by_client.set()
            return True
        return False

    def _sleep(self, seconds: float, sock: socket.socket) -> bool:
        """Sleep, watching for a client close or server stop; True means give up."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._stop.is_set() or self._client_gone(sock, min(left, 0.02)):
                return True
        return False

    def _wait_gate(self, gate: threading.Event, sock: socket.socket) -> bool:
        """Wait until ``gate`` is set, watching for a client close or server stop; True means give up."""
        while not gate.is_set():
            if self._stop.is_set() or self._client_gone(sock, 0.02):
                return True
        return False

    def _hold(self, sock: socket.socket) -> None:
        while not self._stop.is_set():
            if self._client_gone(sock, 0.02):
                return


# -- body builders ---------------------------------------------------------------------
def sse(data: str, *, event: str | None = None) -> bytes:
    """One SSE event: optional ``event:`` line, one ``data:`` line, a blank line."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


def sse_json(obj: Any, *, event: str | None = None) -> bytes:
    """One SSE event whose data is ``obj`` as compact JSON."""
    return sse(json.dumps(obj, separators=(",", ":"), ensure_ascii=False), event=event)


def openai_chunk(delta: Mapping[str, Any] | None = None, finish: str | None = None, *,
                 usage: Mapping[str, Any] | None = None, choices: bool = True) -> bytes:
    """One OpenAI ``chat.completion.chunk`` SSE event (``choices: []`` when ``choices`` is False)."""
    body: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
                            "model": "fake-model",
                            "choices": [{"index": 0, "delta": dict(delta or {}), "finish_reason": finish}]
                            if choices else []}
    if usage is not None:
        body["usage"] = dict(usage)
    return sse_json(body)


def _openai_stream_end(finish: str | None, usage: Mapping[str, Any] | None, done: bool) -> list[bytes]:
    """The end of an OpenAI stream: the finish chunk (when ``finish`` is set), the usage chunk
    with empty ``choices`` (when ``usage`` is set), then ``[DONE]`` (when ``done``)."""
    out = [openai_chunk({}, finish)] if finish is not None else []
    if usage is not None:
        out.append(openai_chunk(usage=usage, choices=False))
    if done:
        out.append(b"data: [DONE]\n\n")
    return out


def openai_text_stream(parts: Sequence[str], finish: str | None = "stop", *,
                       usage: Mapping[str, Any] | None = None, done: bool = True) -> list[bytes]:
    """SSE events for a text answer: a role chunk, one chunk per part, the finish chunk,
    an optional usage chunk (empty ``choices``) and ``[DONE]``. One list item per event."""
    out = [openai_chunk({"role": "assistant", "content": ""})]
    out += [openai_chunk({"content": p}) for p in parts]
    return out + _openai_stream_end(finish, usage, done)


def openai_tool_call_stream(call_id: str, name: str, args_fragments: Sequence[str], *, index: int = 0,
                            finish: str | None = "tool_calls", usage: Mapping[str, Any] | None = None,
                            done: bool = True, text: Sequence[str] = ()) -> list[bytes]:
    """SSE events for one streamed tool call (optionally after some text): the opening
    fragment with id and name, one chunk per argument fragment, finish, usage, ``[DONE]``."""
    out = [openai_chunk({"role": "assistant", "content": None})]
    out += [openai_chunk({"content": t}) for t in text]
    out.append(openai_chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                              "function": {"name": name, "arguments": ""}}]}))
    out += [openai_chunk({"tool_calls": [{"index": index, "function": {"arguments": a}}]})
            for a in args_fragments]
    return out + _openai_stream_end(finish, usage, done)


def anthropic_text_stream(parts: Sequence[str], *, stop_reason: str = "end_turn",
                          input_tokens: int = 10, output_tokens: int = 5) -> list[bytes]:
    """Anthropic Messages API SSE events for a text answer, ending with ``message_stop``."""
    out = [sse_json({"type": "message_start", "message": {"id": "msg_fake", "type": "message",
                                                          "role": "assistant", "content": [],
                                                          "usage": {"input_tokens": input_tokens,
                                                                    "output_tokens": 1}}},
                    event="message_start"),
           sse_json({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                    event="content_block_start")]
    out += [sse_json({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
                     event="content_block_delta") for p in parts]
    out += [sse_json({"type": "content_block_stop", "index": 0}, event="content_block_stop"),
            sse_json({"type": "message_delta", "delta": {"stop_reason": stop_reason},
                      "usage": {"output_tokens": output_tokens}}, event="message_delta"),
            sse_json({"type": "message_stop"}, event="message_stop")]
    return out


def responses_event(kind: str, **members: Any) -> bytes:
    """One OpenAI Responses API stream event: ``event: <kind>`` and ``{"type": kind, …}``."""
    return sse_json({"type": kind, **members}, event=kind)


def _responses_end(usage: Mapping[str, Any] | None, output: Sequence[Mapping[str, Any]]) -> bytes:
    response = {"id": "resp_fake", "object": "response", "status": "completed", "model": "fake-model",
                "output": list(output), "usage": dict(usage) if usage is not None else None}
    return responses_event("response.completed", response=response)


def responses_text_stream(parts: Sequence[str], *, usage: Mapping[str, Any] | None = None) -> list[bytes]:
    """Responses API events for a text answer: ``response.created``, the message item, one
    ``response.output_text.delta`` per part, the item's end, ``response.completed``."""
    text = "".join(parts)
    item = {"id": "msg_fake", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    out = [responses_event("response.created", response={"id": "resp_fake", "status": "in_progress", "output": []}),
           responses_event("response.output_item.added", output_index=0,
                           item={**item, "status": "in_progress", "content": []})]
    out += [responses_event("response.output_text.delta", item_id="msg_fake", output_index=0, content_index=0, delta=p)
            for p in parts]
    out.append(responses_event("response.output_item.done", output_index=0, item=item))
    return out + [_responses_end(usage, [item])]


def responses_function_call_stream(call_id: str, name: str, args_fragments: Sequence[str], *,
                                   usage: Mapping[str, Any] | None = None) -> list[bytes]:
    """Responses API events for one function call: its item added, one
    ``response.function_call_arguments.delta`` per fragment, the item done, ``response.completed``."""
    item = {"id": "fc_" + call_id, "type": "function_call", "call_id": call_id, "name": name,
            "arguments": "".join(args_fragments), "status": "completed"}
    out = [responses_event("response.output_item.added", output_index=0,
                           item={**item, "arguments": "", "status": "in_progress"})]
    out += [responses_event("response.function_call_arguments.delta", item_id=item["id"], output_index=0, delta=a)
            for a in args_fragments]
    out.append(responses_event("response.output_item.done", output_index=0, item=item))
    return out + [_responses_end(usage, [item])]


def proxy_stream(events: Sequence[Mapping[str, Any]]) -> list[bytes]:
    """SSE events carrying normalised events (the proxy wire), one ``data:`` line each."""
    return [sse_json(e) for e in events]


def json_response(status: int, obj: Any, *, content_type: str = "application/json",
                  headers: Mapping[str, str] | None = None) -> Script:
    """A non-streamed JSON answer (an error body or a whole completion) with Content-Length."""
    return Script(status=status, content_type=content_type, headers=dict(headers or {}),
                  writes=[json.dumps(obj).encode()], chunked=False)
