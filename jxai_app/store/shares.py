"""Share links: a read-only snapshot of a conversation's active path behind a random token
(docs/data.md "Share links").

- The token is ``secrets.token_urlsafe(32)`` (256 bits); the row keeps only its hex SHA-256,
  so the database (or a backup of it) cannot open a link.
- The snapshot is taken at share time and again only on "Update link": the active path's
  user, assistant and tool messages with the calls and their results; never a system
  message (the custom instructions), never another branch.
- Who may open it is the link's scope: ``signed_in`` (any signed-in user of this
  deployment), ``groups`` (members of the chosen groups) or ``public`` (anyone, only while
  ``JXAI_PUBLIC_SHARES`` is on). The owner may always open their own link.
- A revoked, expired, unknown or out-of-scope token is ``not-found``, the same problem for
  each, so an answer never tells a live link from a dead one.
- "Continue in my chat" copies the snapshot into a new conversation of the viewer's.

Shapes: a snapshot is ``{"model": alias, "messages": [message]}`` where a message is
``{"role", "content", "toolCallId": str | None, "toolCalls": [{"id", "name", "arguments",
"result", "success"}], "stopReason"}`` (docs/data.md "Share links").
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Final

from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from jxai_app import conf
from jxai_app.core.errors import ProblemError
from jxai_app.core.problems import problem_error
from jxai_app.models import Conversation, Message, MessageRole, MessageStatus, ShareLink, ShareScope, ToolCall
from jxai_app.store.branches import active_path
from jxai_app.store.common import get_owned, invalid, parse_id
from jxai_app.store.conversation import conversation_create

__all__ = ["EXPIRY_DAYS_MAX", "share_continue", "share_create", "share_hash", "share_list", "share_open",
           "share_revoke", "share_update", "shares_revoke", "snapshot_of"]

TOKEN_BYTES: Final[int] = 32
"""Random bytes of a share token (256 bits; ``secrets.token_urlsafe``)."""
EXPIRY_DAYS_MAX: Final[int] = 365
"""The longest expiry a link may be given, in days."""


def _share_not_found() -> ProblemError:
    return problem_error("not-found", "This share link does not exist.")


def share_hash(token: str) -> str:
    """Hex SHA-256 of ``token`` (UTF-8): the value stored in ``ShareLink.token_hash``."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def snapshot_of(conversation: Conversation) -> dict[str, Any]:
    """The conversation's active path as a share snapshot (module docstring's shape): system
    messages and a running turn's placeholder left out. Three queries."""
    messages = []
    for message in active_path(conversation).messages:
        if message.role == MessageRole.SYSTEM or message.status != MessageStatus.COMPLETE:
            continue
        calls = [{"id": c.call_id, "name": c.name, "arguments": c.arguments, "result": c.result,
                  "success": c.success} for c in message.tool_calls.all()]
        messages.append({"role": message.role, "content": message.content,
                         "toolCallId": message.tool_call_id or None, "toolCalls": calls,
                         "stopReason": message.stop_reason})
    return {"model": conversation.model, "messages": messages}


def _scope(user: Any, scope: Any, group_ids: Any) -> tuple[str, list[Group]]:
    """The checked scope and groups. A user may choose only groups they belong to (a
    superuser any group)."""
    if scope not in ShareScope.values:
        raise invalid(f"'scope' must be one of {', '.join(ShareScope.values)}.")
    if scope == ShareScope.PUBLIC and not conf.public_shares_allowed():
        raise problem_error("forbidden", "Links for anyone are turned off on this server (JXAI_PUBLIC_SHARES).")
    if scope != ShareScope.GROUPS:
        return scope, []
    if not isinstance(group_ids, list) or not group_ids or not all(
            isinstance(g, int) and not isinstance(g, bool) for g in group_ids):
        raise invalid("A link for chosen groups needs 'groups': a non-empty list of group ids.")
    choosable = Group.objects.all() if user.is_superuser else user.groups.all()
    groups = list(choosable.filter(pk__in=group_ids))
    if len(groups) != len(set(group_ids)):
        raise invalid("'groups' names a group you are not a member of.")
    return scope, groups


def _expiry(expires_in_days: Any) -> Any:
    if expires_in_days is None:
        return None
    if not isinstance(expires_in_days, int) or isinstance(expires_in_days, bool) \
            or not 1 <= expires_in_days <= EXPIRY_DAYS_MAX:
        raise invalid(f"'expiresInDays' must be a whole number of days from 1 to {EXPIRY_DAYS_MAX}, or null.")
    return timezone.now() + timedelta(days=expires_in_days)


@transaction.atomic
def share_create(*, user: Any, conversation_id: uuid.UUID | str, scope: str = ShareScope.SIGNED_IN,
                 group_ids: Sequence[int] | None = None,
                 expires_in_days: int | None = None) -> tuple[ShareLink, str]:
    """Share ``user``'s conversation: a new link with a snapshot of its active path.

    Args:
        scope: ``signed_in`` (default), ``groups`` or ``public``.
        group_ids: with ``groups``: ids of groups ``user`` belongs to.
        expires_in_days: 1 … :data:`EXPIRY_DAYS_MAX`, or ``None`` for a link that does not expire.

    Returns:
        ``(link, token)``: the token is returned only here; the row keeps its hash.

    Raises:
        ProblemError: ``not-found`` (missing or foreign conversation), ``invalid-request``
            (scope, groups, expiry), ``forbidden`` (``public`` while ``JXAI_PUBLIC_SHARES`` is off),
            ``conflict`` for a temporary chat (docs/data.md "Temporary chats").
    """
    conversation = get_owned(user, conversation_id)
    if conversation.temporary:
        raise problem_error("conflict", "A temporary chat cannot be shared: it is not kept. "
                            "Share a conversation that is saved to your list.")
    scope, groups = _scope(user, scope, list(group_ids) if group_ids is not None else None)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    link = ShareLink.objects.create(
        owner=user, conversation=conversation, token_hash=share_hash(token), title=conversation.title,
        snapshot=snapshot_of(conversation), scope=scope, snapshot_at=timezone.now(),
        expires_at=_expiry(expires_in_days))
    link.groups.set(groups)
    return link, token


