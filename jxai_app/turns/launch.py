"""Starting a turn: the send's one transaction, and the model request started inside it.

A send makes its decision under the conversation's row lock (ownership, the one-turn
rule, the user's quota and rate limit, the history), then writes (the claim, the user
message, the placeholder) and commits. Nothing of that needs the model request to wait
for the writes: as soon as the send is decided, :class:`Launch` starts the turn's runner
on the event loop, so the request to the provider travels while the writes and the commit
run in the database thread (issue 4, time to first token). The runner holds every event
until the commit is confirmed (:meth:`TurnRunner.bind`) and publishes nothing before it;
if the transaction fails after the decision, the runner is dropped (:meth:`TurnRunner.abandon`):
its request is closed, nothing was saved and no socket saw anything.

A refusal (not found, conflict, quota, rate limit, bad input) is raised before the decision,
so the provider is never contacted for it (issue 6 item 3).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from channels.db import database_sync_to_async
from django.db import transaction

from jxai_app import conf, ratelimit, store, toolpolicy
from jxai_app.errors import UnknownModelError
from jxai_app.problems import problem_error
from jxai_app.providers import ModelConfig
from jxai_app.serializers import conversation_dict, message_dict
from jxai_app.store import sql
from jxai_app.store.common import lock_owned_query, locked_from, parse_id
from jxai_app.streaming.events import ErrorEvent
from jxai_app.streaming.retry import RetryingClient, RetryPolicy
from jxai_app.turns.hub import Follower, TurnHub, get_hub
from jxai_app.turns.runner import TurnRunner

__all__ = ["Launch", "Origin", "TurnInfo", "client_factory", "start_turn", "start_turn_unmetered", "tool_view"]

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
    created: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class _Request:
    """What the model request needs, known once the send is decided."""

    conversation_id: uuid.UUID
    turn_id: uuid.UUID
    model: ModelConfig
    history: list[dict[str, Any]]
    tools: Any


def tool_view(user: Any, model: ModelConfig, rules: dict[str, Any] | None = None) -> Any:
    """The tools one turn of ``user`` on ``model`` offers (issue 6 item 2: tools act as the user).

    Sync (reads ``ToolPolicy`` rows, unless ``rules`` already holds them, and the user's
    groups): call it in a thread. Built once per turn, since the view counts calls for the
    per-turn caps.

    Returns:
        :func:`jxai_app.toolpolicy.tool_view_for` over the deployment's registry: only the
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
    :class:`~jxai_app.streaming.retry.RetryingClient`: a 429/5xx before any output is
    retried with backoff up to ``JXAI_UPSTREAM_RETRIES`` times, never after output began
    (issue 6 item 7)."""
    policy = RetryPolicy(retries=conf.get_limits().upstream_retries)
    return lambda: RetryingClient(conf.build_client(alias), policy, on_retry=_log_retry(alias))


class Launch:
    """Starts one send's runner from the database thread once the send is decided (see the
    module docstring), and binds or drops it when the transaction has ended.

    Use: pass :meth:`ready` to the send's transaction (it runs in the thread), then call
    :meth:`bind` with what was saved, or :meth:`abandon` when the transaction raised.

    Args:
        hub: the worker's hub.
        user: the requesting user.
        loop: the event loop the runner runs on (the caller's).
    """

    def __init__(self, *, hub: TurnHub, user: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.hub, self.user, self._loop = hub, user, loop
        # The runner's task must start in the caller's context, not the database thread's:
        # asgiref marks that thread's context, and a task inheriting it could not use
        # ``database_sync_to_async`` ("Single thread executor already being used").
        self._context = contextvars.copy_context()
        self._request: _Request | None = None
        self.runner: TurnRunner | None = None

    def ready(self, request: _Request) -> None:
        """Thread side: the send is decided; start the runner on the loop now."""
        self._request = request
        self._loop.call_soon_threadsafe(self._create, context=self._context)

    def _create(self) -> None:
        request = self._request
        if self.runner is not None or request is None:
            return
        self.runner = TurnRunner(
            hub=self.hub, user=self.user, conversation_id=request.conversation_id, turn_id=request.turn_id,
            model=request.model.alias, history=request.history, context_window=request.model.context_window,
            tools=request.tools, client_factory=client_factory(request.model.alias),
            system_prompt=conf.get_system_prompt(), policy=conf.get_agent_policy(),
        )
        self.runner.start()

    def bind(self, begun: _Begun) -> TurnRunner:
        """Loop side, after the commit: the runner may publish and write from now on."""
        self._create()  # normally done already by the callback ``ready`` scheduled
        assert self.runner is not None, "the send committed without deciding"
        self.runner.bind(begun.turn, user_message=begun.user_message, conversation=begun.conversation)
        return self.runner

    def abandon(self) -> None:
        """Loop side, the transaction raised: drop the runner if one started (its request
        closes; it publishes and writes nothing)."""
        self._request = None
        if self.runner is not None:
            self.runner.abandon()


def _resolve_model(alias: str | None) -> ModelConfig | None:
    if not alias:
        return None
    try:
        return conf.get_model_registry().get(alias)
    except UnknownModelError as exc:
        raise problem_error("invalid-request", str(exc)) from None


def _begin(user: Any, conversation_id: Any, text: str, alias: str | None, *, admit: bool,
           on_ready: Callable[[_Request], None]) -> _Begun:
    """Everything a send does in the database, in one thread hop and one short transaction.

    1. Read, in one round trip on PostgreSQL (:func:`jxai_app.store.sql.fetch_together`):
       the conversation's row, locked (or create the conversation when asked), the user's
       standing and admissions (``admit``: quota and rate limit, :mod:`jxai_app.ratelimit`),
       the tools' policy rows and the history.
    2. Decide: not found, quota, rate limit, conflict are refused here (rolled back: nothing
       saved, the provider not contacted); else ``on_ready`` (the model request may start).
    3. Write: the admission, the claim, the user message and the placeholder
       (:func:`jxai_app.store.turn_open`), then commit.
    """
    registry = conf.get_model_registry()
    requested = _resolve_model(alias)
    turn_id = uuid.uuid4()
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
        cid = conversation.pk

        def decided(wire: list[dict[str, Any]]) -> None:
            on_ready(_Request(conversation_id=cid, turn_id=turn_id, model=model, history=wire, tools=tools))
            if admission is not None:
                admission.take()  # a write: after the request went out, in the same transaction

        opened = store.turn_open(conversation=conversation, text=text, turn_id=turn_id, on_ready=decided,
                                 history=history, model=model.alias if model.alias != conversation.model else None)
    return _Begun(turn=opened.turn, conversation=conversation_dict(opened.conversation),
                  user_message=message_dict(opened.user_message), created=created)


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
    launch = Launch(hub=hub, user=user, loop=asyncio.get_running_loop())
    try:
        begun = await database_sync_to_async(_begin)(user, conversation_id, text, model_alias, admit=admit,
                                                     on_ready=launch.ready)
    except BaseException:
        launch.abandon()
        raise
    runner = launch.bind(begun)
    if origin is not None:
        origin.adopt(begun.turn.conversation_id, runner.turn_id)
    return TurnInfo(conversation_id=begun.turn.conversation_id, turn_id=runner.turn_id, created=begun.created,
                    conversation=begun.conversation, runner=runner)
