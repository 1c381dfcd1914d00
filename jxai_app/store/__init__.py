"""The chat store: its rules (docs/store.md) as services over the Django
models. Views, consumers, the turn runner and admin call these and hold
no rules of their own.

Services (keyword-only; every one that takes a conversation id also takes the requesting
user and raises ``ProblemError`` ``not-found`` for a missing, malformed or foreign id)::

    conversation_create(*, user, model, title="", system_prompt=None) -> Conversation
    conversation_get(*, user, conversation_id) -> Conversation
    conversation_by_id(id), message_by_id(id), database_ping()      (no ownership: runner, watch)
    conversation_list(*, user) -> QuerySet[Conversation]                          (recent first)
    message_list(*, user, conversation_id) -> (Conversation, ActivePath)       (docs/store.md "Branches")
    conversation_page(*, user, before=None, size) -> (list[Conversation], next cursor | None)
    conversation_rename(*, user, conversation_id, title) -> Conversation
    conversation_delete(*, user, conversation_id) -> UUID | None                  (running turn)
    message_send(*, user, conversation_id | None, text, model=None, lease=6.0, replaces=None,
                 attachments=None, keep=()) -> TurnStart
    answer_regenerate(*, user, conversation_id, message_id, model=None, lease=6.0) -> TurnStart
    branch_switch(*, user, conversation_id, message_id) -> Conversation
    active_path(conversation) -> ActivePath {messages, siblings}; siblings_of(message) -> Siblings
    turn_cancel(*, user, conversation_id) -> Recovered | None
    message_resend(*, user, conversation_id, model=None, lease=6.0) -> TurnStart | None  (retry + send again)
    attachment_upload(*, user, name, data, quota) -> Attachment; attachment_get(*, user, attachment_id)
    attachments_sweep(*, older_than=1 day) -> int; storage_used(user) -> int   (docs/attachments.md)
    conversation_search(*, owner, query, limit=5) -> list[dict]                  (own only)
    message_search(*, owner, query, limit=20) -> list[dict]                      (own only)
    feedback_set(*, user, message_id, rating, comment="") -> (UUID, dict | None)
    instructions_get(*, user) -> str; instructions_set(*, user, text) -> str
    system_prompt_for(*, user, base) -> str                 (base + custom instructions)
    to_messages(conversation) -> list[dict]                                       (OpenAI wire)
    conversations_export(conversations) -> list[dict]
    turns_lapsed(*, lease=6.0, everything=False, exclude=()) -> [(conversation id, turn id)]
    turn_abandon(*, conversation_id, turn_id, interrupted, lease=None) -> Recovered | None; strays_drop() -> int
    leases_renew(turn_ids) -> set of the turns still running
    approval_decide(*, user, conversation_id, call_id, approved, reason, timeout) -> Decided
    approvals_expire(*, timeout) -> [Decided]; approvals_stop(*, user, conversation_id) -> bool

Your data (docs/data.md), from their modules: ``export.export_zip(user) -> ZIP pieces``,
``dataimport.data_import(*, user, data, quota) -> ImportReport``,
``retention.conversations_purge(*, now, days, dry_run=False) -> [Purged]``,
``erasure.account_erase(*, user, by=None) -> ErasureRecord``.

A running turn writes through a :class:`TurnRecorder` (a few writes per round; see its module).
"""

from __future__ import annotations

from jxai_app.store.approval import Decided, approval_decide, approvals_expire, approvals_stop
from jxai_app.store.branches import ActivePath, Siblings, active_path, branch_switch, siblings_of
from jxai_app.store.common import LEASE_SECONDS
from jxai_app.store.conversation import (
    conversation_create,
    conversation_delete,
    conversation_get,
    conversation_by_id,
    conversation_list,
    conversation_page,
    conversation_rename,
    database_ping,
    message_by_id,
    message_list,
)
from jxai_app.store.feedback import feedback_set
from jxai_app.store.instructions import instructions_get, instructions_set, system_prompt_for
from jxai_app.store.recorder import TurnRecorder
from jxai_app.store.recovery import Recovered, lease_lapsed, leases_renew, strays_drop, turn_abandon, turns_lapsed
from jxai_app.store.search import conversation_search, message_search
from jxai_app.store.attachments import (
    attachment_bytes,
    attachment_dict,
    attachment_get,
    attachment_upload,
    attachments_sweep,
    storage_used,
)
from jxai_app.store.turn import TurnStart, answer_regenerate, message_resend, message_send, turn_cancel
from jxai_app.store.usage import (
    context_tokens,
    context_warning,
    estimate_tokens,
    round_usage,
    usage_estimate,
    usage_from,
)
from jxai_app.store.wire import conversations_export, messages_to_wire, to_messages

__all__ = [
    "ActivePath", "attachment_bytes", "attachment_dict", "attachment_get", "attachment_upload", "attachments_sweep",
    "message_resend", "storage_used", "Decided", "LEASE_SECONDS", "Recovered", "Siblings", "TurnRecorder", "TurnStart", "active_path",
    "answer_regenerate", "approval_decide", "approvals_expire", "approvals_stop", "branch_switch", "siblings_of",
    "context_tokens", "context_warning",
    "conversation_by_id", "conversation_create", "database_ping", "conversation_delete", "conversation_get", "conversation_list", "conversation_page",
    "conversation_rename", "conversation_search", "conversations_export", "estimate_tokens", "feedback_set",
    "instructions_get", "instructions_set", "message_search", "system_prompt_for", "lease_lapsed", "leases_renew",
    "message_by_id", "message_list", "message_send", "messages_to_wire", "round_usage", "strays_drop", "to_messages",
    "turn_abandon", "turn_cancel", "turns_lapsed", "usage_estimate", "usage_from",
]
