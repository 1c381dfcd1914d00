"""The one way a turn starts: prepare its plan, follow it, launch it (docs/turns.md "Starting").

Send, edit, regenerate, retry and resume (after an approval) each prepare a :class:`TurnPlan`
in **one database hop**: one transaction saves the turn's start (the store's
:func:`~jxai_app.store.message_send` or :func:`~jxai_app.store.answer_regenerate`; a retry
drops the failed exchange and sends its text again, :func:`~jxai_app.store.message_resend`) and admits its
budget (:meth:`jxai_app.policy.budget.TurnBudget.admit`) after checking that the user's groups
may use the turn's model (docs/security.md "Group entitlements"), so a refused or failed start
saves nothing and never contacts the provider; the same hop reads the turn's tools, system prompt
and MCP configuration, and for a new branch the snapshot its tabs get first. The caller
then follows the conversation (a socket, an HTTP request) and calls :func:`launch`, which
starts the turn's runner: nothing calls back into the caller, and the caller misses no frame.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Callable

from django.db import transaction

from jxai_app import conf, store
from jxai_app.core.errors import UnknownModelError
from jxai_app.core.gateway import unknown_model_detail
from jxai_app.core.problems import problem_error
from jxai_app.core.providers import ModelConfig
from jxai_app.core.tokens import estimate_tokens
from jxai_app.db import db_request
from jxai_app.policy.budget import TurnBudget, forfeit
from jxai_app.policy.entitlements import Entitlements, entitlements_for
from jxai_app.tools import mcp as mcp_tools
from jxai_app.tools.offer import tool_view
from jxai_app.turns.frames import snapshot_of
from jxai_app.turns.hub import TurnHub
from jxai_app.turns.plan import TurnPlan
from jxai_app.turns.runner import TurnRunner

__all__ = ["TurnPlan", "edit", "launch", "regenerate", "resume", "retry", "send"]

logger = logging.getLogger("jxai_app.turns")


def _model(alias: str | None, *, asked: Entitlements | None) -> ModelConfig:
    """The configured model ``alias`` (``None``: the default). ``asked`` is the user's
    entitlements when the user named the alias; ``None`` for one a conversation saved, which
    falls back to the default when it is no longer configured.

    Raises:
        ProblemError: ``invalid-request`` for an unknown alias the user asked for, naming only
            the aliases the user may use (docs/security.md "Group entitlements").
    """
    registry = conf.get_model_registry()
    try:
        return registry.resolve(alias)
    except UnknownModelError:
        if asked is None:
            return registry.resolve(None)
        raise problem_error("invalid-request", unknown_model_detail(alias, asked.allowed_aliases(registry))) from None


def _check_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise problem_error("invalid-request", "The message is empty.")
    limit = conf.get_limits().max_message_chars
    if len(text) > limit:
        raise problem_error("payload-too-large", f"The message is longer than {limit} characters.")
    return text


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


Save = Callable[..., store.TurnStart]
"""A store service saving a turn's start, called with ``model`` (an alias or ``None``) and
``lease`` inside the start's transaction."""


def _plan(user: Any, turn: store.TurnStart, model: ModelConfig, prompt: str, budget: TurnBudget, *,
          announce: bool) -> TurnPlan:
    return TurnPlan(user=user, turn=turn, budget=budget, model=model, system_prompt=prompt,
                    tools=tool_view(user, model, turn.prior_calls), mcp_servers=mcp_tools.server_configs(),
                    snapshot=_branch_snapshot(turn) if announce else None)


