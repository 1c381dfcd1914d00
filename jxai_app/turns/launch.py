"""Starting a turn: the send's one transaction, then the model request.

A send makes its decision under the conversation's row lock (ownership, the one-turn
rule, the user's quota and rate limit, the history), writes (the claim, the user message,
the placeholder) and commits, all in one hop to the database thread; then the turn's
runner starts on the event loop and the model request goes out. A refusal (not found,
conflict, quota, rate limit, bad input) or a failed transaction never contacts the
provider (issue 6 item 3), and no socket sees a turn that was not saved.

Why not start the request before the commit, to overlap it with the writes? That was
tried (session 2) and measured on the 2-CPU bench machine (``bench/e2e.py --latency-only``,
issue 4): it made the added time to first token about 0.8 ms worse at the median on SQLite
and saved about 0.3 ms on PostgreSQL. The writes and the request's set-up both need the
GIL, and a thread that gives it up at every SQLite statement then waits for the other at
each one, so the two interleave slower than they run one after the other.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from channels.db import database_sync_to_async
from django.db import transaction

from jxai_app import conf, store

from jxai_app.policy import ratelimit

from jxai_app.policy import toolpolicy
from jxai_app.core.errors import UnknownModelError
from jxai_app.core.problems import problem_error
from jxai_app.core.providers import ModelConfig
from jxai_app.store.serializers import conversation_dict, message_dict
from jxai_app.store import sql
from jxai_app.store.common import lock_owned_query, locked_from, parse_id
from jxai_app.core.streaming.events import ErrorEvent
from jxai_app.core.streaming.retry import RetryingClient, RetryPolicy
from jxai_app.turns.hub import Follower, TurnHub, get_hub
from jxai_app.turns.runner import TurnRunner

__all__ = ["Origin", "TurnInfo", "client_factory", "start_turn", "start_turn_unmetered", "tool_view"]

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
    """What a committed send saved, and what its model request needs."""

    turn: store.TurnStart
    conversation: dict[str, Any]
    user_message: dict[str, Any]
    created: bool
    model: ModelConfig
    history: list[dict[str, Any]]
    """OpenAI wire messages, ending with the new user message."""
    tools: Any


def tool_view(user: Any, model: ModelConfig, rules: dict[str, Any] | None = None) -> Any:
    """The tools one turn of ``user`` on ``model`` offers (issue 6 item 2: tools act as the user).

    Sync (reads ``ToolPolicy`` rows, unless ``rules`` already holds them, and the user's
    groups): call it in a thread. Built once per turn, since the view counts calls for the
    per-turn caps.

    Returns:
        :func:`jxai_app.policy.toolpolicy.tool_view_for` over the deployment's registry: only the
        tools the user's policies allow (none when the model has no tool support); a tool
        the model names without it being offered gets a failed "not available" result.
    """
    return toolpolicy.tool_view_for(user, conf.get_tool_registry(), model_supports_tools=model.supports_tools,
                                    rules=rules)


def _log_retry(alias: str) -> Callable[[int, ErrorEvent, float], None]:
    def on_retry(retry: int, error: ErrorEvent, delay: float) -> None:
        logger.info("model %s answered %s before any output; retry %d in %.2f s", alias, error.code, retry, delay)

    return on_retry


def client_factory(alias: str) -> Callable[[], Any]:
    """Builds model ``alias``'s streaming client for a turn, wrapped in a
    :class:`~jxai_app.core.streaming.retry.RetryingClient`: a 429/5xx before any output is
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
    """Everything a send does in the database, in one thread hop and one short transaction.

    1. Read, in one round trip on PostgreSQL (:func:`jxai_app.store.sql.fetch_together`):
       the conversation's row, locked (or create the conversation when asked), the user's
       standing and admissions (``admit``: quota and rate limit, :mod:`jxai_app.policy.ratelimit`),
       the tools' policy rows and the history.
    2. Decide: not found, quota, rate limit, conflict are refused here (rolled back: nothing
       saved, the provider not contacted).
    3. Write: the claim, the user message and the placeholder (:func:`jxai_app.store.turn_open`)
       and the admission, in one round trip on PostgreSQL, then commit.
    """
    registry = conf.get_model_registry()
    requested = _resolve_model(alias)
    now = ratelimit.now()
    tool_names = [defn.name for defn in conf.get_tool_registry().list()]
    with transaction.atomic():
        created = conversation_id is None
        queries = [] if created else [lock_owned_query(user, conversation_id)]
        if admit:
            queries += ratelimit.admission_queries(user, now)
        queries.append(toolpolicy.rules_query(tool_names))
        if created:
            conversation = store.conversation_create(user=user, model=(requested or registry.resolve(None)).alias)
            results = sql.fetch_together(queries)
            history: store.History | None = store.History(messages=[], calls={})
        else:
            results = sql.fetch_together([*queries, *store.history_queries(parse_id(conversation_id))])
            conversation = locked_from(results.pop(0))
            history = store.history_from(results[-2:])
        model = requested or _model_of(registry, conversation.model)
        admission = ratelimit.admission_from(user, now, results[:2]) if admit else None
        rules = toolpolicy.rules_from(results[2 if admit else 0])
        tools = tool_view(user, model, rules)
        opened = store.turn_open(conversation=conversation, text=text, history=history,
                                 model=model.alias if model.alias != conversation.model else None,
                                 also=admission.take_queries() if admission is not None else ())
    return _Begun(turn=opened.turn, conversation=conversation_dict(opened.conversation),
                  user_message=message_dict(opened.user_message), created=created, model=model,
                  history=opened.history, tools=tools)


def _model_of(registry: Any, alias: str) -> ModelConfig:
    try:
        return registry.get(alias)
    except UnknownModelError:  # configuration changed since: the default takes over
        return registry.resolve(None)


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


async def start_turn_unmetered(*, user: Any, conversation_id: uuid.UUID, text: str, origin: Origin | None,
                               hub: TurnHub) -> TurnInfo:
    """:func:`start_turn` without the quota and rate-limit check, for a caller that already
    admitted the turn in its own transaction (retry)."""
    return await _start(user=user, conversation_id=conversation_id, text=text, model_alias=None, origin=origin,
                        hub=hub, admit=False)


async def _start(*, user: Any, conversation_id: uuid.UUID | str | None, text: str, model_alias: str | None,
                 origin: Origin | None, hub: TurnHub | None, admit: bool) -> TurnInfo:
    text = _check_text(text)
    hub = hub or get_hub()
    begun = await database_sync_to_async(_begin)(user, conversation_id, text, model_alias, admit=admit)
    runner = TurnRunner(
        hub=hub, user=user, turn=begun.turn, user_message=begun.user_message, conversation=begun.conversation,
        model=begun.model.alias, history=begun.history, context_window=begun.model.context_window,
        tools=begun.tools, client_factory=client_factory(begun.model.alias), system_prompt=conf.get_system_prompt(),
        policy=conf.get_agent_policy(),
    )
    if origin is not None:  # before the task starts, so the socket misses nothing
        origin.adopt(begun.turn.conversation_id, runner.turn_id)
    runner.start()
    return TurnInfo(conversation_id=begun.turn.conversation_id, turn_id=runner.turn_id, created=begun.created,
                    conversation=begun.conversation, runner=runner)