def _owned_link(user: Any, share_id: Any) -> QuerySet[ShareLink]:
    sid = parse_id(share_id)
    if sid is None or user is None or not getattr(user, "is_authenticated", False):
        raise _share_not_found()
    return ShareLink.objects.filter(pk=sid, owner_id=user.pk, revoked_at__isnull=True)


def share_list(*, user: Any) -> list[ShareLink]:
    """``user``'s links that are not revoked, newest first, with their groups (two queries)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return []
    return list(ShareLink.objects.filter(owner_id=user.pk, revoked_at__isnull=True)
                .prefetch_related("groups").order_by("-created_at"))


@transaction.atomic
def share_update(*, user: Any, share_id: uuid.UUID | str) -> ShareLink:
    """"Update link": the snapshot is taken again from the conversation's active path now
    (same token, scope and expiry).

    Raises:
        ProblemError: ``not-found`` for a missing, foreign or revoked link, or when its
            conversation was deleted.
    """
    link = _owned_link(user, share_id).select_for_update().first()
    if link is None or link.conversation_id is None:
        raise _share_not_found()
    conversation = get_owned(user, link.conversation_id)
    link.snapshot, link.title, link.snapshot_at = snapshot_of(conversation), conversation.title, timezone.now()
    link.save(update_fields=["snapshot", "title", "snapshot_at"])
    return link


def share_revoke(*, user: Any, share_id: uuid.UUID | str) -> None:
    """The owner revokes a link: from the next request on it answers ``not-found``.

    Raises:
        ProblemError: ``not-found`` for a missing, foreign or already revoked link.
    """
    if not _owned_link(user, share_id).update(revoked_at=timezone.now()):
        raise _share_not_found()


def shares_revoke(share_ids: Iterable[uuid.UUID]) -> int:
    """Staff revoke links (admin's action; no ownership check: admin's permission is the
    check). Returns how many were live until now."""
    return ShareLink.objects.filter(pk__in=list(share_ids), revoked_at__isnull=True).update(revoked_at=timezone.now())


def _may_open(link: ShareLink, viewer: Any) -> bool:
    signed_in = viewer is not None and getattr(viewer, "is_authenticated", False)
    if signed_in and link.owner_id == viewer.pk:
        return True
    if link.scope == ShareScope.PUBLIC:
        return conf.public_shares_allowed() or signed_in
    if not signed_in:
        return False
    if link.scope == ShareScope.GROUPS:
        return link.groups.filter(pk__in=viewer.groups.values("pk")).exists()
    return True


def _live(token: Any) -> ShareLink | None:
    if not isinstance(token, str) or not token:
        return None
    now = timezone.now()
    return (ShareLink.objects.filter(token_hash=share_hash(token), revoked_at__isnull=True)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).select_related("owner").first())


def share_open(*, token: str, viewer: Any, count: bool = True) -> ShareLink:
    """The link behind ``token`` when ``viewer`` (a user, or an anonymous one) may open it;
    counts the view unless ``count`` is false.

    A link of scope ``public`` whose setting was turned off afterwards is open to signed-in
    users only (as ``signed_in``).

    Raises:
        ProblemError: ``not-found`` alike for an unknown, revoked, expired or out-of-scope token.
    """
    link = _live(token)
    if link is None or not _may_open(link, viewer):
        raise _share_not_found()
    if count:
        ShareLink.objects.filter(pk=link.pk).update(view_count=F("view_count") + 1)
        link.view_count += 1
    return link


@transaction.atomic
def share_continue(*, token: str, viewer: Any, model_for: Callable[[str], str]) -> Conversation:
    """"Continue in my chat": a new conversation of ``viewer``'s holding a copy of the
    snapshot (every message, its calls and their results, as a path from its first message;
    the shared one's title). The view is not counted again.

    Args:
        model_for: the copy's model alias given the shared one's: the caller applies the
            viewer's entitlements (docs/security.md "Group entitlements"), which the store
            does not know.

    Raises:
        ProblemError: as :func:`share_open`; ``invalid-request`` for an anonymous viewer.
    """
    link = share_open(token=token, viewer=viewer, count=False)
    snapshot = link.snapshot if isinstance(link.snapshot, dict) else {}
    conversation = conversation_create(user=viewer, model=model_for(str(snapshot.get("model") or "")),
                                       title=link.title)
    parent: Message | None = None
    for position, item in enumerate(snapshot.get("messages") or []):
        parent = Message.objects.create(
            conversation=conversation, parent=parent, position=position, role=item["role"],
            content=item.get("content") or "", tool_call_id=item.get("toolCallId") or "",
            stop_reason=item.get("stopReason") or "", model=conversation.model if item["role"] == "assistant" else "")
        ToolCall.objects.bulk_create([
            ToolCall(message=parent, position=at, call_id=call["id"], name=call.get("name") or "",
                     arguments=call.get("arguments") or "", result=call.get("result"), success=call.get("success"))
            for at, call in enumerate(item.get("toolCalls") or [])])
    Conversation.objects.filter(pk=conversation.pk).update(active_leaf=parent, updated_at=timezone.now())
    conversation.refresh_from_db()
    return conversation
