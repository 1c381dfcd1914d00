"""Django admin: conversations for staff review, API tokens, tool policies, user limits,
per-user usage, and the registered-tools page (docs/architecture.md "Admin"; who sees what:
docs/security.md, threats 1b, 2, 7a, 7b).

Message content (the messages and calls inline, the transcript page, the export action,
search over message text, and titles, which are made from the first user message) needs
the ``jxai_app.view_conversation`` permission itself: a staff member who may only *change*
conversations sees their metadata, never what was said. Conversations are created by the
chat, never in admin. Every value is rendered through Django's auto-escaping
(``format_html`` / templates), never marked safe.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from jxai_app import conf
from jxai_app.policy import tokens, toolpolicy
from jxai_app.models import ApiToken, Conversation, Message, ToolPolicy, UsageLedger, UserLimits
from jxai_app.store import active_path, conversations_export
from jxai_app.store.wire import with_tool_calls

CONTENT_PERMISSION = "jxai_app.view_conversation"
"""The permission that shows what was said in conversations."""


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


class MessageInline(admin.TabularInline):
    """The transcript inside the conversation page, read-only."""

    model = Message
    extra = 0
    can_delete = False
    show_change_link = False
    ordering = ("position",)
    classes = ("jxai-transcript",)  # long content wraps inside the page (static/jxai_app/admin.css)
    fields = ("position", "parent", "role", "status", "content", "reasoning_content", "tool_call_id",
              "calls", "stop_reason", "usage", "created_at")
    readonly_fields = fields

    class Media:
        css = {"all": ("jxai_app/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return with_tool_calls(super().get_queryset(request))

    @admin.display(description="tool calls")
    def calls(self, message: Message) -> str:
        return format_html_join(
            "", "<div><code>{}</code> <code>{}</code>({}) → {}</div>",
            ((c.call_id, c.name, c.arguments, "pending" if c.finished_at is None else pretty_json(c.result))
             for c in message.tool_calls.all()),
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_read_content(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Conversation)
class ConversationAdmin(DeclaredFiltersOnly):
    """Conversations: metadata for staff, content only with ``view_conversation``."""

    list_display = ("label", "title", "owner", "model", "status", "message_count", "token_count",
                    "context_warning", "created_at", "updated_at", "transcript_link")
    list_display_links = ("label",)
    list_filter = (("owner", admin.RelatedOnlyFieldListFilter), "model", "status", "created_at", "updated_at")
    list_select_related = ("owner",)
    date_hierarchy = "created_at"
    search_fields = ("owner__username",)
    fields = ("id", "owner", "title", "model", "status", "last_error", "last_problem", "token_count",
              "context_warning", "turn_id", "turn_heartbeat", "created_at", "updated_at")
    readonly_fields = tuple(f for f in fields if f != "title")
    CONTENT_FIELDS = ("title", "last_error", "last_problem")
    """Fields that may quote what was said (the title is the first user message; a provider
    error may echo the prompt): shown only with the content permission."""
    actions = ("export_openai_json",)
    change_form_template = "admin/jxai_app/conversation/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        return super().get_queryset(request).annotate(message_count=Count("messages", distinct=True))

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

    @admin.display(description="messages", ordering="message_count")
    def message_count(self, conversation: Conversation) -> int:
        return int(getattr(conversation, "message_count", 0))

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
        return super().change_view(request, object_id, form_url, extra)

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
            {"message": m, "calls": [{"call": c, "arguments": pretty_json(c.arguments),
                                      "result": None if c.finished_at is None else pretty_json(c.result)}
                                     for c in m.tool_calls.all()]}
            for m in active_path(conversation).messages
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": f"Transcript: {conversation.title or conversation.pk}",
            "conversation": conversation,
            "entries": entries, "original": conversation,
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


@admin.register(ToolPolicy)
class ToolPolicyAdmin(DeclaredFiltersOnly):
    """Per-tool policy, plus the page listing every registered tool."""

    list_display = ("tool_name", "enabled", "groups", "max_calls_per_turn", "timeout_seconds")
    list_filter = ("enabled",)
    search_fields = ("tool_name",)
    filter_horizontal = ("allowed_groups",)
    change_list_template = "admin/jxai_app/toolpolicy/change_list.html"

    @admin.display(description="allowed groups")
    def groups(self, policy: ToolPolicy) -> str:
        return ", ".join(g.name for g in policy.allowed_groups.all()) or "every user"

    def get_urls(self) -> list[URLPattern]:
        tools = path("registered/", self.admin_site.admin_view(self.registered_tools_view),
                     name="jxai_app_registered_tools")
        return [tools, *super().get_urls()]

    def registered_tools_view(self, request: HttpRequest) -> HttpResponse:
        """Every tool of the registry: name, description, pretty parameters schema, strict,
        llm_strict, effective timeout, and who may use it — the rule of
        :mod:`jxai_app.policy.toolpolicy`, the same one that decides what a turn offers."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        from jxai_app.conf import get_tool_registry  # settings-driven; loaded on first use

        policies = {p.tool_name: p for p in ToolPolicy.objects.all()}
        rules = toolpolicy.load_rules()
        rows, error = [], ""
        try:
            definitions = get_tool_registry().list()
        except Exception as exc:  # a misconfigured tool module must not break admin
            definitions, error = [], f"The tool registry could not be loaded: {exc}"
        for definition in definitions:
            rule = toolpolicy.rule_for(definition.name, rules)
            rows.append({"tool": definition, "schema": pretty_json(definition.parameters),
                         "policy": policies.get(definition.name), "who": toolpolicy.who_may_use(definition.name, rules),
                         "timeout": toolpolicy.effective_timeout(definition, rule)})
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Registered tools",
                   "rows": rows, "error": error,
                   "unknown_policies": sorted(set(policies) - {d.name for d in definitions})}
        return TemplateResponse(request, "admin/jxai_app/toolpolicy/registered.html", context)


@admin.register(UserLimits)
class UserLimitsAdmin(DeclaredFiltersOnly):
    """Per-user overrides of the rate limit and the daily token quota: empty = the settings'
    default, 0 = unlimited (the help text of each field says so on the form)."""

    list_display = ("user", "turns_per_minute", "tokens_per_day")
    search_fields = ("user__username",)
    raw_id_fields = ("user",)


@admin.register(UsageLedger)
class UsageLedgerAdmin(DeclaredFiltersOnly):
    """Per-user usage by UTC day, read-only, with totals over the filtered rows. Estimated
    tokens (the provider sent no usage) are a column of their own."""

    list_display = ("day", "user", "input_tokens", "output_tokens", "total", "estimated", "requests")
    list_filter = (("user", admin.RelatedOnlyFieldListFilter), "day")
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", None)
        if isinstance(context, dict) and "cl" in context:
            totals = context["cl"].queryset.aggregate(
                input_tokens=Sum("input_tokens"), output_tokens=Sum("output_tokens"),
                estimated_tokens=Sum("estimated_tokens"), requests=Sum("requests"))
            totals = {key: int(value or 0) for key, value in totals.items()}
            totals["total_tokens"] = totals["input_tokens"] + totals["output_tokens"]
            context["totals"] = totals
        return response


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
        readonly_fields = (*UserAdmin.readonly_fields, "jxai_usage")

        def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
            fieldsets = super().get_fieldsets(request, obj)
            return fieldsets if obj is None else (*fieldsets, ("jxai", {"fields": ("jxai_usage",)}))

        @admin.display(description="jxai usage")
        def jxai_usage(self, user: Any) -> str:
            return _usage_link(user)

    admin.site.unregister(_user_model)
    admin.site.register(_user_model, JxaiUserAdmin)
