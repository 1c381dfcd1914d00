"""Starting, stopping and retrying turns, and the conversation changes every tab must hear
about (docs/turns.md).

The websocket session (and any other caller) uses these; they hold the rules, the socket
only translates frames. Database work runs in the worker's database threads
(:func:`jxai_app.store.dbsync.db_thread_call`). Every function that takes a conversation id
checks that the user owns it and answers a missing, malformed or foreign id alike
(``not-found``).

A send's database work is one transaction (:func:`jxai_app.store.message_send`); the model
request goes out only after it committed, so a refused or failed send never contacts the
provider and no socket sees a turn that was not saved.
"""

from __future__ import annotations

import functools
import asyncio
import logging
import uuid
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Callable, Protocol

from django.db import transaction

from jxai_app import conf, mcp_tools, store
from jxai_app.core.errors import UnknownModelError
from jxai_app.core.problems import problem_error
from jxai_app.core.providers import ModelConfig
from jxai_app.core.streaming.events import ErrorEvent
from jxai_app.core.streaming.masking import MaskingClient
from jxai_app.core.streaming.retry import RetryingClient, RetryPolicy
from jxai_app.models import ConversationStatus
from jxai_app.ops import metrics
from jxai_app.policy import ratelimit, reservations, toolpolicy
from jxai_app.store.common import get_owned, parse_id
from jxai_app.store.dbsync import db_request, db_thread_call
from jxai_app.store.serializers import conversation_dict
from jxai_app.turns.delivery import Socket
from jxai_app.turns.hub import TurnHub, get_hub
from jxai_app.turns.recovery import snapshot_of
from jxai_app.turns.roundquota import RoundQuota
from jxai_app.turns.runner import TurnRunner, read_message

__all__ = [
    "Origin", "TurnInfo", "branch_switch", "cancel_turn", "client_factory", "conversation_remove",
    "conversation_retitle", "decide_approval", "expire_approvals", "regenerate_turn", "resume_turn", "retry_turn",
    "start_turn", "tool_view",
]

logger = logging.getLogger("jxai_app.turns")