def _prepare(user: Any, save: Save, alias: str | None, new_conversation: bool, announce: bool) -> TurnPlan:
    """The start's hop (module docstring). Sync: runs in a database thread."""
    prompt = store.system_prompt_for(user=user, base=conf.get_system_prompt())
    granted = entitlements_for(user)
    requested = _model(alias, asked=granted) if alias else None
    new_model = requested or (_model(granted.default_alias(conf.get_model_registry()), asked=granted)
                              if new_conversation else None)
    with transaction.atomic():
        turn = save(model=None if new_model is None else new_model.alias, lease=conf.get_turn_timing().lease)
        answering = requested or _model(turn.model, asked=None)
        granted.check_model(answering.alias)  # refused: the save is rolled back (docs/security.md "Group entitlements")
        refused = answering.refused_input(turn.history)
        if refused is not None:  # before any provider call; the transaction saves nothing
            raise problem_error("capability-unavailable", refused, model=answering.alias)
        budget = TurnBudget.admit(user, prompt_tokens=turn.prompt_tokens + estimate_tokens(prompt),
                                  turn_id=turn.turn_id, model=turn.model, granted=granted)
        if turn.abandoned is not None:  # a dead turn the start recovered: its prompt was spent
            forfeit(turn.abandoned.turn_id, model=turn.abandoned.model)
    return _plan(user, turn, answering, prompt, budget, announce=announce)


def _resend(*, user: Any, conversation_id: Any, model: str | None, lease: float) -> store.TurnStart:
    """A retry's save: the failed exchange dropped, its text and attachments sent again (one transaction)."""
    turn = store.message_resend(user=user, conversation_id=conversation_id, model=model, lease=lease)
    if turn is None:
        raise problem_error("invalid-request", "There is no message to retry in this conversation.")
    return turn


def _prepare_resume(user: Any, turn: store.TurnStart) -> TurnPlan:
    budget = TurnBudget.resumed(user, turn_id=turn.turn_id, model=turn.model)
    prompt = store.system_prompt_for(user=user, base=conf.get_system_prompt())
    return _plan(user, turn, _model(turn.model, asked=None), prompt, budget, announce=False)


async def _prepared(hub: TurnHub, prepare: Callable[..., TurnPlan], *args: Any) -> TurnPlan:
    await hub.ensure_started()
    if hub.draining:
        raise problem_error("service-unavailable", "This server is shutting down; send again to reach another one.",
                            retry_after=1)
    plan = await db_request(prepare, *args)
    if await mcp_tools.apply(plan.mcp_servers):  # an MCP server started, closed or restarted (docs/mcp.md "Sessions")
        plan.tools = await db_request(tool_view, plan.user, plan.model, plan.turn.prior_calls)
    return plan


async def send(hub: TurnHub, *, user: Any, conversation_id: uuid.UUID | str | None, text: str,
               model_alias: str | None = None, temporary: bool = False,
               attachments: list[Any] | None = None) -> TurnPlan:
    """Prepare the turn answering a new user message.

    Args:
        hub: the worker's hub (it must not be draining).
        user: the requesting (authenticated) user.
        conversation_id: the conversation, or ``None`` to create one (owned by ``user``,
            with ``model_alias`` or the default model).
        text: the message (non-blank, at most ``JXAI_MAX_MESSAGE_CHARS`` characters).
        model_alias: switch the conversation to this configured model (``None``: keep it).
        temporary: a new conversation is a temporary chat (docs/data.md "Temporary chats").
        attachments: ids of the user's uploads the message carries (docs/attachments.md "Sending").

    Returns:
        The plan; follow ``plan.conversation_id``, then :func:`launch` it. Its frames
        (``conversation``, ``message_saved`` of the user message, then ``events`` from seq 1)
        go to every follower, on every worker.

    Raises:
        ProblemError: ``invalid-request`` (blank text, unknown model), ``forbidden`` (a model the
            user's groups may not use), ``payload-too-large``,
            ``not-found`` (missing or foreign conversation), ``quota-exceeded`` /
            ``rate-limited`` (with ``retry_after``; nothing saved, the provider not
            contacted), ``conflict`` (a turn already runs in it, on any worker),
            ``service-unavailable`` (the worker is draining, or the database is down),
            ``capability-unavailable`` (an image for a model that takes none), an attachment
            refused (``not-found``, ``payload-too-large``).
    """
    text = _check_text(text)

    def save(**kwargs: Any) -> store.TurnStart:
        return store.message_send(user=user, conversation_id=conversation_id, text=text, temporary=temporary,
                                  attachments=attachments or (), **kwargs)

    return await _prepared(hub, _prepare, user, save, model_alias, conversation_id is None, False)


