"""Starting and stopping turns, and the conversation changes every tab must hear about.

The websocket consumer (and any other caller) uses these; they hold the rules, the
consumer only translates frames. All database work runs in private sync functions behind
``database_sync_to_async``. Every function that takes a conversation id checks that the
user owns it and answers a missing, malformed or foreign id alike (``not-found``).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from channels.db import database_sync_to_async
from django.db import transaction

from jxai_app import conf, ratelimit, store, toolpolicy
from jxai_app.errors import UnknownModelError
from jxai_app.models import ConversationStatus
from jxai_app.problems import problem_error
from jxai_app.providers import ModelConfig
from jxai_app.serializers import conversation_dict, message_dict
from jxai_app.store.common import get_owned, lock_owned, parse_id
from jxai_app.streaming.events import ErrorEvent
from jxai_app.streaming.retry import RetryingClient, RetryPolicy
from jxai_app.turns import names
from jxai_app.turns.hub import Follower, TurnHub, get_hub
from jxai_app.turns.runner import TurnRunner

__all__ = [
    "Origin", "TurnInfo", "cancel_turn", "conversation_remove", "conversation_retitle", "retry_turn",
    "start_turn", "tool_view",
]

logger = logging.getLogger("jxai_app.turns")


class Origin(Follower, Protocol):
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


@dataclass(frozen=True, kw_only=True, slots=True)
class _Begun:
    turn: store.TurnStart
    conversation: dict[str, Any]
    user_message: dict[str, Any]
    history: list[dict[str, Any]]
    model: ModelConfig
    created: bool
    tools: Any


def tool_view(user: Any, model: ModelConfig) -> Any:
    """The tools one turn of ``user`` on ``model`` offers (issue 6 item 2: tools act as the user).

    Sync (reads ``ToolPolicy`` rows and the user's groups): call it in a thread. Built once
    per turn, since the view counts calls for the per-turn caps.

    Returns:
        :func:`jxai_app.toolpolicy.tool_view_for` over the deployment's registry: only the
        tools the user's policies allow (none when the model has no tool support); a tool
        the model names without it being offered gets a failed "not available" result.
    """
    return toolpolicy.tool_view_for(user, conf.get_tool_registry(), model_supports_tools=model.supports_tools)


def _log_retry(alias: str) -> Callable[[int, ErrorEvent, float], None]:
    def on_retry(retry: int, error: ErrorEvent, delay: float) -> None:
        logger.info("model %s answered %s before any output; retry %d in %.2f s", alias, error.code, retry, delay)

    return on_retry


def client_factory(alias: str) -> Callable[[], Any]:
    """Builds model ``alias``'s streaming client for a turn, wrapped in a
    :class:`~jxai_app.streaming.retry.RetryingClient`: a 429/5xx before any output is
    retried with backoff up to ``JXAI_UPSTREAM_RETRIES`` times, never after output began
    (issue 6 item 7)."""
    policy = RetryPolicy(retries=conf.get_limits().upstream_retries)
    return lambda: RetryingClient(conf.build_client(alias), policy, on_retry=_log_retry(alias))


def _resolve_model(alias: str | None) -> ModelConfig | None:
    if not alias:
        return None
    try:
        return conf.get_model_registry().get(alias)
    except UnknownModelError as exc:
        raise problem_error("invalid-request", str(exc)) from None


def _begin(user: Any, conversation_id: Any, text: str, alias: str | None, *, admit: bool) -> _Begun:
    """Everything a send needs before the model request, in one thread hop and one short
    transaction: create the conversation when asked, lock and read it, admit the turn
    (``admit``: the user's quota and rate limit, :func:`jxai_app.ratelimit.check_turn_allowed`),
    claim the conversation, read the history and save the user message and the placeholder
    (:func:`jxai_app.store.turn_open`). A refusal or a conflict rolls it all back: nothing
    saved, the provider not contacted. After the commit, the turn's tool view (its policy
    rows are read outside the write transaction)."""
    registry = conf.get_model_registry()
    requested = _resolve_model(alias)
    with transaction.atomic():
        created = conversation_id is None
        if created:
            conversation = store.conversation_create(user=user, model=(requested or registry.resolve(None)).alias)
        else:
            conversation = lock_owned(user, conversation_id)
        if requested is not None:
            model = requested
        else:
            try:
                model = registry.get(conversation.model)
            except UnknownModelError:  # configuration changed since: the default takes over
                model = registry.resolve(None)
        if admit:
            ratelimit.check_turn_allowed(user)  # before the provider; rolled back with a conflict
        opened = store.turn_open(conversation=conversation, text=text,
                                 model=model.alias if model.alias != conversation.model else None)
    return _Begun(turn=opened.turn, conversation=conversation_dict(opened.conversation),
                  user_message=message_dict(opened.user_message), history=opened.history, model=model,
                  created=created, tools=tool_view(user, model))


def _check_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise problem_error("invalid-request", "The message is empty.")
    limit = conf.get_limits().max_message_chars
    if len(text) > limit:
        raise problem_error("payload-too-large", f"The message is longer than {limit} characters.")
    return text


async def start_turn(*, user: Any, conversation_id: uuid.UUID | str | None, text: str,
                     model_alias: str | None = None, origin: Origin | None = None,
                     hub: TurnHub | None = None) -> TurnInfo:
    """Save the user's message and start a turn in a task owned by this worker.

    Args:
        user: the requesting (authenticated) user.
        conversation_id: the conversation, or ``None`` to create one (owned by ``user``,
            with ``model_alias`` or the default model).
        text: the message (non-blank, at most ``JXAI_MAX_MESSAGE_CHARS`` characters).
        model_alias: switch the conversation to this configured model (``None``: keep it).
        origin: the asking socket; it follows the conversation before the first frame.
        hub: the worker's hub (default :func:`~jxai_app.turns.hub.get_hub`).

    Returns:
        The started turn. Its frames (``conversation``, ``message_saved`` of the user
        message, then ``events`` from seq 1) go to every follower, on every worker.

    Raises:
        ProblemError: ``invalid-request`` (blank text, unknown model), ``payload-too-large``
            (text too long), ``not-found`` (missing or foreign conversation),
            ``quota-exceeded`` / ``rate-limited`` (with ``retry_after``; nothing saved, the
            provider not contacted), ``conflict`` (a turn already runs in it, on any worker).
    """
    return await _start(user=user, conversation_id=conversation_id, text=text, model_alias=model_alias,
                        origin=origin, hub=hub, admit=True)


async def _start(*, user: Any, conversation_id: uuid.UUID | str | None, text: str, model_alias: str | None,
                 origin: Origin | None, hub: TurnHub | None, admit: bool) -> TurnInfo:
    text = _check_text(text)
    hub = hub or get_hub()
    begun = await database_sync_to_async(_begin)(user, conversation_id, text, model_alias, admit=admit)
    runner = TurnRunner(
        hub=hub, user=user, turn=begun.turn, user_message=begun.user_message, history=begun.history,
        context_window=begun.model.context_window, tools=begun.tools,
        client_factory=client_factory(begun.model.alias), system_prompt=conf.get_system_prompt(),
        policy=conf.get_agent_policy(), conversation=begun.conversation,
    )
    if origin is not None:
        origin.adopt(begun.turn.conversation_id, runner.turn_id)
    runner.start()
    return TurnInfo(conversation_id=begun.turn.conversation_id, turn_id=runner.turn_id, created=begun.created,
                    conversation=begun.conversation, runner=runner)


def _running_turn(user: Any, conversation_id: Any) -> tuple[uuid.UUID, str | None]:
    conversation = get_owned(user, conversation_id)
    running = conversation.turn_id if conversation.status == ConversationStatus.STREAMING else None
    return conversation.pk, None if running is None else str(running)


def _snapshot_frame(user: Any, conversation_id: uuid.UUID) -> dict[str, Any]:
    conversation, messages = store.message_list(user=user, conversation_id=conversation_id)
    from jxai_app.serializers import message_dicts

    return {"type": "snapshot", "conversationId": str(conversation.pk), "conversation": conversation_dict(conversation),
            "messages": message_dicts(messages), "turn": None}


async def cancel_turn(*, user: Any, conversation_id: uuid.UUID | str, hub: TurnHub | None = None) -> bool:
    """Stop the conversation's running turn, wherever it runs (any tab, any worker).

    The runner (here, or on another worker through the control group) sets its Stop signal:
    the turn ends ``cancelled`` within about a second and drops its partial message. When no
    runner answers (its worker died), the database ends the turn (store ``turn_cancel``) and
    the followers get a fresh ``snapshot``.

    Returns:
        True when a turn was running and is being stopped; False when none ran (no-op).

    Raises:
        ProblemError: ``not-found``.
    """
    hub = hub or get_hub()
    cid, running = await database_sync_to_async(_running_turn)(user, conversation_id)
    runner = hub.runner(cid)
    if runner is not None and (running is None or runner.turn_id == running):
        runner.cancel()
        return running is not None or not runner.ended
    if running is None:
        return False
    answer = await hub.ask_runner(cid, {"type": names.CANCEL})
    if answer is not None:
        return True
    stopped = await database_sync_to_async(store.turn_cancel)(user=user, conversation_id=cid)
    if stopped is not None:
        frame = await database_sync_to_async(_snapshot_frame)(user, cid)
        await hub.notify(cid, frame)
        await hub.notify_user(cid, {"type": "conversation", "conversation": frame["conversation"]},
                              user_pk=getattr(user, "pk", None))
    return True


async def retry_turn(*, user: Any, conversation_id: uuid.UUID | str, origin: Origin | None = None,
                     hub: TurnHub | None = None) -> TurnInfo:
    """Drop the last exchange (after an error) and send its user text again as a new turn.

    Every follower first gets a ``snapshot`` without the dropped exchange.

    Raises:
        ProblemError: ``not-found``; ``conflict`` while a turn runs; ``invalid-request``
            when there is nothing to retry; ``quota-exceeded`` / ``rate-limited`` (the
            exchange is kept, nothing changes).
    """
    hub = hub or get_hub()
    text = await database_sync_to_async(_retry_begin)(user, conversation_id)
    cid = parse_id(conversation_id)
    assert cid is not None  # message_retry accepted it
    await hub.notify(cid, await database_sync_to_async(_snapshot_frame)(user, cid))
    return await _start(user=user, conversation_id=cid, text=text, model_alias=None, origin=origin, hub=hub,
                        admit=False)


def _retry_begin(user: Any, conversation_id: Any) -> str:
    """Drop the last exchange and admit the new turn, in one transaction (a refusal keeps
    the exchange). Returns the text to send again."""
    with transaction.atomic():
        text = store.message_retry(user=user, conversation_id=conversation_id)
        if text is None:
            raise problem_error("invalid-request", "There is no message to retry in this conversation.")
        ratelimit.check_turn_allowed(user)
    return str(text)


def _rename(user: Any, conversation_id: Any, title: Any) -> dict[str, Any]:
    return conversation_dict(store.conversation_rename(user=user, conversation_id=conversation_id, title=title))


async def conversation_retitle(*, user: Any, conversation_id: uuid.UUID | str, title: str,
                               hub: TurnHub | None = None) -> dict[str, Any]:
    """Rename a conversation and tell every tab (``conversation`` frame).

    Raises:
        ProblemError: ``not-found``; ``invalid-request`` for an empty or over-long title.
    """
    hub = hub or get_hub()
    data = await database_sync_to_async(_rename)(user, conversation_id, title)
    cid = uuid.UUID(data["id"])
    await hub.notify(cid, {"type": "conversation", "conversation": data}, user_pk=getattr(user, "pk", None))
    return data


async def conversation_remove(*, user: Any, conversation_id: uuid.UUID | str, hub: TurnHub | None = None) -> None:
    """Delete a conversation (its running turn is stopped) and tell every tab
    (``conversation_deleted``).

    Raises:
        ProblemError: ``not-found``.
    """
    hub = hub or get_hub()
    cid, _ = await database_sync_to_async(_running_turn)(user, conversation_id)
    running = await database_sync_to_async(store.conversation_delete)(user=user, conversation_id=cid)
    if running is not None:
        runner = hub.runner(cid)
        if runner is not None:
            runner.cancel()
        else:
            await hub.tell_runner(cid, {"type": names.CANCEL})
    await hub.notify(cid, {"type": "conversation_deleted", "conversationId": str(cid)},
                     user_pk=getattr(user, "pk", None))