class Origin(Socket, Protocol):
    """The socket that asked for a turn: it follows the conversation before the first event."""

    def adopt(self, conversation_id: uuid.UUID, turn_id: str) -> None:
        """Follow ``conversation_id`` from now on, expecting turn ``turn_id`` from seq 1."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnInfo:
    """A started turn."""

    conversation_id: uuid.UUID
    turn_id: str
    created: bool
    """True when the send created the conversation."""
    conversation: dict[str, Any]
    """The conversation (protocol dict, status ``streaming``)."""
    runner: TurnRunner


def tool_view(user: Any, model: ModelConfig, prior_calls: Mapping[str, int] | None = None) -> Any:
    """The tools one turn of ``user`` on ``model`` offers (tools act as the user; docs/security.md).

    Sync (reads ``ToolPolicy`` rows and the user's groups): call it in a thread. Built once
    per turn, since the view counts calls for the per-turn caps (``prior_calls``: those a
    resumed turn ran before it paused).
    """
    return toolpolicy.tool_view_for(user, conf.get_tool_registry(), model_supports_tools=model.supports_tools,
                                    prior_calls=prior_calls)


def _log_retry(alias: str) -> Callable[[int, ErrorEvent, float], None]:
    provider = conf.get_model_registry().resolve(alias).provider

    def on_retry(retry: int, error: ErrorEvent, delay: float) -> None:
        logger.info("model %s answered %s before any output; retry %d in %.2f s", alias, error.code, retry, delay)
        metrics.PROVIDER_RETRIES.labels(provider, str(error.code)).inc()

    return on_retry


def client_factory(alias: str, *, user: Any, turn_id: uuid.UUID, reserved: bool) -> Callable[[], Any]:
    """Builds model ``alias``'s streaming client for turn ``turn_id`` of ``user``, wrapped in a
    :class:`~jxai_app.core.streaming.retry.RetryingClient` (a 429/5xx before any output is
    retried with backoff up to ``JXAI_UPSTREAM_RETRIES`` times, never after output began), a
    :class:`~jxai_app.core.streaming.masking.MaskingClient` (the configured credentials
    masked in its text, across chunks: docs/security.md "Secret leakage in streamed text")
    and a :class:`~jxai_app.turns.roundquota.RoundQuota` (each request the send did not
    reserve reserves its tokens first: docs/security.md "Quota reservations"). ``reserved``:
    the send reserved the first request (``False`` for a turn resumed after an approval,
    whose reservation ended at the pause)."""
    policy = RetryPolicy(retries=conf.get_limits().upstream_retries)
    return lambda: RoundQuota(
        MaskingClient(RetryingClient(conf.build_client(alias), policy, on_retry=_log_retry(alias)),
                      conf.stream_secrets()), user=user, turn_id=turn_id, reserved=reserved)


def _model(alias: str | None, *, fallback: bool) -> ModelConfig:
    """The configured model ``alias`` (``None``: the default). An alias a conversation saved
    that is no longer configured falls back to the default when ``fallback``.

    Raises:
        ProblemError: ``invalid-request`` for an unknown alias the user asked for.
    """
    registry = conf.get_model_registry()
    try:
        return registry.resolve(alias)
    except UnknownModelError as exc:
        if fallback:
            return registry.resolve(None)
        raise problem_error("invalid-request", str(exc)) from None


Begin = Callable[..., store.TurnStart]
"""A store service that saves a turn's start: called with ``model`` (an alias or ``None``),
``admit``, ``lease`` and ``prompt_overhead`` (:func:`jxai_app.store.message_send`,
:func:`jxai_app.store.answer_regenerate`)."""


def _begin(user: Any, new_conversation: bool, alias: str | None, admit: bool, save: Begin,
           announce: bool) -> tuple[store.TurnStart, Any, ModelConfig, str, list[Any], dict[str, Any] | None]:
    """The send (one transaction; its quota reservation sized for the system prompt with the
    user's custom instructions, docs/store.md "Custom instructions"), then the turn's model,
    tool view, that system prompt, the MCP servers' configuration, and for a new branch the
    snapshot its followers get first."""
    prompt = store.system_prompt_for(user=user, base=conf.get_system_prompt())
    requested = _model(alias, fallback=False) if alias else None
    new_model = requested or (_model(None, fallback=False) if new_conversation else None)
    turn = save(model=None if new_model is None else new_model.alias, admit=admit, lease=conf.get_turn_timing().lease,
                prompt_overhead=store.estimate_tokens(prompt))
    model = requested or _model(turn.model, fallback=True)
    return (turn, tool_view(user, model), model, prompt, mcp_tools.server_configs(),
            _branch_snapshot(turn) if announce else None)


def _branch_snapshot(turn: store.TurnStart) -> dict[str, Any] | None:
    """The ``snapshot`` of a turn that starts a new branch, before its first event: the active
    path up to the turn's question, and the turn at seq 0 (docs/websocket.md "Branches")."""
    frame = snapshot_of(turn.conversation_id)
    if frame is None:
        return None
    ids = [m["id"] for m in frame["messages"]]
    frame["messages"] = frame["messages"][: ids.index(turn.user_message.pk) + 1]
    frame["turn"] = {"turnId": str(turn.turn_id), "lastSeq": 0, "items": []}
    return frame


def _check_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise problem_error("invalid-request", "The message is empty.")
    limit = conf.get_limits().max_message_chars
    if len(text) > limit:
        raise problem_error("payload-too-large", f"The message is longer than {limit} characters.")
    return text


async def start_turn(*, user: Any, conversation_id: uuid.UUID | str | None, text: str,
                     model_alias: str | None = None, origin: Origin | None = None, hub: TurnHub | None = None,
                     admit: bool = True, replaces: int | None = None, reservation: int | None = None) -> TurnInfo:
    """Save the user's message and start a turn in a task owned by this worker.

    Args:
        user: the requesting (authenticated) user.
        conversation_id: the conversation, or ``None`` to create one (owned by ``user``,
            with ``model_alias`` or the default model).
        text: the message (non-blank, at most ``JXAI_MAX_MESSAGE_CHARS`` characters).
        model_alias: switch the conversation to this configured model (``None``: keep it).
        origin: the asking socket; it follows the conversation before the first frame.
        hub: the worker's hub (default :func:`~jxai_app.turns.hub.get_hub`).
        admit: count the turn against the user's quota and rate limit (``False`` for a
            caller that admitted it in its own transaction).
        replaces: an edit: the user message this one replaces as a new branch
            (docs/store.md "Branches"); every follower first gets a ``snapshot`` of it.
        reservation: that caller's quota reservation, handed to the turn.

    Returns:
        The started turn. Its frames (``conversation``, ``message_saved`` of the user
        message, then ``events`` from seq 1) go to every follower, on every worker.

    Raises:
        ProblemError: ``invalid-request`` (blank text, unknown model, ``replaces`` not a user
            message), ``payload-too-large``, ``not-found`` (missing or foreign
            conversation or message), ``quota-exceeded`` / ``rate-limited`` (with
            ``retry_after``; nothing saved, the provider not contacted), ``conflict`` (a
            turn already runs in it, on any worker), ``service-unavailable`` (the worker is
            draining, or the database is down).
    """
    text = _check_text(text)
    save = functools.partial(store.message_send, user=user, conversation_id=conversation_id, text=text,
                             replaces=replaces, reservation=reservation)
    return await _launch(user, hub, origin, conversation_id is None, model_alias, admit, save,
                         announce=replaces is not None)


async def regenerate_turn(*, user: Any, conversation_id: uuid.UUID | str, message_id: int,
                          model_alias: str | None = None, origin: Origin | None = None,
                          hub: TurnHub | None = None) -> TurnInfo:
    """Answer the question of assistant message ``message_id`` again, as a new branch beside
    that answer, with ``model_alias`` (``None``: the conversation's model). Every follower
    first gets a ``snapshot`` of the new branch, then the turn's frames as for a send.

    Raises:
        ProblemError: as :func:`start_turn`; ``invalid-request`` when ``message_id`` is not
            an assistant message.
    """
    save = functools.partial(store.answer_regenerate, user=user, conversation_id=conversation_id,
                             message_id=message_id)
    return await _launch(user, hub, origin, False, model_alias, True, save, announce=True)


async def _launch(user: Any, hub: TurnHub | None, origin: Origin | None, new_conversation: bool,
                  model_alias: str | None, admit: bool, save: Begin, *, announce: bool) -> TurnInfo:
    hub = hub or get_hub()
    await hub.ensure_started()
    if hub.draining:
        raise problem_error("service-unavailable", "This server is shutting down; send again to reach another one.",
                            retry_after=1)
    turn, tools, model, prompt, mcp_servers, snapshot = await db_request(
        _begin, user, new_conversation, model_alias, admit, save, announce)
    if await mcp_tools.apply(mcp_servers):  # an MCP server started, closed or restarted (docs/mcp.md "Sessions")
        tools = await db_request(tool_view, user, model)
    return _start_runner(hub, user, turn, tools, model, prompt, origin, snapshot, reserved=True)


def _start_runner(hub: TurnHub, user: Any, turn: store.TurnStart, tools: Any, model: ModelConfig, prompt: str,
                  origin: Origin | None, snapshot: dict[str, Any] | None = None, *, reserved: bool) -> TurnInfo:
    """Build the turn's runner and start its task (a send's, a regenerate's, or a resumed one's;
    ``reserved``: the send reserved its first request, :func:`client_factory`)."""
    factory = client_factory(model.alias, user=user, turn_id=turn.turn_id, reserved=reserved)
    runner = TurnRunner(hub=hub, user=user, turn=turn, tools=tools, client_factory=factory,
                        system_prompt=prompt, policy=conf.get_agent_policy(),
                        context_window=model.context_window)
    if snapshot is not None:  # published before the turn's first frame, on the same path
        hub.notify(turn.conversation_id, snapshot)
    if origin is not None:  # before the task starts, so the socket misses nothing
        origin.adopt(turn.conversation_id, runner.turn_id)
    runner.start()
    return TurnInfo(conversation_id=turn.conversation_id, turn_id=runner.turn_id, created=turn.created,
                    conversation=conversation_dict(turn.conversation), runner=runner)


def _resume_parts(user: Any, turn: store.TurnStart) -> tuple[Any, ModelConfig, str, list[Any]]:
    model = _model(turn.model, fallback=True)
    prompt = store.system_prompt_for(user=user, base=conf.get_system_prompt())
    return tool_view(user, model, turn.prior_calls), model, prompt, mcp_tools.server_configs()


async def resume_turn(*, user: Any, turn: store.TurnStart, origin: Origin | None = None,
                      hub: TurnHub | None = None) -> TurnInfo:
    """Start the turn an approval decision resumed (docs/approval.md "Resuming") on this worker:
    its decided calls are answered first (approved ones run as ``user``), then the loop goes on
    from the saved history with a new lease. Not admitted again: it is the same turn; but its
    reservation ended at the pause, so its first model request reserves its tokens like any
    later round (docs/security.md "Quota reservations") and ends the turn ``quota-exceeded``
    when they no longer fit.

    Args:
        user: the conversation's owner (the tools act as them).
        turn: what :func:`jxai_app.store.approval_decide` or ``approvals_expire`` claimed.
    """
    hub = hub or get_hub()
    tools, model, prompt, mcp_servers = await db_request(_resume_parts, user, turn)
    if await mcp_tools.apply(mcp_servers):  # this worker may not have had the turn's MCP sessions yet
        tools = await db_request(tool_view, user, model, turn.prior_calls)
    logger.info("resuming conversation %s after approval as turn %s", turn.conversation_id, turn.turn_id)
    return _start_runner(hub, user, turn, tools, model, prompt, origin, reserved=False)


def _message_frame(conversation_id: uuid.UUID, message_id: int) -> dict[str, Any] | None:
    message = read_message(message_id)
    return None if message is None else {"type": "message_saved", "conversationId": str(conversation_id),
                                         "message": message}


def _decide(user: Any, conversation_id: Any, call_id: str, approved: bool,
            reason: str) -> tuple[store.Decided, dict[str, Any] | None]:
    decided = store.approval_decide(user=user, conversation_id=conversation_id, call_id=call_id, approved=approved,
                                    reason=reason, timeout=conf.approval_timeout())
    return decided, _message_frame(decided.conversation_id, decided.message_id)


async def decide_approval(*, user: Any, conversation_id: uuid.UUID | str, call_id: str, approved: bool,
                          reason: str = "", origin: Origin | None = None, hub: TurnHub | None = None
                          ) -> TurnInfo | None:
    """Approve or deny a waiting tool call (any tab, any worker; docs/approval.md "Deciding"):
    the decision is saved (the first one wins), every tab of the conversation gets the call's
    message again (``message_saved``: the card shows the decision), and when it was the
    round's last waiting call the turn resumes here (``origin`` follows it).

    Returns:
        The resumed turn, or ``None`` while other calls of the round still wait.

    Raises:
        ProblemError: ``not-found`` (a foreign or missing conversation or call), ``conflict``
            (decided already), ``service-unavailable`` (draining, or the database is down).
    """
    hub = hub or get_hub()
    await hub.ensure_started()
    if hub.draining:
        raise problem_error("service-unavailable", "This server is shutting down; answer again to reach another one.",
                            retry_after=1)
    decided, frame = await db_request(_decide, user, conversation_id, call_id, approved, reason)
    if frame is not None:
        hub.notify(decided.conversation_id, frame)
    if decided.resumed is None:
        return None
    return await resume_turn(user=user, turn=decided.resumed, origin=origin, hub=hub)


def _expire(timeout: float) -> list[tuple[store.Decided, Any, dict[str, Any] | None]]:
    return [(d, None if d.resumed is None else d.resumed.conversation.owner,
             _message_frame(d.conversation_id, d.message_id)) for d in store.approvals_expire(timeout=timeout)]


async def expire_approvals(hub: TurnHub) -> int:
    """Expire the calls that waited longer than ``JXAI_APPROVAL_TIMEOUT_SECONDS`` and resume
    their turns on this worker (every worker's lease watch calls it once a second; the
    conditional updates let one worker take each). Returns how many conversations changed.

    Raises:
        django.db.OperationalError, InterfaceError: the database is unreachable (the watch
            waits a lease period of answers again before it judges leases).
    """
    if hub.draining:  # a resumed turn would have no worker to run on: the next worker's watch takes it
        return 0
    changed = await db_thread_call(_expire)(conf.approval_timeout())  # the watch handles an unreachable database
    for decided, owner, frame in changed:
        if frame is not None:
            hub.notify(decided.conversation_id, frame)
        if decided.resumed is not None:
            await resume_turn(user=owner, turn=decided.resumed, hub=hub)
    return len(changed)


def _running_turn(user: Any, conversation_id: Any) -> tuple[uuid.UUID, str | None]:
    conversation = get_owned(user, conversation_id)
    running = conversation.turn_id if conversation.status == ConversationStatus.STREAMING else None
    return conversation.pk, None if running is None else str(running)


def _stop_paused(user: Any, conversation_id: uuid.UUID) -> dict[str, Any] | None:
    """Stop a turn paused for approval (docs/approval.md "Stop"); its snapshot, or ``None``
    when the conversation was not paused."""
    if not store.approvals_stop(user=user, conversation_id=conversation_id):
        return None
    return snapshot_of(conversation_id)


def _stop_unowned(user: Any, conversation_id: uuid.UUID) -> dict[str, Any] | None:
    """End a turn no runner answered for in the database; its snapshot, or ``None`` when
    there was nothing to stop."""
    if store.turn_cancel(user=user, conversation_id=conversation_id) is None:
        return None
    return snapshot_of(conversation_id)


async def cancel_turn(*, user: Any, conversation_id: uuid.UUID | str, hub: TurnHub | None = None) -> bool:
    """Stop the conversation's running turn, wherever it runs (any tab, any worker).

    The runner (here, or on another worker through the layer) sets its Stop signal: the turn
    ends ``cancelled`` within about a second and drops its partial message. When no runner
    answers (the layer is down, or its worker died), the database ends the turn (store
    ``turn_cancel``; a runner still alive notices at its next lease renewal and stops) and
    the followers get a fresh ``snapshot``.

    Returns:
        True when a turn was running and is being stopped; False when none ran (no-op).

    Raises:
        ProblemError: ``not-found``; ``service-unavailable`` when the database is down.
    """
    hub = hub or get_hub()
    cid, running = await db_request(_running_turn, user, conversation_id)
    if running is None and (paused := await db_request(_stop_paused, user, cid)) is not None:
        _tell_stopped(hub, user, cid, paused)
        return True
    runner = hub.runner(cid)
    if runner is not None and (running is None or runner.turn_id == running):
        runner.cancel()
        return running is not None or not runner.ended
    if running is None:
        return False
    if await hub.ask_runner(cid, "cancel") is not None:
        return True
    frame = await db_request(_stop_unowned, user, cid)
    if frame is not None:
        _tell_stopped(hub, user, cid, frame)
    return True


def _tell_stopped(hub: TurnHub, user: Any, conversation_id: uuid.UUID, snapshot: dict[str, Any]) -> None:
    """A turn ended in the database: its followers get the ``snapshot``, the owner's sockets
    the ``conversation``."""
    hub.notify(conversation_id, snapshot)
    hub.notify(conversation_id, {"type": "conversation", "conversation": snapshot["conversation"]}, user_pk=user.pk)


def _retry_begin(user: Any, conversation_id: Any) -> tuple[str, int | None]:
    """Drop the last exchange and admit the new turn, in one transaction (a refusal keeps the
    exchange). Returns the text to send again and the turn's quota reservation (sized for the
    text and the system prompt here; the send resizes it for the whole history)."""
    with transaction.atomic():
        text = store.message_retry(user=user, conversation_id=conversation_id)
        if text is None:
            raise problem_error("invalid-request", "There is no message to retry in this conversation.")
        prompt = store.estimate_tokens(text) + store.estimate_tokens(conf.get_system_prompt())
        reservation = ratelimit.check_turn_allowed(user, prompt_tokens=prompt)
    return str(text), reservation


async def retry_turn(*, user: Any, conversation_id: uuid.UUID | str, origin: Origin | None = None,
                     hub: TurnHub | None = None) -> TurnInfo:
    """Drop the last exchange (after an error) and send its user text again as a new turn.
    Every follower first gets a ``snapshot`` without the dropped exchange.

    Raises:
        ProblemError: ``not-found``; ``conflict`` while a turn runs; ``invalid-request`` when
            there is nothing to retry; ``quota-exceeded`` / ``rate-limited`` (the exchange is
            kept, nothing changes); ``service-unavailable``.
    """
    hub = hub or get_hub()
    text, reservation = await db_request(_retry_begin, user, conversation_id)
    cid = parse_id(conversation_id)
    assert cid is not None  # message_retry accepted it
    try:
        frame = await db_request(snapshot_of, cid)
        if frame is not None:
            hub.notify(cid, frame)
        return await start_turn(user=user, conversation_id=cid, text=text, origin=origin, hub=hub, admit=False,
                                reservation=reservation)
    except BaseException:  # no turn took the reservation
        await asyncio.shield(db_request(reservations.settle, reservation))
        raise


def _switch(user: Any, conversation_id: Any, message_id: int) -> dict[str, Any] | None:
    conversation = store.branch_switch(user=user, conversation_id=conversation_id, message_id=message_id)
    return snapshot_of(conversation.pk)


async def branch_switch(*, user: Any, conversation_id: uuid.UUID | str, message_id: int,
                        hub: TurnHub | None = None) -> None:
    """Show the branch through ``message_id`` (docs/store.md "Branches"): every follower gets an
    unasked ``snapshot`` of the new active path, the user's other sockets a ``conversation``.

    Raises:
        ProblemError: ``not-found`` (conversation or message); ``conflict`` while a turn runs.
    """
    hub = hub or get_hub()
    frame = await db_request(_switch, user, conversation_id, message_id)
    if frame is not None:
        cid = uuid.UUID(frame["conversationId"])
        hub.notify(cid, frame)
        hub.notify(cid, {"type": "conversation", "conversation": frame["conversation"]}, user_pk=user.pk)


def _rename(user: Any, conversation_id: Any, title: Any) -> dict[str, Any]:
    return conversation_dict(store.conversation_rename(user=user, conversation_id=conversation_id, title=title))


async def conversation_retitle(*, user: Any, conversation_id: uuid.UUID | str, title: str,
                               hub: TurnHub | None = None) -> dict[str, Any]:
    """Rename a conversation and tell every tab (``conversation`` frame).

    Raises:
        ProblemError: ``not-found``; ``invalid-request`` for an empty or over-long title.
    """
    hub = hub or get_hub()
    data = await db_request(_rename, user, conversation_id, title)
    hub.notify(uuid.UUID(data["id"]), {"type": "conversation", "conversation": data}, user_pk=user.pk)
    return data


async def conversation_remove(*, user: Any, conversation_id: uuid.UUID | str, hub: TurnHub | None = None) -> None:
    """Delete a conversation (its running turn is stopped) and tell every tab
    (``conversation_deleted``).

    Raises:
        ProblemError: ``not-found``.
    """
    hub = hub or get_hub()
    cid, _ = await db_request(_running_turn, user, conversation_id)
    running = await db_request(lambda: store.conversation_delete(user=user, conversation_id=cid))
    if running is not None:
        runner = hub.runner(cid)
        if runner is not None:
            runner.cancel()
        else:
            await hub.ask_runner(cid, "cancel")
    hub.notify(cid, {"type": "conversation_deleted", "conversationId": str(cid)}, user_pk=user.pk)
