"""Django admin: conversations for staff review, API tokens, tool policies, user limits,
per-user usage, group entitlements (inline on the group page) with each user's effective
entitlements page, and the registered-tools page (docs/architecture.md "Admin"; who sees what:
docs/security.md, threats 1b, 2, 7a, 7b).

Message content (the messages and calls inline, the transcript page, the export action,
search over message text, and titles, which are made from the first user message) needs
the ``jxai_app.view_conversation`` permission itself: a staff member who may only *change*
conversations sees their metadata, never what was said. Conversations are created by the
chat, never in admin. Every value is rendered through Django's auto-escaping
(``format_html`` / templates), never marked safe.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.views.main import ChangeList
from django.contrib.admin.utils import unquote
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from jxai_app import conf
from jxai_app.policy import audit, ratelimit, tokens, usage_report
from jxai_app.policy.entitlements import LIMITS, entitlements_for
from jxai_app.core.errors import ConfigurationError, ProblemError
from jxai_app.models import (
    ApiToken, Conversation, ErasureRecord, FeedbackRating, GroupEntitlements, McpServer, Message, MessageFeedback,
    Note, ShareLink, SignInEvent, SsoIdentity, ToolPolicy, UsageLedger, UserLimits, UserSettings,
)
from jxai_app.store import active_path, conversations_export
from jxai_app.store.feedback import feedback_of
from jxai_app.store.shares import shares_revoke
from jxai_app.store.wire import with_tool_calls
from jxai_app.tools import mcp as mcp_tools, policy as toolpolicy
from jxai_app.tools.registry import builtin_tool_names, get_tool_registry
from jxai_app.web.charts import series_colours, stacked_bars
from jxai_app.web.clientip import client_ip
from jxai_app.web.erasure import erase_account
from jxai_app.yourdata import export_response

CONTENT_PERMISSION = "jxai_app.view_conversation"
"""The permission that shows what was said in conversations."""
ERASE_PERMISSION = "jxai_app.erase_user_data"
"""The permission of admin's "Erase user data" (docs/data.md "Erasure")."""


def can_read_content(request: HttpRequest) -> bool:
    """True for an active staff user holding :data:`CONTENT_PERMISSION`."""
    user = request.user
    return bool(user.is_active and user.is_staff and user.has_perm(CONTENT_PERMISSION))


class DeclaredFiltersChangeList(ChangeList):
    """A list page that filters only through the filters its admin declares (``list_filter``,
    ``date_hierarchy``) and the search box: any other lookup in the query string
    (``?title__startswith=…``, ``?last_error__icontains=…``, ``?title__regex=(``) is refused
    with a 400 before a query runs, so a field nobody may filter by, content included, is
    never an oracle (docs/security.md, "IDOR through admin").

    Django's own ``lookup_allowed`` accepts any lookup on a model's own fields; here each
    declared filter takes its parameters out first (Django's filter classes), and whatever
    is left, except the two bounds ``date_hierarchy`` makes of its year/month/day, is refused.

    Raises:
        DisallowedModelAdminLookup: an undeclared lookup (a ``SuspiciousOperation``: 400).
    """

    def get_filters(self, request: HttpRequest) -> Any:
        specs, has_filters, remaining, may_have_duplicates, has_active_filters = super().get_filters(request)
        made = {f"{self.date_hierarchy}__gte", f"{self.date_hierarchy}__lt"} if self.date_hierarchy else set()
        undeclared = sorted(set(remaining) - made)
        if undeclared:
            raise DisallowedModelAdminLookup(f"Filtering by {', '.join(undeclared)} is not allowed")
        return specs, has_filters, remaining, may_have_duplicates, has_active_filters


class DeclaredFiltersOnly(admin.ModelAdmin):
    """Every jxai admin list page uses :class:`DeclaredFiltersChangeList`."""

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return DeclaredFiltersChangeList


def pretty_json(text: Any) -> str:
    """``text`` (a JSON string or a JSON value) pretty-printed; unparseable text unchanged."""
    if isinstance(text, str):
        try:
            text = json.loads(text)
        except ValueError:
            return text
    return json.dumps(text, indent=2, ensure_ascii=False)