async def edit(hub: TurnHub, *, user: Any, conversation_id: uuid.UUID | str, message_id: int, text: str,
               model_alias: str | None = None, attachments: list[Any] | None = None) -> TurnPlan:
    """Prepare the turn answering ``text`` as a new branch beside user message ``message_id``
    (docs/store.md "Branches"); every follower first gets the branch's ``snapshot``. The new
    message keeps the edited one's attachments, or carries ``attachments`` (ids of the edited
    message's attachments or of new uploads) when given (docs/attachments.md "Sending").

    Raises:
        ProblemError: as :func:`send`; ``invalid-request`` when ``message_id`` is not a user
            message, ``not-found`` when it is not in the conversation.
    """
    text = _check_text(text)

    def save(**kwargs: Any) -> store.TurnStart:
        return store.message_send(user=user, conversation_id=conversation_id, text=text, replaces=message_id,
                                  attachments=attachments, **kwargs)

    return await _prepared(hub, _prepare, user, save, model_alias, False, True)


async def regenerate(hub: TurnHub, *, user: Any, conversation_id: uuid.UUID | str, message_id: int,
                     model_alias: str | None = None) -> TurnPlan:
    """Prepare a new answer to the question of assistant message ``message_id``, as a new
    branch beside it, with ``model_alias`` (``None``: the conversation's model).

    Raises:
        ProblemError: as :func:`send`; ``invalid-request`` when ``message_id`` is not an
            assistant message.
    """
    def save(**kwargs: Any) -> store.TurnStart:
        return store.answer_regenerate(user=user, conversation_id=conversation_id, message_id=message_id, **kwargs)

    return await _prepared(hub, _prepare, user, save, model_alias, False, True)


async def retry(hub: TurnHub, *, user: Any, conversation_id: uuid.UUID | str) -> TurnPlan:
    """Prepare the resend of the last exchange's question (after an error; docs/store.md
    "Retry"): the exchange is dropped and its text sent again in one transaction; every
    follower first gets the ``snapshot`` without it.

    Raises:
        ProblemError: ``not-found``; ``conflict`` while a turn runs; ``invalid-request`` when
            there is nothing to retry; ``quota-exceeded`` / ``rate-limited`` (the exchange is
            kept, nothing changes); ``service-unavailable``.
    """
    def save(**kwargs: Any) -> store.TurnStart:
        return _resend(user=user, conversation_id=conversation_id, **kwargs)

    return await _prepared(hub, _prepare, user, save, None, False, True)


async def resume(hub: TurnHub, *, user: Any, turn: store.TurnStart) -> TurnPlan:
    """Prepare the turn an approval decision resumed (docs/approval.md "Resuming"): its decided
    calls are answered first (approved ones run as ``user``), then the loop goes on from the
    saved history with a new lease. Not admitted again: it is the same turn; but its
    reservation ended at the pause, so its first model request reserves its tokens like any
    later round (docs/security.md "Quota reservations").

    Args:
        user: the conversation's owner (the tools act as them).
        turn: what :func:`jxai_app.store.approval_decide` or ``approvals_expire`` claimed.
    """
    logger.info("resuming conversation %s after approval as turn %s", turn.conversation_id, turn.turn_id)
    return await _prepared(hub, _prepare_resume, user, turn)


def launch(hub: TurnHub, plan: TurnPlan) -> TurnRunner:
    """Start the planned turn on this worker: a new branch's ``snapshot`` first, then the
    runner's task. Follow the conversation before calling it: nothing is missed."""
    runner = TurnRunner(hub=hub, plan=plan)
    if plan.snapshot is not None:  # published before the turn's first frame, on the same path
        hub.notify(plan.conversation_id, plan.snapshot)
    runner.start()
    return runner
