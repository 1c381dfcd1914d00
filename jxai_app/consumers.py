"""The chat websocket ``ws/chat/`` (protocol: docs/websocket.md).

Thin: it authenticates, checks each client frame's shape, and hands the request to the
socket's :class:`~jxai_app.turns.session.Session`, which runs it in its own task (so a
``cancel`` is read while a turn streams) and sends every frame in order. The rules live in
:mod:`jxai_app.turns` and :mod:`jxai_app.store`.

- Anonymous connections are accepted and closed at once with code **4401**. A foreign
  ``Origin`` is refused at the handshake by ``SameOriginValidator`` (``project/asgi.py``).
- A user who already holds ``JXAI_MAX_SOCKETS_PER_USER`` sockets on this worker gets one
  ``error`` frame (``rate-limited``) and the close code **4429** (docs/websocket.md "Limits").
- An open socket re-checks its login every ``JXAI_WS_SESSION_CHECK_SECONDS`` (default 30):
  when the session was logged out or flushed, or the user was deactivated or deleted, it
  closes with **4401** (docs/security.md, threat 10).
- Every malformed frame — not JSON, not an object, binary, over
  ``JXAI_WS_MAX_FRAME_BYTES``, unknown ``type``, a member of the wrong type, text over
  ``JXAI_MAX_MESSAGE_CHARS`` — gets an ``error`` frame with a problem (``invalid-request``
  or ``payload-too-large``); an unknown or foreign conversation id is ``not-found``, alike.
  The socket stays open and nothing saved changes.
- What the socket sends is sized by the session (:mod:`jxai_app.turns.framing`): no message
  over ``MAX_FRAME_BYTES``; a frame that cannot be sent becomes an ``error`` frame and a
  fresh snapshot, or closes the socket with 4500. A client that stops reading may leave at
  most ``JXAI_WS_MAX_UNSENT_BYTES`` sent and not taken (:mod:`jxai_app.web.wsbuffer`); past
  that the socket is closed with 4500 too. Expensive requests are rate-limited per socket
  by the session (docs/websocket.md "Limits").
- Once the socket closed it sends nothing more and leaves no task of its own behind; a
  running turn goes on and saves on its own (``JXAI_CANCEL_ON_DISCONNECT`` to stop it when
  its last tab closes).
- The consumer never touches the channel layer itself (the worker's delivery does,
  :mod:`jxai_app.turns.delivery`): a socket connects and works with its own worker's turns
  while the layer is down.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from jxai_app.db import db_call
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from jxai_app import conf
from jxai_app.core.errors import ProblemError
from jxai_app.core.problems import problem
from jxai_app.core.unicode import is_clean
from jxai_app.turns.hub import TurnHub
from jxai_app.turns.worker import get_hub
from jxai_app.turns.session import UNSENDABLE_CLOSE_CODE, Session, SocketGone, error_frame
from jxai_app.web.login import still_signed_in
from jxai_app.web.wsbuffer import SendBuffer, attach

__all__ = ["ChatConsumer", "TOO_MANY_SOCKETS_CLOSE_CODE", "UNAUTHENTICATED_CLOSE_CODE"]

logger = logging.getLogger("jxai_app.consumers")

try:
    from autobahn.exception import Disconnected as _AutobahnDisconnected  # daphne's websocket library
except ImportError:  # pragma: no cover - another ASGI server
    _AutobahnDisconnected = OSError  # type: ignore[assignment,misc]
PEER_GONE = (OSError, _AutobahnDisconnected)
"""What a send on a socket the client closed raises (the ASGI spec asks servers for an
``OSError``; daphne raises autobahn's ``Disconnected``)."""

UNAUTHENTICATED_CLOSE_CODE = 4401
"""Close code for a socket without a logged-in user (4000–4999 are the application's)."""
TOO_MANY_SOCKETS_CLOSE_CODE = 4429
"""Close code for a socket over ``JXAI_MAX_SOCKETS_PER_USER`` (docs/websocket.md "Limits")."""



_STR, _OPT_STR, _INT, _ID = "string", "string or null", "non-negative integer", "message id (positive integer)"
_BOOL = "boolean"
_IDS = "list of attachment ids (strings)"

Handler = Callable[[Session, dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Request:
    """One client frame type: its members (member → (kind, required)) and its handler."""

    members: dict[str, tuple[str, bool]]
    handle: Handler
    at_once: bool = False
    """Handled as it arrives, not after the session's queued requests (``cancel``: Stop must
    not wait behind a snapshot)."""


def _model(frame: dict[str, Any]) -> str | None:
    return frame.get("model") or None


REQUESTS: dict[str, Request] = {  # docs/websocket.md "Client → server"
    "send": Request({"conversationId": (_OPT_STR, False), "text": (_STR, True), "model": (_OPT_STR, False),
                     "temporary": (_BOOL, False), "attachments": (_IDS, False)},
                    lambda s, f: s.send_message(f.get("conversationId"), f["text"], _model(f),
                                                temporary=f.get("temporary", False),
                                                attachments=f.get("attachments"))),
    "cancel": Request({"conversationId": (_STR, True)}, lambda s, f: s.cancel(f["conversationId"]), at_once=True),
    "subscribe": Request({"conversationId": (_STR, True)}, lambda s, f: s.subscribe(f["conversationId"])),
    "resync": Request({"conversationId": (_STR, True), "turnId": (_STR, True), "afterSeq": (_INT, True)},
                      lambda s, f: s.resync(f["conversationId"], f["turnId"], f["afterSeq"])),
    "retry": Request({"conversationId": (_STR, True)}, lambda s, f: s.retry(f["conversationId"])),
    "rename": Request({"conversationId": (_STR, True), "title": (_STR, True)},
                      lambda s, f: s.rename(f["conversationId"], f["title"])),
    "delete": Request({"conversationId": (_STR, True)}, lambda s, f: s.delete(f["conversationId"])),
    "list": Request({"before": (_OPT_STR, False)}, lambda s, f: s.list(f.get("before"))),
    "approve": Request({"conversationId": (_STR, True), "callId": (_STR, True), "reason": (_OPT_STR, False)},
                       lambda s, f: s.decide(f["conversationId"], f["callId"], True, f.get("reason") or "")),
    "deny": Request({"conversationId": (_STR, True), "callId": (_STR, True), "reason": (_OPT_STR, False)},
                    lambda s, f: s.decide(f["conversationId"], f["callId"], False, f.get("reason") or "")),
    # docs/websocket.md "Search, feedback and custom instructions"
    "search": Request({"query": (_STR, True)}, lambda s, f: s.search(f["query"])),
    "feedback": Request({"messageId": (_INT, True), "rating": (_OPT_STR, True), "comment": (_STR, False)},
                        lambda s, f: s.feedback(f["messageId"], f["rating"], f.get("comment", ""))),
    "instructions": Request({"text": (_STR, False)}, lambda s, f: s.instructions(f.get("text"))),
    # docs/websocket.md "Branches"
    "edit": Request({"conversationId": (_STR, True), "messageId": (_ID, True), "text": (_STR, True),
                     "model": (_OPT_STR, False), "attachments": (_IDS, False)},
                    lambda s, f: s.edit(f["conversationId"], f["messageId"], f["text"], _model(f),
                                        f.get("attachments"))),
    "regenerate": Request({"conversationId": (_STR, True), "messageId": (_ID, True), "model": (_OPT_STR, False)},
                          lambda s, f: s.regenerate(f["conversationId"], f["messageId"], _model(f))),
    "switch_branch": Request({"conversationId": (_STR, True), "messageId": (_ID, True)},
                             lambda s, f: s.switch_branch(f["conversationId"], f["messageId"])),
}
"""Every client frame type (docs/websocket.md): the one table the consumer checks frames
against and dispatches them by."""


def _unicode(value: str) -> bool:
    """False for text with a NUL or a lone surrogate (``"\\ud800"`` is valid JSON but no
    UTF-8 can carry it; PostgreSQL stores no NUL): nothing could save it as sent."""
    return is_clean(value)


def _fits(kind: str, value: Any) -> bool:
    if kind == _STR:
        return isinstance(value, str) and _unicode(value)
    if kind == _OPT_STR:
        return value is None or (isinstance(value, str) and _unicode(value))
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _IDS:  # docs/attachments.md "Sending"
        return isinstance(value, list) and len(value) <= 100 and all(
            isinstance(item, str) and len(item) <= 64 for item in value)
    floor = 1 if kind == _ID else 0
    return isinstance(value, int) and not isinstance(value, bool) and value >= floor


def _invalid(detail: str) -> ProblemError:
    return ProblemError(problem("invalid-request", detail))


def parse_frame(text: str | None, data: bytes | None, *, max_bytes: int) -> dict[str, Any]:
    """Check one client frame and return it as a dict.

    Raises:
        ProblemError: ``payload-too-large`` over ``max_bytes`` (UTF-8); ``invalid-request``
            for binary frames, broken JSON (nesting too deep for the parser included), a
            non-object, an unknown ``type`` or a member of the wrong type (the detail names
            it; a string with a lone surrogate is of the wrong type).
    """
    if text is None:
        raise _invalid("Frames must be text (JSON), not binary.")
    if len(text) > max_bytes or len(text.encode("utf-8")) > max_bytes:
        raise ProblemError(problem("payload-too-large", f"A frame may be at most {max_bytes} bytes."))
    try:
        frame = json.loads(text)
    except (ValueError, RecursionError):
        raise _invalid("The frame is not valid JSON.") from None
    if not isinstance(frame, dict):
        raise _invalid("A frame must be a JSON object with a type.")
    kind = frame.get("type")
    if not isinstance(kind, str) or kind not in REQUESTS:
        known = ", ".join(REQUESTS)
        raise _invalid(f"Unknown frame type {kind!r}; expected one of {known}.")
    for member, (expected, required) in REQUESTS[kind].members.items():
        if member not in frame:
            if required:
                raise _invalid(f"'{kind}' needs '{member}' ({expected}).")
            continue
        if not _fits(expected, frame[member]):
            raise _invalid(f"'{kind}': '{member}' must be a {expected} (valid Unicode, no NUL).")
    return frame


class ChatConsumer(AsyncJsonWebsocketConsumer):
    """``ws/chat/``: one socket of a logged-in user (see the module docstring)."""

    session: Session | None = None
    _watch: asyncio.Task[None] | None = None
    _gone: asyncio.Event | None = None
    _buffer: SendBuffer | None = None

    channel_layer_alias = "jxai.consumer-uses-no-layer"
    """Not a configured alias: Channels gives the consumer no layer channel of its own (a
    socket must connect while the layer is down); the worker's delivery reaches every worker."""

    def get_hub(self) -> TurnHub:
        """The worker's hub (tests override this to play a second worker)."""
        return get_hub()

    async def connect(self) -> None:
        """Accept a logged-in user's socket (an anonymous one is closed with 4401, one over
        ``JXAI_MAX_SOCKETS_PER_USER`` with 4429), start its session and the periodic login
        re-check (``JXAI_WS_SESSION_CHECK_SECONDS``)."""
        user = self.scope.get("user")
        await self.accept()
        if user is None or not getattr(user, "is_authenticated", False):
            await self.close(code=UNAUTHENTICATED_CLOSE_CODE)
            return
        self.hub = self.get_hub()
        await self.hub.ensure_started()
        cap = conf.get_limits().max_sockets_per_user
        if cap and self.hub.delivery.user_socket_count(user.pk) >= cap:  # no await from here to start()
            logger.info("websocket: user %s already holds %d sockets here; refusing another", user.pk, cap)
            detail = (f"You have {cap} chat connections open to this server, the most allowed; "
                      "close another tab or window and reload this one.")
            await self.send(text_data=json.dumps(error_frame(problem("rate-limited", detail))))
            await self.close(code=TOO_MANY_SOCKETS_CLOSE_CODE)
            return
        self.user = user
        self._gone = asyncio.Event()
        self._buffer = attach(self.base_send)
        self.session = Session(hub=self.hub, user=user, send=self._send_frame, close=self._close_for_drain,
                               writable=None if self._buffer is None else self._buffer.writable)
        self.session.start()
        session_key = getattr(self.scope.get("session"), "session_key", None)
        self._watch = asyncio.ensure_future(self._watch_login(user.pk, session_key))

    async def _watch_login(self, user_pk: Any, session_key: str | None) -> None:
        """Close with 4401 once the login is gone (module docstring); a failing check (the
        database briefly unreachable) is logged and tried again next time."""
        while True:
            await asyncio.sleep(conf.ws_session_check_seconds())
            try:
                valid = await db_call(still_signed_in, user_pk, session_key)
            except Exception:
                logger.exception("websocket: could not re-check the login of user %s", user_pk)
                continue
            if not valid:
                logger.info("websocket: user %s logged out or deactivated; closing", user_pk)
                await self._release()
                await self.close(code=UNAUTHENTICATED_CLOSE_CODE)
                return

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Run the consumer; whatever ends it (a normal close, or the server cancelling an
        application that did not stop in time), the session is released."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.session is not None:
                await asyncio.shield(self._release())

    async def disconnect(self, code: int) -> None:
        """The socket closed: release the session (a running turn goes on unless
        ``JXAI_CANCEL_ON_DISCONNECT``)."""
        if self._gone is not None:
            self._gone.set()
        await self._release()

    async def _release(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
        session, self.session = self.session, None
        if session is not None:
            await session.close()

    async def _send_frame(self, text: str) -> None:
        """Send one text message.

        Raises:
            SocketGone: the client already closed (the server refuses the send: daphne's
                websocket library raises ``Disconnected``, ASGI servers an ``OSError``), or
                this send took its unsent bytes past ``JXAI_WS_MAX_UNSENT_BYTES`` and the
                socket was closed with 4500.
        """
        if self.session is not None:
            try:
                await self.send(text_data=text)
            except PEER_GONE as exc:
                raise SocketGone() from exc
            if self._buffer is not None:
                self._buffer.wrote(len(text.encode("utf-8")))
            limit = conf.get_limits().ws_max_unsent_bytes
            if self._buffer is not None and limit and self._buffer.unsent > limit:
                logger.info("websocket: user %s has not taken %d bytes sent (JXAI_WS_MAX_UNSENT_BYTES); "
                            "closing with %d", self.user.pk, self._buffer.unsent, UNSENDABLE_CLOSE_CODE)
                await self.close(code=UNSENDABLE_CLOSE_CODE)
                raise SocketGone()

    async def _close_for_drain(self, code: int) -> None:
        """Close with ``code`` and wait (up to 2 s) for the client's answer, so the close
        handshake ends before the worker stops (else the client sees 1006)."""
        await self.close(code=code)
        try:
            if self._gone is not None:
                await asyncio.wait_for(self._gone.wait(), 2.0)
        except asyncio.TimeoutError:
            logger.info("websocket: no close answer within 2 s")

    # ------------------------------------------------------------------ client → server
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """One client frame (docs/websocket.md): ``cancel`` at once, every other request in
        the session's order; a malformed frame gets an ``error`` frame and the socket stays."""
        session = self.session
        if session is None:
            return
        try:
            frame = parse_frame(text_data, bytes_data, max_bytes=conf.get_limits().ws_max_frame_bytes)
        except ProblemError as exc:
            session.refuse(exc.problem)
            return
        kind = frame["type"]
        request = REQUESTS[kind]
        if request.at_once:
            await session.run_now(kind, frame.get("conversationId"), lambda: request.handle(session, frame))
        else:
            session.submit(kind, frame.get("conversationId"), lambda: request.handle(session, frame))


__all__ += ["error_frame", "parse_frame"]