class ReadOnlyAdmin(DeclaredFiltersOnly):
    """A model admin whose rows nobody adds, changes or deletes in admin (what the app writes)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessageInline(admin.TabularInline):
    """The transcript inside the conversation page, read-only."""

    model = Message
    extra = 0
    can_delete = False
    show_change_link = False
    ordering = ("position",)
    classes = ("jxai-transcript",)  # long content wraps inside the page (static/jxai_app/admin.css, on every admin page)
    fields = ("position", "parent", "role", "content", "reasoning_content", "calls", "feedback_given", "details")
    readonly_fields = fields
    PAGE_SIZE = 25
    """Messages shown per page of the inline (a conversation with hundreds stays usable;
    ``?messages_page=N`` picks the page, links above the inline)."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return with_tool_calls(super().get_queryset(request)).select_related("feedback")

    @admin.display(description="details")
    def details(self, message: Message) -> str:
        """Status (when not complete), the call it answers, stop reason, usage and time, one a
        line: one column instead of five keeps the message text wide (static/jxai_app/admin.css)."""
        usage = message.usage if isinstance(message.usage, dict) else None
        lines = [
            message.status if message.status != "complete" else "",
            f"answers {message.tool_call_id}" if message.tool_call_id else "",
            f"stop: {message.stop_reason}" if message.stop_reason else "",
            (f"{usage.get('inputTokens')} in / {usage.get('outputTokens')} out"
             + (" (estimated)" if usage.get("estimated") else "")) if usage else "",
            timezone.localtime(message.created_at).strftime("%Y-%m-%d %H:%M:%S"),
        ]
        return format_html_join("", "<div>{}</div>", ((line,) for line in lines if line))

    @admin.display(description="feedback")
    def feedback_given(self, message: Message) -> str:
        """The owner's rating and comment (a method of its own name: ``feedback`` is the
        message's reverse relation, which admin would print as is)."""
        given = feedback_of(message)
        if given is None:
            return ""
        return format_html("<strong>{}</strong>{}", given.get_rating_display(),
                           format_html(": {}", given.comment) if given.comment else "")

    @admin.display(description="tool calls")
    def calls(self, message: Message) -> str:
        return format_html_join(
            "", "<div><code>{}</code> <code>{}</code>({}) → {}</div>",
            ((c.call_id, c.name, c.arguments, (c.approval_state or "pending") if c.finished_at is None
              else pretty_json(c.result)) for c in message.tool_calls.all()),
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_read_content(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessagePage:
    """One page of a conversation's messages in its change page (``?messages_page=N``, from 1;
    out-of-range numbers are clamped)."""

    def __init__(self, request: HttpRequest, conversation: Conversation) -> None:
        size = MessageInline.PAGE_SIZE
        self.total = conversation.messages.count()
        self.pages = max(1, -(-self.total // size))
        try:
            asked = int(request.GET.get("messages_page", "1"))
        except ValueError:
            asked = 1
        self.number = min(max(1, asked), self.pages)
        self.start = (self.number - 1) * size
        self.stop = min(self.total, self.start + size)
        self.ids = list(conversation.messages.order_by("position").values_list("pk", flat=True)[self.start:self.stop])

    def links(self) -> list[dict[str, Any]]:
        """``[{"number", "current"}]`` for every page (the template builds the query string)."""
        return [{"number": n, "current": n == self.number} for n in range(1, self.pages + 1)]


class FeedbackFilter(admin.SimpleListFilter):
    """Conversations by the feedback their owner gave on an answer (docs/architecture.md "Admin")."""

    title = "feedback"
    parameter_name = "feedback"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("down", "thumbs down"), ("up", "thumbs up"), ("any", "any feedback"), ("none", "no feedback")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> QuerySet[Conversation]:
        given = MessageFeedback.objects.filter(message__conversation=OuterRef("pk"))
        value = self.value()
        if value in FeedbackRating.values:
            return queryset.filter(Exists(given.filter(rating=value)))
        if value == "any":
            return queryset.filter(Exists(given))
        if value == "none":
            return queryset.exclude(Exists(given))
        return queryset


@admin.register(Conversation)
class ConversationAdmin(DeclaredFiltersOnly):
    """Conversations: metadata for staff, content only with ``view_conversation``."""

    list_display = ("label", "transcript_link", "title", "owner", "model", "state", "message_count",
                    "feedback_summary", "updated")
    """What fits the ~630 px a 1280 px window leaves the list (docs/architecture.md "Admin"): the
    status with the temporary and legal-hold marks in one column, the day of the last change;
    tokens, the context warning and the times are on the conversation's page. With 14 columns
    the titles wrapped a word a line and the last columns were past the right edge."""
    list_display_links = ("label",)
    list_filter = (("owner", admin.RelatedOnlyFieldListFilter), "model", "status", "temporary", FeedbackFilter, "legal_hold",
                   "created_at", "updated_at")
    list_select_related = ("owner",)
    date_hierarchy = "created_at"
    search_fields = ("owner__username",)
    fields = ("id", "owner", "title", "model", "status", "temporary", "last_error", "last_problem", "token_count",
              "context_warning", "turn_id", "turn_heartbeat", "legal_hold", "created_at", "updated_at")
    readonly_fields = tuple(f for f in fields if f not in ("title", "legal_hold"))
    CONTENT_FIELDS = ("title", "last_error", "last_problem")
    """Fields that may quote what was said (the title is the first user message; a provider
    error may echo the prompt): shown only with the content permission."""
    actions = ("export_openai_json", "hold", "release_hold")
    change_form_template = "admin/jxai_app/conversation/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        rated = "messages__feedback"
        return super().get_queryset(request).annotate(
            message_count=Count("messages", distinct=True),
            thumbs_up=Count(rated, filter=Q(messages__feedback__rating=FeedbackRating.UP), distinct=True),
            thumbs_down=Count(rated, filter=Q(messages__feedback__rating=FeedbackRating.DOWN), distinct=True))

    def get_search_fields(self, request: HttpRequest) -> tuple[str, ...]:
        if can_read_content(request):
            return ("title", "messages__content", "owner__username")
        return ("owner__username",)  # searching titles would be an oracle on content

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        shown = tuple(self.fields)
        return shown if can_read_content(request) else tuple(f for f in shown if f not in self.CONTENT_FIELDS)

    @admin.display(description="conversation", ordering="created_at")
    def label(self, conversation: Conversation) -> str:
        return f"{conversation.pk}"[:8]

    def get_inlines(self, request: HttpRequest, obj: Any) -> list[type[admin.options.InlineModelAdmin]]:
        return [MessageInline] if obj is not None and can_read_content(request) else []

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_read_content_permission(self, request: HttpRequest) -> bool:
        """Gate of the export action (``allowed_permissions = ("read_content",)``)."""
        return can_read_content(request)

    @admin.display(description="status", ordering="status")
    def state(self, conversation: Conversation) -> str:
        """``idle``, ``streaming`` …, then `` · temporary`` and `` · on hold`` when they apply."""
        marks = [conversation.status, "temporary" if conversation.temporary else "",
                 "on hold" if conversation.legal_hold else ""]
        return " · ".join(mark for mark in marks if mark)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, conversation: Conversation) -> str:
        return f"{timezone.localdate(conversation.updated_at):%Y-%m-%d}"

    @admin.display(description="messages", ordering="message_count")
    def message_count(self, conversation: Conversation) -> int:
        return int(getattr(conversation, "message_count", 0))

    @admin.display(description="feedback", ordering="thumbs_down")
    def feedback_summary(self, conversation: Conversation) -> str:
        """``"2 down · 1 up"`` (only the kinds given; ``""`` for none)."""
        counts = ((getattr(conversation, "thumbs_down", 0), "down"), (getattr(conversation, "thumbs_up", 0), "up"))
        return " · ".join(f"{count} {kind}" for count, kind in counts if count)

    @admin.display(description="transcript")
    def transcript_link(self, conversation: Conversation) -> str:
        url = reverse("admin:jxai_app_conversation_transcript", args=[conversation.pk])
        return format_html('<a href="{}">transcript</a>', url)

    def get_list_display(self, request: HttpRequest) -> tuple[str, ...]:
        shown = tuple(self.list_display)
        return shown if can_read_content(request) else tuple(f for f in shown
                                                             if f not in ("transcript_link", "title"))

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {**(extra_context or {}), "can_read_content": can_read_content(request)}
        conversation = self.get_object(request, object_id)
        if conversation is not None and can_read_content(request):
            extra["message_page"] = MessagePage(request, conversation)
        return super().change_view(request, object_id, form_url, extra)

    def get_formset_kwargs(self, request: HttpRequest, obj: Any, inline: Any, prefix: str) -> dict[str, Any]:
        """The messages inline holds one :class:`MessagePage` of the conversation, not all of it."""
        kwargs: dict[str, Any] = super().get_formset_kwargs(request, obj, inline, prefix)
        if isinstance(inline, MessageInline) and obj is not None:
            kwargs["queryset"] = kwargs["queryset"].filter(pk__in=MessagePage(request, obj).ids)
        return kwargs

    def get_urls(self) -> list[URLPattern]:
        transcript = path("<uuid:object_id>/transcript/", self.admin_site.admin_view(self.transcript_view),
                          name="jxai_app_conversation_transcript")
        return [transcript, *super().get_urls()]

    def transcript_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A readable, escaped transcript of the active path (docs/store.md "Branches"): every
        message, reasoning, and each call with its arguments and result pretty-printed."""
        if not can_read_content(request):
            raise PermissionDenied
        conversation = get_object_or_404(Conversation.objects.select_related("owner"), pk=object_id)
        entries = [
            {"message": m, "feedback": feedback_of(m),
             "calls": [{"call": c, "arguments": pretty_json(c.arguments),
                        "result": None if c.finished_at is None else pretty_json(c.result)}
                       for c in m.tool_calls.all()]}
            for m in active_path(conversation).messages
        ]
        total = conversation.messages.count()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": f"Transcript: {conversation.title or conversation.pk}",
            "conversation": conversation,
            "entries": entries, "original": conversation,
            "total_messages": total, "other_branches": total - len(entries),
        }
        return TemplateResponse(request, "admin/jxai_app/conversation/transcript.html", context)

    @admin.action(description="Export selected conversations as OpenAI wire JSON",
                  permissions=("read_content",))
    def export_openai_json(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> HttpResponse:
        documents = conversations_export(queryset.select_related("owner").order_by("created_at"))
        stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
        return HttpResponse(
            json.dumps(documents, ensure_ascii=False, indent=2), content_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="jxai-conversations-{stamp}.json"'},
        )


    @admin.action(description="Place under legal hold (never purged or erased)", permissions=("change",))
    def hold(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> None:
        count = queryset.update(legal_hold=True)
        self.message_user(request, f"{count} conversation(s) placed under legal hold.", messages.SUCCESS)

    @admin.action(description="Release the legal hold", permissions=("change",))
    def release_hold(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> None:
        count = queryset.update(legal_hold=False)
        self.message_user(request, f"{count} conversation(s) released from legal hold.", messages.SUCCESS)


@admin.register(ApiToken)
class ApiTokenAdmin(DeclaredFiltersOnly):
    """API tokens: the plaintext is shown once, on the page that follows creation; revoking
    (the list action) is final, a revoked token never authenticates again."""

    list_display = ("name", "user", "prefix", "state", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at", "created_at")
    search_fields = ("name", "user__username", "prefix")
    raw_id_fields = ("user",)
    actions = ("revoke",)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """The owner must be a user the staff member may issue a token for
        (:func:`jxai_app.policy.tokens.token_owners_for`); another one is an invalid choice."""
        if db_field.name == "user":
            kwargs["queryset"] = tokens.token_owners_for(request.user, staff_for_users=conf.staff_tokens_for_users())
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return ["user", "name"]
        return ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [] if obj is None else ["user", "prefix", "created_at", "last_used_at", "revoked_at"]

    @admin.display(description="state", boolean=False)
    def state(self, token: ApiToken) -> str:
        return "active" if token.is_active else "revoked"

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if not change:
            request._jxai_token_plaintext = obj.set_new_secret()  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)
        if not change:
            audit.record(SignInEvent.TOKEN_ISSUED, user=obj.user, actor=request.user.get_username(),
                         ip=client_ip(request), detail=f"{obj.name} ({obj.prefix}…) in admin")

    def response_add(self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None) -> HttpResponse:
        plaintext = getattr(request, "_jxai_token_plaintext", None)
        if plaintext is None:
            return super().response_add(request, obj, post_url_continue)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "token": obj,
                   "plaintext": plaintext, "title": "API token created"}
        response = TemplateResponse(request, "admin/jxai_app/apitoken/issued.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected tokens", permissions=("change",))
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)


@admin.register(ShareLink)
class ShareLinkAdmin(ReadOnlyAdmin):
    """Every share link with its owner, scope, dates and view count; staff revoke them with
    the list action (docs/data.md "Share links"). Neither the snapshot nor the title (made
    from the first user message) is shown: they are content (docs/security.md, threat 1b)."""

    list_display = ("label", "owner", "conversation_label", "scope", "state", "created", "view_count")
    """Ids cut to their first 8 characters, the expiry in the state, the day it was shared, and
    the times only on the link's page: with two whole UUIDs and four times the table was
    1,500 px wide in the ~630 px a 1280 px window leaves it (docs/architecture.md "Admin")."""
    list_display_links = ("label",)
    list_filter = ("scope", "revoked_at", "created_at", "expires_at")
    list_select_related = ("owner",)
    search_fields = ("owner__username",)
    fields = ("id", "owner", "conversation", "scope", "groups", "created_at", "snapshot_at", "expires_at",
              "revoked_at", "view_count")
    readonly_fields = fields
    actions = ("revoke",)

    @admin.display(description="share link", ordering="created_at")
    def label(self, link: ShareLink) -> str:
        return f"{link.pk}"[:8]

    @admin.display(description="conversation", ordering="conversation")
    def conversation_label(self, link: ShareLink) -> str:
        return "deleted" if link.conversation_id is None else f"{link.conversation_id}"[:8]

    @admin.display(description="shared", ordering="created_at")
    def created(self, link: ShareLink) -> str:
        return f"{timezone.localdate(link.created_at):%Y-%m-%d}"

    @admin.display(description="state", ordering="expires_at")
    def state(self, link: ShareLink) -> str:
        """``revoked``, ``expired``, ``live`` (never expires) or ``live until YYYY-MM-DD``."""
        if link.revoked_at is not None:
            return "revoked"
        if link.expires_at is None:
            return "live"
        return "expired" if link.expires_at <= timezone.now() else f"live until {timezone.localdate(link.expires_at):%Y-%m-%d}"

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("jxai_app.change_sharelink")

    @admin.action(description="Revoke selected share links", permissions=("change",))
    def revoke(self, request: HttpRequest, queryset: QuerySet[ShareLink]) -> None:
        count = shares_revoke(queryset.values_list("pk", flat=True))
        self.message_user(request, f"Revoked {count} share link(s).", messages.SUCCESS)


@admin.register(ToolPolicy)
class ToolPolicyAdmin(DeclaredFiltersOnly):
    """Per-tool policy, plus the page listing every registered tool."""

    list_display = ("tool_name", "enabled", "groups", "max_calls_per_turn", "timeout_seconds", "requires_approval")
    list_filter = ("enabled", "requires_approval")
    search_fields = ("tool_name",)
    filter_horizontal = ("allowed_groups", "approval_groups")
    change_list_template = "admin/jxai_app/toolpolicy/change_list.html"

    @admin.display(description="allowed groups")
    def groups(self, policy: ToolPolicy) -> str:
        return ", ".join(g.name for g in policy.allowed_groups.all()) or "every user"

    def get_urls(self) -> list[URLPattern]:
        tools = path("registered/", self.admin_site.admin_view(self.registered_tools_view),
                     name="jxai_app_registered_tools")
        refresh = path("registered/refresh-mcp/", self.admin_site.admin_view(self.refresh_mcp_view),
                       name="jxai_app_refresh_mcp")
        return [tools, refresh, *super().get_urls()]

    def registered_tools_view(self, request: HttpRequest) -> HttpResponse:
        """Every tool of the registry, grouped by source (built-in, a tool module, an MCP
        server): name, description, pretty parameters schema, strict, llm_strict, effective
        timeout, and who may use it — the rule of :mod:`jxai_app.tools.policy`, the same
        one that decides what a turn offers. Above it, each MCP server's health as this
        worker process sees it (docs/mcp.md "Health in admin")."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        policies = {p.tool_name: p for p in ToolPolicy.objects.all()}
        rules = toolpolicy.load_rules()
        rows, error = [], ""
        try:
            definitions = get_tool_registry().list()
        except Exception as exc:  # a misconfigured tool module must not break admin
            definitions, error = [], f"The tool registry could not be loaded: {exc}"
        servers = mcp_tools.server_configs()
        manager = mcp_tools.current()
        mcp_sources = manager.sources() if manager is not None else {}
        health = {h.name: h for h in manager.health()} if manager is not None else {}
        builtin = builtin_tool_names()
        rank = {config.name: index for index, config in enumerate(servers, start=2)}
        for definition in definitions:
            rule = toolpolicy.rule_for(definition.name, rules)
            server = mcp_sources.get(definition.name)
            source = (f"MCP server {server}" if server is not None
                      else "built-in" if definition.name in builtin else "tool module")
            rows.append({"tool": definition, "schema": pretty_json(definition.parameters),
                         "policy": policies.get(definition.name), "who": toolpolicy.who_may_use(definition.name, rules),
                         "timeout": toolpolicy.effective_timeout(definition, rule),
                         "approval": rule.describe_approval(), "source": source,
                         "rank": rank.get(server, len(rank) + 2) if server is not None else int(source != "built-in")})
        rows.sort(key=lambda row: row["rank"])  # stable: registry order inside each source
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Registered tools",
                   "rows": rows, "error": error,
                   "servers": [{"config": config, "health": health.get(config.name),
                                "since": _from_timestamp(getattr(health.get(config.name), "connected_since", None))}
                               for config in servers],
                   "worker_has_sessions": manager is not None,
                   "unknown_policies": sorted(set(policies) - {d.name for d in definitions})}
        return TemplateResponse(request, "admin/jxai_app/toolpolicy/registered.html", context)

    def refresh_mcp_view(self, request: HttpRequest) -> HttpResponse:
        """POST: re-read the MCP servers' configuration and list their tools again
        (reconnecting those that are down) in the worker process serving this request."""
        if request.method != "POST" or not self.has_view_permission(request):
            raise PermissionDenied
        # A new server's first attempt, then a listing or a reconnection: each within its timeout.
        if mcp_tools.refresh_from_thread(timeout=2 * max([c.timeout for c in mcp_tools.server_configs()] + [5.0])):
            self.message_user(request, "MCP servers refreshed in this worker process.", messages.SUCCESS)
        else:
            self.message_user(request, "This worker process has not started its MCP sessions yet (they start "
                                       "with its first request or turn), or a server did not answer in time.",
                              messages.WARNING)
        return HttpResponseRedirect(reverse("admin:jxai_app_registered_tools"))


@admin.register(McpServer)
class McpServerAdmin(DeclaredFiltersOnly):
    """MCP servers whose tools the assistant may use (docs/mcp.md). No secret is stored here:
    environment variable *names* only. A change reaches each worker at its next turn. Only
    superusers add, change or delete servers: a stdio server is a command each worker runs
    (docs/security.md "MCP servers"); staff with the view permission see them."""

    list_display = ("name", "enabled", "transport", "target", "timeout_seconds", "pass_user_id")
    list_filter = ("enabled", "transport")
    search_fields = ("name",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)  # a stdio server is a command every worker runs

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    @admin.display(description="command or URL")
    def target(self, server: McpServer) -> str:
        return server.url if server.transport == McpServer.Transport.STREAMABLE_HTTP else server.command


@admin.register(UserSettings)
class UserSettingsAdmin(ReadOnlyAdmin):
    """Each user's custom instructions (added to the system prompt of their new turns),
    read-only: the user edits them in the chat page's settings dialog."""

    list_display = ("user", "instructions_excerpt", "updated_at")
    list_select_related = ("user",)
    search_fields = ("user__username",)
    fields = ("user", "custom_instructions", "updated_at")
    readonly_fields = fields

    @admin.display(description="custom instructions")
    def instructions_excerpt(self, row: UserSettings) -> str:
        text = row.custom_instructions
        return text if len(text) <= 80 else text[:79] + "…"


@admin.register(Note)
class NoteAdmin(ReadOnlyAdmin):
    """Users' notes (what the approval demonstration tool ``save_note`` writes; docs/approval.md):
    content, so only staff who may read conversations see them; read-only."""

    list_display = ("owner", "created_at", "text")
    list_filter = ("created_at",)
    readonly_fields = ("owner", "text", "created_at")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_read_content(request)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return can_read_content(request)


@admin.register(SsoIdentity)
class SsoIdentityAdmin(DeclaredFiltersOnly):
    """Links between accounts at the identity provider and users (docs/sso.md "Accounts"):
    adding one lets an existing local account be signed in to through the provider."""

    list_display = ("user", "subject", "issuer", "created_at", "last_sign_in_at")
    search_fields = ("user__username", "subject")
    raw_id_fields = ("user",)
    readonly_fields = ("created_at", "last_sign_in_at")


@admin.register(SignInEvent)
class SignInEventAdmin(ReadOnlyAdmin):
    """The sign-in audit (docs/sso.md "Audit"), read-only: what the app recorded."""

    list_display = ("created_at", "kind", "actor", "user", "ip_address", "detail")
    list_filter = ("kind", "created_at")
    list_select_related = ("user",)
    search_fields = ("actor", "user__username", "ip_address", "detail")
    readonly_fields = ("created_at", "kind", "actor", "user", "ip_address", "detail")


@admin.register(UserLimits)
class UserLimitsAdmin(DeclaredFiltersOnly):
    """Per-user overrides of the rate limit and the daily token and cost quotas: empty = the
    settings' default, 0 = unlimited (the help text of each field says so on the form)."""

    list_display = ("user", "turns_per_minute", "tokens_per_day", "cost_per_day")
    search_fields = ("user__username",)
    raw_id_fields = ("user",)


def _tokens(value: float) -> str:
    return f"{value:,.0f}"


def _usd(value: float) -> str:
    return f"${value:,.4f}"


@admin.register(UsageLedger)
class UsageLedgerAdmin(ReadOnlyAdmin):
    """Per-user usage by model and UTC day, read-only, with totals over the filtered rows,
    charts of the last 30 days of those rows (tokens and cost per day by model and by user,
    the top users, the error rate; inline SVG drawn on the server, :mod:`jxai_app.web.charts`)
    and a CSV export of them (docs/operations.md "Usage in admin"). Estimated tokens (the
    provider sent no usage) and their cost are columns of their own."""

    list_display = ("day", "user", "model", "input_tokens", "output_tokens", "total", "estimated", "cost",
                    "requests", "failed_requests")
    list_filter = (("user", admin.RelatedOnlyFieldListFilter), "model", "day")
    list_select_related = ("user",)
    date_hierarchy = "day"
    search_fields = ("user__username",)
    change_list_template = "admin/jxai_app/usageledger/change_list.html"

    @admin.display(description="total tokens", ordering=F("input_tokens") + F("output_tokens"))
    def total(self, row: UsageLedger) -> int:
        return row.total_tokens

    @admin.display(description="of which estimated", ordering="estimated_tokens")
    def estimated(self, row: UsageLedger) -> str:
        return f"{row.estimated_tokens} (estimated)" if row.estimated_tokens else "0"

    @admin.display(description="cost (USD)", ordering="cost_usd")
    def cost(self, row: UsageLedger) -> str:
        text = _usd(float(row.cost_usd))
        return f"{text} ({_usd(float(row.estimated_cost_usd))} estimated)" if row.estimated_cost_usd else text


    def get_urls(self) -> list[URLPattern]:
        export = path("export.csv", self.admin_site.admin_view(self.export_csv_view),
                      name="jxai_app_usageledger_export")
        return [export, *super().get_urls()]

    def export_csv_view(self, request: HttpRequest) -> HttpResponse:
        """The rows the changelist shows with the same filters (every page), as CSV."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        rows = self.get_changelist_instance(request).queryset
        stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
        return HttpResponse(usage_report.csv_text(rows.iterator()), content_type="text/csv; charset=utf-8",
                            headers={"Content-Disposition": f'attachment; filename="jxai-usage-{stamp}.csv"'})

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", None)
        if isinstance(context, dict) and "cl" in context:
            rows = context["cl"].queryset
            totals = rows.aggregate(
                input_tokens=Sum("input_tokens"), output_tokens=Sum("output_tokens"),
                estimated_tokens=Sum("estimated_tokens"), requests=Sum("requests"),
                failed_requests=Sum("failed_requests"), cost_usd=Sum("cost_usd"),
                estimated_cost_usd=Sum("estimated_cost_usd"))
            totals = {key: value or 0 for key, value in totals.items()}
            totals["total_tokens"] = totals["input_tokens"] + totals["output_tokens"]
            context["totals"] = totals
            context["charts"] = self._charts(rows)
            context["top_users"] = usage_report.top_users(rows, today=ratelimit.now().date())
            context["export_query"] = request.GET.urlencode()
        return response

    @staticmethod
    def _charts(rows: QuerySet[UsageLedger]) -> list[Any]:
        today = ratelimit.now().date()  # the ledger's own clock: its days are UTC days
        measures = (("tokens", "Tokens", _tokens), ("cost", "Cost (USD)", _usd))
        drawn: dict[tuple[str, str], Any] = {}
        for group in ("model", "user"):  # one colour per model (per user) in both of its charts
            series = {measure: usage_report.daily_by(rows, group=group, measure=measure, today=today)
                      for measure, _, _ in measures}
            colours = series_colours(label for data in series.values() for label in data.series)
            for measure, label, unit in measures:
                drawn[measure, group] = stacked_bars(f"{measure}-by-{group}", f"{label} per day by {group}, last 30 days",
                                                     series[measure], unit=unit, colours=colours)
        errors = usage_report.error_rate(rows, today=today)
        return [drawn[measure, group] for measure, _, _ in measures for group in ("model", "user")] + [
            stacked_bars("error-rate", "Provider requests that failed, % per day, last 30 days", errors,
                         unit=lambda v: f"{v:.1f} %", colours=series_colours(errors.series))]


def effective_entitlements(user: Any) -> dict[str, Any]:
    """The user entitlements page's data: ``models`` (the allowed configured ones, with the
    user's default), ``models_source``, ``limits`` (:meth:`~jxai_app.policy.entitlements.Entitlements.limit_rows`), ``tools`` (name,
    description, whether each call waits for approval) and ``groups`` (the user's group names),
    plus ``error`` when the model or tool configuration cannot be loaded."""
    granted = entitlements_for(user)
    error, models = "", []
    try:
        models = granted.listing(conf.get_model_registry())
    except ConfigurationError as exc:
        error = f"The model configuration is unusable: {exc}"
    try:
        view = toolpolicy.tool_view_for(user, get_tool_registry())
        tools = [{"name": d.name, "description": d.description, "approval": view.requires_approval(d.name)}
                 for d in view.list()]
    except Exception as exc:  # a misconfigured tool module must not break admin
        tools, error = [], f"The tool registry could not be loaded: {exc}"
    return {"models": models, "models_source": granted.sources["models"], "limits": granted.limit_rows(),
            "tools": tools, "groups": list(user.groups.order_by("name").values_list("name", flat=True)),
            "error": error}


class GroupEntitlementsForm(forms.ModelForm):
    """The inline's form: the model aliases as boxes to tick (the configured ones, and any
    stored one no longer configured, marked so)."""

    model_aliases = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Models",
        help_text="The models members may use; none ticked = every configured model.")

    class Meta:
        model = GroupEntitlements
        fields = ("model_aliases", *LIMITS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            configured = conf.get_model_registry().aliases()
        except ConfigurationError:
            configured = []
        stored = [alias for alias in (self.instance.model_aliases or []) if alias not in configured]
        self.fields["model_aliases"].choices = [*((a, a) for a in configured),
                                                *((a, f"{a} (not configured)") for a in stored)]


class GroupEntitlementsInline(admin.StackedInline):
    """A group's entitlements on Django's group page (docs/security.md "Group entitlements")."""

    model = GroupEntitlements
    form = GroupEntitlementsForm
    max_num = 1
    can_delete = True
    verbose_name_plural = "jxai entitlements"


if admin.site.is_registered(Group) and type(admin.site.get_model_admin(Group)) is GroupAdmin:
    # Only Django's own group admin is extended; a project's custom one is left alone.
    class JxaiGroupAdmin(GroupAdmin):
        """Django's group admin with the group's jxai entitlements inline."""

        inlines = (*GroupAdmin.inlines, GroupEntitlementsInline)

    admin.site.unregister(Group)
    admin.site.register(Group, JxaiGroupAdmin)


def _from_timestamp(seconds: float | None) -> datetime.datetime | None:
    return None if seconds is None else datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)


def _usage_link(user: Any) -> str:
    url = reverse("admin:jxai_app_usageledger_changelist") + f"?user__id__exact={user.pk}"
    return format_html('<a href="{}">usage by day</a>', url)


_user_model = get_user_model()
if admin.site.is_registered(_user_model) and type(admin.site.get_model_admin(_user_model)) is UserAdmin:
    # Only Django's own user admin is extended; a project's custom one is left alone.
    class JxaiUserAdmin(DeclaredFiltersOnly, UserAdmin):
        """Django's user admin with a link to the user's jxai usage, filtering only through
        its declared filters (``?password__startswith=`` would read password hashes)."""

        list_display = (*UserAdmin.list_display, "jxai_usage")
        readonly_fields = (*UserAdmin.readonly_fields, "jxai_usage", "jxai_entitlements")
        actions = ("export_user_data", "erase_user_data")

        def has_read_content_permission(self, request: HttpRequest) -> bool:
            return can_read_content(request)

        def has_erase_permission(self, request: HttpRequest) -> bool:
            return bool(request.user.is_active and request.user.is_staff and request.user.has_perm(ERASE_PERMISSION))

        @admin.action(description="Export the user's data (ZIP; one user)", permissions=("read_content",))
        def export_user_data(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
            """The user's archive exactly as their "Download my data" (docs/data.md "Export format")."""
            if queryset.count() != 1:
                self.message_user(request, "Select exactly one user to export.", messages.WARNING)
                return None
            return export_response(queryset.get())

        @admin.action(description="Erase user data (account and content; usage kept anonymised)",
                      permissions=("erase",))
        def erase_user_data(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
            """After a confirmation page, erase each selected user (docs/data.md "Erasure"),
            recorded with the staff member who ran it; one refused (running turn, legal hold,
            oneself) is reported and the others go on."""
            users = list(queryset.order_by("pk"))
            if request.POST.get("confirm") != "yes":
                context = {**self.admin_site.each_context(request), "opts": self.opts, "users": users,
                           "title": "Erase user data", "action_checkbox_name": ACTION_CHECKBOX_NAME}
                return TemplateResponse(request, "admin/jxai_app/erase_confirm.html", context)
            for user in users:
                if user.pk == request.user.pk:
                    self.message_user(request, "You cannot erase your own account here.", messages.ERROR)
                    continue
                name = user.get_username()
                try:
                    erase_account(user, by=request.user)
                except ProblemError as refused:
                    self.message_user(request, f"{name}: {refused}", messages.ERROR)
                    continue
                self.message_user(request, f"{name}: data erased.", messages.SUCCESS)
            return None

        def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
            fieldsets = super().get_fieldsets(request, obj)
            return fieldsets if obj is None else (*fieldsets, ("jxai", {"fields": ("jxai_usage", "jxai_entitlements")}))

        @admin.display(description="jxai usage")
        def jxai_usage(self, user: Any) -> str:
            return _usage_link(user)

        @admin.display(description="jxai entitlements")
        def jxai_entitlements(self, user: Any) -> str:
            url = reverse("admin:jxai_app_user_entitlements", args=[user.pk])
            return format_html('<a href="{}">effective models, limits and tools</a>', url)

        def get_urls(self) -> list[URLPattern]:
            page = path("<path:object_id>/entitlements/", self.admin_site.admin_view(self.entitlements_view),
                        name="jxai_app_user_entitlements")
            return [page, *super().get_urls()]

        def entitlements_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
            """One user's effective models, limits and tools on one page: the rules the turns
            apply (:func:`jxai_app.policy.entitlements.entitlements_for`, and the tool policies'
            :func:`jxai_app.tools.policy.tool_view_for`)."""
            if not self.has_view_or_change_permission(request):  # before the lookup: no oracle of ids
                raise PermissionDenied
            user = self.get_object(request, unquote(object_id))
            if user is None:
                raise Http404("No such user.")
            context = {**self.admin_site.each_context(request), "opts": self.opts, "original": user,
                       "title": f"Entitlements of {user.get_username()}", **effective_entitlements(user)}
            return TemplateResponse(request, "admin/jxai_app/user_entitlements.html", context)

    admin.site.unregister(_user_model)
    admin.site.register(_user_model, JxaiUserAdmin)


@admin.register(ErasureRecord)
class ErasureRecordAdmin(ReadOnlyAdmin):
    """Who erased which user's data and when (docs/data.md "Erasure"), read-only."""

    list_display = ("erased_user_id", "self_service", "erased_by", "erased_at")
    list_filter = ("self_service", "erased_at")
    readonly_fields = ("erased_user_id", "self_service", "erased_by", "erased_at", "removed")
