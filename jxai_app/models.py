"""Database models: saved conversations (docs/store.md "Rows") and the per-user records
around them (API tokens, tool policies, limits, usage).

::

    Conversation ──< Message ──< ToolCall          (a user's chat, its transcript, the calls)
                     Message ──○ MessageFeedback   (the owner's thumbs up/down on an answer)
    UserSettings    per-user custom instructions (added to every new turn's system prompt)
                     └─ parent: a tree of branches; Conversation.active_leaf ends the path shown
    ApiToken        hashed jxai API tokens (docs/api.md "Authentication")
    Note            a user's notes (the approval demonstration tool writes them)
    ToolPolicy      per-tool gate edited in admin (rules in jxai_app.tools.policy)
    UserLimits      per-user overrides of the rate limits and quotas
    UsageLedger     tokens, cost and provider requests per user, model and UTC day (jxai_app.policy.usage)
    TokenReservation  tokens held against the daily quota by requests still running (jxai_app.policy.reservations)
    TurnAdmission   turns admitted in the last minute, per user (jxai_app.policy.ratelimit)
    McpServer       an MCP server whose tools the assistant may use (docs/mcp.md)
    ShareLink       a read-only snapshot of a conversation behind a hashed token (docs/data.md)
    ErasureRecord   who erased which user's data and when (docs/data.md "Erasure")
    SsoIdentity, SignInEvent  a provider account linked to a user; the sign-in audit (docs/sso.md)
    GroupEntitlements  a Django group's models and limits (rules in jxai_app.policy.entitlements)
    Attachment      a file uploaded for a user message (docs/attachments.md)

The chat store's rules (docs/store.md) live in :mod:`jxai_app.store`, never here: these
classes only describe rows. Ownership is a foreign key to ``settings.AUTH_USER_MODEL``.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from jxai_app.core.errors import ConfigurationError
from jxai_app.core.mcp import McpServerConfig


class ConversationStatus(models.TextChoices):
    """Where a conversation stands (CS state ``status``)."""

    IDLE = "idle", "idle"
    STREAMING = "streaming", "streaming"
    ERROR = "error", "error"
    AWAITING_APPROVAL = "awaiting_approval", "awaiting approval"
    """The turn is paused: a tool call waits for the owner's decision (docs/approval.md)."""


class ApprovalState(models.TextChoices):
    """Where a tool call that needs a person's approval stands (docs/approval.md "States")."""

    NONE = "", "not needed"
    AWAITING = "awaiting_approval", "awaiting approval"
    APPROVED = "approved", "approved"
    DENIED = "denied", "denied"
    EXPIRED = "expired", "expired"


class MessageRole(models.TextChoices):
    """The OpenAI wire roles a saved message can have (docs/store.md "Rows")."""

    SYSTEM = "system", "system"
    USER = "user", "user"
    ASSISTANT = "assistant", "assistant"
    TOOL = "tool", "tool"


class MessageStatus(models.TextChoices):
    """``streaming`` only for the in-flight assistant placeholder (docs/store.md "The placeholder")."""

    STREAMING = "streaming", "streaming"
    COMPLETE = "complete", "complete"


class Conversation(models.Model):
    """One user's chat: a transcript of messages plus the state of its current turn."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    """Public identifier (URLs, websocket frames); random so ids reveal nothing."""
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jxai_conversations"
    )
    """The user who owns it; nobody else can read or write it (docs/store.md "Ownership")."""
    title = models.CharField(max_length=200, blank=True, default="")
    """Shown in the conversation list; set from the first user message when empty."""
    model = models.CharField(max_length=100, blank=True, default="")
    """Model alias (a key of the configured model registry), not a provider id."""
    status = models.CharField(
        max_length=20, choices=ConversationStatus.choices, default=ConversationStatus.IDLE
    )
    """idle / streaming (a turn runs) / error (the last turn failed; Retry offered) /
    awaiting_approval (the turn is paused until the owner decides a tool call; no lease)."""
    last_error = models.TextField(blank=True, default="")
    """Message of the last failed turn (docs/store.md "What error and Stop remove"), ``""`` when none; cleared by a new send."""
    last_problem = models.JSONField(null=True, blank=True)
    """RFC 9457 problem document of the last failed turn, ``None`` when none."""
    token_count = models.PositiveIntegerField(default=0)
    """Context tokens of the last model request (input + output − unreplayed reasoning;
    docs/store.md "Usage and context tokens"), from the provider's usage or an estimate."""
    context_warning = models.BooleanField(default=False)
    """On when ``token_count`` reached 80 % of the model's context window (docs/store.md
    "Usage and context tokens")."""
    active_leaf = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    """The last message of the active path: the transcript shown, sent and exported is this
    message and its ancestors (docs/store.md "Branches"); ``None``: an empty path (no message yet)."""
    turn_id = models.UUIDField(null=True, blank=True)
    """UUID of the running turn, ``None`` when none. Set by a send, cleared when the turn
    ends; guards every write of the turn runner so one turn runs per conversation across
    worker processes."""
    turn_heartbeat = models.DateTimeField(null=True, blank=True)
    """Last sign of life of the running turn besides its message writes (a send, a round's
    end, an explicit keep-alive). A turn is dead when this and every message write of the
    conversation are older than the recovery threshold (:mod:`jxai_app.store.recovery`)."""
    created_at = models.DateTimeField(auto_now_add=True)
    """When the conversation was created."""
    updated_at = models.DateTimeField(auto_now=True)
    """Last change that matters to the user (send, turn end, rename); sorts the list."""
    temporary = models.BooleanField(default=False)
    """A temporary chat: left out of the list and search, removed once idle longer than
    ``JXAI_TEMPORARY_CHAT_HOURS`` (docs/data.md "Temporary chats")."""
    legal_hold = models.BooleanField(
        default=False, help_text="Kept whatever the retention period, and not erased with its owner's data.")
    """Set by staff in admin: retention never purges it and erasure refuses its owner (docs/data.md
    "Retention", "Erasure")."""

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["owner", "-updated_at"], name="jxai_conv_owner_recent"),
            models.Index(fields=["status"], name="jxai_conv_status"),
            models.Index(fields=["model"], name="jxai_conv_model"),
            models.Index(fields=["created_at"], name="jxai_conv_created"),
        ]

    def __str__(self) -> str:
        # Never the title: it is made from the first user message, and admin shows this
        # string to staff who may not read message content (docs/security.md, threat 1b).
        return f"Conversation {self.pk}"


class Message(models.Model):
    """One transcript entry in OpenAI wire roles (docs/store.md "The OpenAI wire export")."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    """The conversation it belongs to."""
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    """The message this one follows (``None`` for a first message); siblings are branches
    (an edited question, a regenerated answer; docs/store.md "Branches")."""
    position = models.PositiveIntegerField()
    """0-based order of creation within the conversation; unique per conversation. It grows
    along every path, so a path in position order is its transcript."""
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    """system / user / assistant / tool."""
    content = models.TextField(blank=True, default="")
    """The text (answer text for an assistant, result text for a tool reply)."""
    reasoning_content = models.TextField(null=True, blank=True)
    """Thinking text streamed with this assistant message; ``None`` when none streamed, so
    it is replayed as ``reasoning_content`` only on the turn that streamed it (docs/store.md "The OpenAI wire export")."""
    tool_call_id = models.CharField(max_length=200, blank=True, default="")
    """For a ``tool`` reply, the id of the call it answers; ``""`` otherwise."""
    usage = models.JSONField(null=True, blank=True)
    """Assistant only: ``{"inputTokens", "outputTokens"[, "cachedInputTokens"]
    [, "reasoningTokens"][, "estimated": true]}`` for the request that produced it;
    ``estimated`` marks counts made up because the provider sent none."""
    model = models.CharField(max_length=100, blank=True, default="")
    """Model alias that produced an assistant message."""
    stop_reason = models.CharField(max_length=32, blank=True, default="")
    """The round's ``done`` stop reason (``stop``, ``tool_calls``, ``length``,
    ``content_filter``), ``""`` while streaming or for non-model messages."""
    status = models.CharField(
        max_length=16, choices=MessageStatus.choices, default=MessageStatus.COMPLETE
    )
    """``streaming`` for the in-flight placeholder, ``complete`` otherwise."""
    stopped = models.BooleanField(default=False)
    """User messages only: the turn it started was stopped before any answer was saved (the
    page shows "Stopped — no answer was saved"; docs/store.md "What error and Stop remove")."""
    created_at = models.DateTimeField(auto_now_add=True)
    """When the row was inserted."""
    updated_at = models.DateTimeField(auto_now=True)
    """Last write; a streaming placeholder's flushes refresh it (a sign of turn life)."""

    class Meta:
        ordering = ["conversation", "position"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "position"], name="jxai_msg_position_unique"),
        ]
        indexes = [
            models.Index(fields=["conversation", "status"], name="jxai_msg_conv_status"),
            models.Index(fields=["conversation", "updated_at"], name="jxai_msg_conv_updated"),
        ]

    def __str__(self) -> str:
        return f"#{self.position} {self.role}"


class ToolCall(models.Model):
    """A function call made by an assistant message, with its result once it ran."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="tool_calls")
    """The assistant message that made the call."""
    position = models.PositiveIntegerField()
    """Order within the message (the order the model opened the calls)."""
    call_id = models.CharField(max_length=200)
    """The provider's call id; not unique (providers reuse ``call_0`` per round; docs/store.md "Tool results")."""
    name = models.CharField(max_length=200, blank=True, default="")
    """Function name; ``""`` for a call that ended without one."""
    arguments = models.TextField(blank=True, default="")
    """Argument JSON text exactly as streamed, even when cut off (length cut-off)."""
    result = models.JSONField(null=True, blank=True)
    """The tool's result document (``{"success": …, …}``) or its raw text when not JSON;
    ``None`` until it ran. Transcript-only: never sent on the wire (docs/store.md "The OpenAI wire export")."""
    success = models.BooleanField(null=True, blank=True)
    """``False`` iff the result is an object with ``success: false`` (docs/store.md "Tool results"); ``None`` until run."""
    started_at = models.DateTimeField(null=True, blank=True)
    """When ``tool_call_start`` arrived."""
    finished_at = models.DateTimeField(null=True, blank=True)
    """When the result was attached."""
    approval_state = models.CharField(max_length=20, choices=ApprovalState.choices, blank=True, default="")
    """``""`` (no approval needed), ``awaiting_approval``, ``approved``, ``denied``, ``expired``
    (docs/approval.md "States")."""
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    """Who must decide: the conversation's owner when the call was paused."""
    approval_requested_at = models.DateTimeField(null=True, blank=True)
    """When the call started waiting (the expiry counts from here)."""
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    """Who decided (``None``: nobody yet, or the system: an expiry)."""
    decided_at = models.DateTimeField(null=True, blank=True)
    """When the decision was recorded."""
    decision_reason = models.TextField(blank=True, default="")
    """The reason given with the decision (a denial's reason reaches the model)."""

    class Meta:
        ordering = ["message_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["message", "position"], name="jxai_toolcall_position_unique"),
        ]
        indexes = [models.Index(fields=["call_id"], name="jxai_toolcall_call_id"),
                   models.Index(fields=["approval_state", "approval_requested_at"], name="jxai_toolcall_approval")]

    def __str__(self) -> str:
        return f"{self.name or '?'}({self.call_id})"


class Note(models.Model):
    """A note a user keeps: what the built-in ``save_note`` tool writes, after the user approved
    the call (docs/approval.md "The demonstration tool")."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jxai_notes")
    """Whose note (always the user the tool acted for)."""
    text = models.TextField()
    """The note."""
    created_at = models.DateTimeField(auto_now_add=True)
    """When it was saved."""

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"note {self.pk} of user {self.owner_id}"
class FeedbackRating(models.TextChoices):
    """A reader's verdict on an assistant message (docs/store.md "Feedback")."""

    UP = "up", "thumbs up"
    DOWN = "down", "thumbs down"


class MessageFeedback(models.Model):
    """The conversation owner's feedback on one assistant message: a rating and an optional
    comment, for staff review (docs/store.md "Feedback"). At most one per message: the
    owner is the only one who may give it, and giving it again replaces it."""

    message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="feedback")
    """The assistant message it is about (its conversation's owner gave it)."""
    rating = models.CharField(max_length=8, choices=FeedbackRating.choices)
    """``up`` or ``down``."""
    comment = models.TextField(blank=True, default="")
    """Optional words of the owner, at most ``FEEDBACK_COMMENT_MAX_CHARS`` characters."""
    created_at = models.DateTimeField(auto_now_add=True)
    """When it was first given."""
    updated_at = models.DateTimeField(auto_now=True)
    """Last change of the rating or the comment."""

    class Meta:
        verbose_name = "message feedback"
        verbose_name_plural = "message feedback"
        indexes = [models.Index(fields=["rating"], name="jxai_feedback_rating")]

    def __str__(self) -> str:
        return f"{self.get_rating_display()} on message {self.message_id}"


class UserSettings(models.Model):
    """One user's chat settings, edited in the page's settings dialog (docs/store.md
    "Custom instructions")."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jxai_settings")
    """Whose settings."""
    custom_instructions = models.TextField(blank=True, default="")
    """Text added to the system prompt of every new turn of this user; ``""`` adds nothing.
    At most ``JXAI_CUSTOM_INSTRUCTIONS_MAX_CHARS`` characters."""
    updated_at = models.DateTimeField(auto_now=True)
    """Last change."""

    class Meta:
        verbose_name = "user settings"
        verbose_name_plural = "user settings"

    def __str__(self) -> str:
        return f"settings of {self.user}"


API_TOKEN_PREFIX = "jxai_"
"""Visible start of every plaintext token, so a leaked one is recognisable."""


class ApiToken(models.Model):
    """A jxai API token for programmatic use of ``/ai/chat`` (docs/api.md "Authentication"). Only a SHA-256 hash
    of the secret is stored; the plaintext is shown once, by :meth:`issue`."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jxai_api_tokens")
    """The user the token acts as."""
    name = models.CharField(max_length=100)
    """A label chosen by its creator (where the token is used)."""
    prefix = models.CharField(max_length=16, editable=False)
    """The first characters of the plaintext (``jxai_`` + 6), to recognise it in lists."""
    secret_hash = models.CharField(max_length=64, unique=True, editable=False)
    """Hex SHA-256 of the whole plaintext token (a high-entropy secret needs no slow hash)."""
    created_at = models.DateTimeField(auto_now_add=True)
    """When it was issued."""
    last_used_at = models.DateTimeField(null=True, blank=True)
    """Last successful authentication with it; ``None`` when never used."""
    revoked_at = models.DateTimeField(null=True, blank=True)
    """When it was revoked; a revoked token never authenticates."""

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def hash_secret(plaintext: str) -> str:
        """Hex SHA-256 of ``plaintext`` (UTF-8), the value stored in :attr:`secret_hash`."""
        return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()

    def set_new_secret(self) -> str:
        """Give this (unsaved) token a fresh secret: sets :attr:`prefix` and
        :attr:`secret_hash` and returns the plaintext (``jxai_`` + 43 URL-safe characters,
        256 bits), which is kept nowhere."""
        plaintext = API_TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.prefix = plaintext[: len(API_TOKEN_PREFIX) + 6]
        self.secret_hash = self.hash_secret(plaintext)
        return plaintext

    @classmethod
    def issue(cls, *, user: Any, name: str) -> tuple[ApiToken, str]:
        """Create a token for ``user`` and return ``(token, plaintext)``; the plaintext is
        returned only here, the database keeps its hash and a short prefix."""
        token = cls(user=user, name=name)
        plaintext = token.set_new_secret()
        token.save()
        return token, plaintext

    @property
    def is_active(self) -> bool:
        """True unless revoked."""
        return self.revoked_at is None


class ToolPolicy(models.Model):
    """Who may use a registered tool and within what limits (edited in admin; docs/security.md, threat 2).

    The rules that read these rows live in :mod:`jxai_app.tools.policy` (offered tools per
    user and turn, and the admin's "who may use it"). A tool without a row follows the
    setting ``JXAI_TOOLS_DEFAULT_ALLOWED``.
    """

    tool_name = models.CharField(max_length=200, unique=True, help_text="Name of the tool in the registry.")
    """Name of the tool in the registry."""
    enabled = models.BooleanField(default=True, help_text="Off: the tool is offered to nobody, superusers included.")
    """Off: the tool is offered to nobody."""
    allowed_groups = models.ManyToManyField(
        "auth.Group", blank=True, related_name="jxai_tool_policies",
        help_text="Empty: every user. Otherwise only members of these groups (and superusers).")
    """Groups whose members may use the tool; empty means every user. Superusers always may
    (when the tool is enabled)."""
    max_calls_per_turn = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Most calls of this tool in one turn; empty = no tool-specific cap.")
    """Most calls of this tool in one turn; ``None`` = no tool-specific cap."""
    timeout_seconds = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.001)],
        help_text="Seconds one call may run before it fails; empty = the tool's own timeout.")
    """Execution timeout in seconds; ``None`` = the tool definition's own timeout."""
    requires_approval = models.CharField(
        max_length=8, choices=[("never", "never"), ("always", "always")], default="never",
        help_text="always: the user approves each call before it runs (docs/approval.md).")
    """``never`` or ``always``: whether each call waits for the user's approval."""
    approval_groups = models.ManyToManyField(
        "auth.Group", blank=True, related_name="jxai_tool_approvals",
        help_text="With 'always': empty = every user approves each call; otherwise only members of these groups do.")
    """With ``always``: the groups whose members must approve; empty = everyone."""

    class Meta:
        ordering = ["tool_name"]
        verbose_name_plural = "tool policies"

    def __str__(self) -> str:
        return self.tool_name


_LIMIT_HELP = "Empty = the settings' default ({setting}); 0 = unlimited."


class UserLimits(models.Model):
    """Per-user overrides of the rate limit and quota settings (docs/security.md, threat 3). ``None`` (empty in
    admin) = the settings' default; ``0`` = unlimited (:mod:`jxai_app.policy.ratelimit`)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jxai_limits")
    """The user these limits apply to."""
    turns_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most turns started in any 60 s. " + _LIMIT_HELP.format(
            setting="JXAI_TURNS_PER_MINUTE"))
    """Most turns started per rolling minute; ``None`` = the settings' default, 0 = no limit."""
    tokens_per_day = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most tokens (input + output) per UTC day. " + _LIMIT_HELP.format(
            setting="JXAI_TOKENS_PER_DAY"))
    """Most tokens (input + output) per UTC day; ``None`` = the settings' default, 0 = no limit."""
    cost_per_day = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True, validators=[MinValueValidator(0)],
        help_text="Most spend in USD per UTC day. " + _LIMIT_HELP.format(setting="JXAI_COST_PER_DAY"))
    """Most cost in USD per UTC day; ``None`` = the settings' default, 0 = no limit (docs/operations.md "Cost")."""

    class Meta:
        verbose_name = "user limits"
        verbose_name_plural = "user limits"

    def __str__(self) -> str:
        return f"limits for {self.user}"


class UsageLedger(models.Model):
    """Tokens, cost and provider requests of one user with one model on one UTC day
    (docs/security.md "Limits: why the database, and what it costs"; docs/operations.md "Cost").

    Written only by :func:`jxai_app.policy.usage.ledger_add` with ``F()`` increments (race-free
    upsert); the daily token and cost quotas read the sum of the user's rows of the day, so the
    figures hold across worker processes and restarts. ``input_tokens`` and ``output_tokens``
    include estimated counts; ``estimated_tokens`` says how many of them were estimated
    because the provider sent no usage, and ``estimated_cost_usd`` how much of the cost.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                             related_name="jxai_usage")
    """Whose usage; ``None`` once the user's data was erased (the row stays, anonymised, so cost
    reports keep their totals: docs/data.md "Erasure")."""
    day = models.DateField()
    """The UTC day."""
    model = models.CharField(max_length=200, blank=True, default="")
    """The model alias the requests used (``""``: recorded before models were told apart)."""
    input_tokens = models.PositiveBigIntegerField(default=0)
    """Prompt tokens of the day's provider requests (estimates included)."""
    output_tokens = models.PositiveBigIntegerField(default=0)
    """Completion tokens of the day's provider requests (estimates included)."""
    estimated_tokens = models.PositiveBigIntegerField(
        default=0, help_text="Part of input + output that was estimated (the provider sent no usage).")
    """How many of ``input_tokens + output_tokens`` were estimated, not reported."""
    cost_usd = models.DecimalField(max_digits=20, decimal_places=10, default=0,
                                   help_text="USD, from the model's price (estimates included).")
    """What the requests cost in USD (:mod:`jxai_app.policy.cost`), estimated ones included."""
    estimated_cost_usd = models.DecimalField(max_digits=20, decimal_places=10, default=0,
                                             help_text="Part of the cost computed from estimated tokens.")
    """How much of ``cost_usd`` comes from estimated tokens."""
    requests = models.PositiveIntegerField(default=0)
    """Provider requests recorded (one per model round, websocket and ``/ai/chat`` alike)."""
    failed_requests = models.PositiveIntegerField(default=0)
    """Of ``requests``, those that ended in an error (the admin's error rate)."""
    updated_at = models.DateTimeField(auto_now=True)
    """Last increment."""

    class Meta:
        ordering = ["-day", "user", "model"]
        verbose_name = "usage (per user, model and day)"
        verbose_name_plural = "usage (per user, model and day)"
        constraints = [models.UniqueConstraint(fields=["user", "day", "model"], name="jxai_usage_user_day_model")]
        indexes = [models.Index(fields=["day"], name="jxai_usage_day")]

    def __str__(self) -> str:
        return f"usage of {self.user} with {self.model or '(any model)'} on {self.day:%Y-%m-%d}"

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens`` (what the daily quota counts)."""
        return int(self.input_tokens) + int(self.output_tokens)


class TokenReservation(models.Model):
    """Tokens held against a user's daily quota for a model request whose usage is not known
    yet (docs/security.md "Quota reservations").

    Made at admission in the send's transaction (or the ``/ai/chat`` request's), and again
    before each further round of a turn, by :mod:`jxai_app.policy.reservations`; the quota
    counts ``UsageLedger`` tokens plus the user's reservations of the day. Settled when the
    round's usage is recorded (``tokens`` back to 0), removed when the turn or request ends,
    and, for a turn whose worker died, counted as its prompt by lease recovery.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    """Whose quota."""
    day = models.DateField()
    """The UTC day of the quota it holds."""
    tokens = models.PositiveBigIntegerField(default=0)
    """Tokens held now: the request's prompt estimate plus the output allowance; 0 between rounds."""
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    """The prompt estimate inside ``tokens`` (what recovery counts for a request that was in flight)."""
    turn_id = models.UUIDField(null=True, blank=True)
    """The websocket turn holding it (``Conversation.turn_id``); ``None`` for ``/ai/chat``."""
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["user", "day"], name="jxai_reserve_user_day"),
                   models.Index(fields=["turn_id"], name="jxai_reserve_turn")]

    def __str__(self) -> str:
        return f"{self.tokens} tokens held for {self.user_id} on {self.day:%Y-%m-%d}"


class TurnAdmission(models.Model):
    """One turn admitted by the per-minute rate limit (docs/security.md "Limits: why the database, and what it costs").

    :func:`jxai_app.policy.ratelimit.check_turn_allowed` counts a user's rows of the last 60 s and
    adds one, in a transaction serialised per user, then drops rows older than the window;
    the table holds at most a minute of turns per user.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    """Who started the turn."""
    at = models.DateTimeField()
    """When it was admitted (the rate limiter's clock)."""

    class Meta:
        indexes = [models.Index(fields=["user", "at"], name="jxai_turnadm_user_at")]

    def __str__(self) -> str:
        return f"turn of {self.user_id} at {self.at:%H:%M:%S}"


class McpServer(models.Model):
    """An MCP server whose tools the assistant may use (docs/mcp.md "Configuring a server").

    No secret is stored: a stdio server lists the *names* of the environment variables its
    process gets, an HTTP server maps each header to the *name* of the variable holding its
    value. :meth:`to_config` gives the core's :class:`~jxai_app.core.mcp.McpServerConfig`.
    """

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (a command run by each worker)"
        STREAMABLE_HTTP = "streamable-http", "streamable HTTP (a URL)"

    name = models.CharField(max_length=24, unique=True,
                            help_text="Letters, digits, '-' or single '_'; its tools are named NAME__TOOL "
                                      "(this name, two underscores, the tool's name).")
    enabled = models.BooleanField(default=True, help_text="Off: not connected, no tools.")
    transport = models.CharField(max_length=20, choices=Transport.choices, default=Transport.STDIO)
    command = models.CharField(max_length=500, blank=True, help_text="stdio: the program to run.")
    arguments = models.JSONField(default=list, blank=True, help_text='stdio: its arguments, e.g. ["-m", "server"].')
    env_names = models.JSONField(default=list, blank=True,
                                 help_text='stdio: names of environment variables passed to it, e.g. ["GITHUB_TOKEN"].')
    url = models.CharField(max_length=500, blank=True, help_text="streamable HTTP: the endpoint, e.g. https://mcp.example.com/mcp.")
    header_env = models.JSONField(
        default=dict, blank=True,
        help_text='streamable HTTP: header → name of the environment variable with its value, '
                  'e.g. {"Authorization": "TICKETS_AUTH"}.')
    timeout_seconds = models.FloatField(default=30.0, validators=[MinValueValidator(0.001)],
                                        help_text="Seconds for connecting and for each call.")
    pass_user_id = models.BooleanField(default=False,
                                       help_text="Send the requesting user's id with each call (header below over HTTP).")
    user_header = models.CharField(max_length=64, default="X-Jxai-User")

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    def to_config(self) -> Any:
        """This row as a :class:`~jxai_app.core.mcp.McpServerConfig`.

        Raises:
            ConfigurationError: a value the configuration refuses (see its checks).
        """
        return McpServerConfig(
            name=self.name, transport=self.transport, command=self.command,  # type: ignore[arg-type]
            args=tuple(str(a) for a in self.arguments or ()), env_names=tuple(str(e) for e in self.env_names or ()),
            url=self.url, header_env={str(k): str(v) for k, v in dict(self.header_env or {}).items()},
            timeout=float(self.timeout_seconds), pass_user_id=self.pass_user_id, user_header=self.user_header,
            enabled=self.enabled)

    def clean(self) -> None:
        try:
            self.to_config()
        except (ConfigurationError, TypeError, ValueError) as exc:
            raise ValidationError(str(exc)) from None


class ShareScope(models.TextChoices):
    """Who may open a share link (docs/data.md "Share links")."""

    SIGNED_IN = "signed_in", "signed-in users"
    GROUPS = "groups", "chosen groups"
    PUBLIC = "public", "anyone with the link"


class ShareLink(models.Model):
    """A snapshot of a conversation's active path behind a random token, of which only the
    SHA-256 is kept (docs/data.md "Share links"). The rules live in :mod:`jxai_app.store.shares`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    """The owner's handle on the link (Settings, update, revoke); never the token."""
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jxai_shares")
    """Who shared it."""
    conversation = models.ForeignKey(Conversation, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="share_links")
    """The conversation it was taken from (``None`` once deleted; the snapshot stays viewable)."""
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    """Hex SHA-256 of the token in the link."""
    title = models.CharField(max_length=200, blank=True, default="")
    """The conversation's title at share time."""
    snapshot = models.JSONField(default=dict)
    """``{"model", "messages": [...]}``: the active path at share time (docs/data.md "Share links")."""
    scope = models.CharField(max_length=16, choices=ShareScope.choices, default=ShareScope.SIGNED_IN)
    """Who may open it."""
    groups = models.ManyToManyField("auth.Group", blank=True, related_name="jxai_shares")
    """With scope ``groups``: whose members may open it."""
    created_at = models.DateTimeField(auto_now_add=True)
    """When it was first shared."""
    snapshot_at = models.DateTimeField()
    """When the snapshot was taken (creation or the last "Update link")."""
    expires_at = models.DateTimeField(null=True, blank=True)
    """After this it answers 404; ``None``: never expires."""
    revoked_at = models.DateTimeField(null=True, blank=True)
    """When the owner or staff revoked it; a revoked link answers 404."""
    view_count = models.PositiveIntegerField(default=0)
    """How many times the share page was shown."""

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "share link"

    def __str__(self) -> str:
        return f"share {self.pk}"


class SsoIdentity(models.Model):
    """The link between an account at the identity provider (issuer, subject) and a jxai
    user (docs/sso.md "Accounts"). A sign-in through the provider finds its user here; the
    first one creates the user and this row, and never takes over an existing account of
    the same name unless an operator made this row for it in admin beforehand."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jxai_sso_identities")
    issuer = models.CharField(max_length=500, help_text="The provider's issuer URL (the ID token's iss).")
    subject = models.CharField(max_length=255, help_text="The account's id at the provider (the ID token's sub).")
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="jxai_sso_identity_unique")]
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class SignInEvent(models.Model):
    """One line of the sign-in audit (docs/sso.md "Audit"): a sign-in that succeeded or
    failed (through the provider or by password), the group changes a provider sign-in
    applied, an API token issued. Written by :mod:`jxai_app.policy.audit`, read-only in admin."""

    SSO_SIGN_IN = "sso-sign-in"
    SSO_FAILURE = "sso-failure"
    PASSWORD_SIGN_IN = "password-sign-in"
    PASSWORD_FAILURE = "password-failure"
    GROUPS_CHANGED = "groups-changed"
    TOKEN_ISSUED = "token-issued"
    KINDS = [(SSO_SIGN_IN, "SSO sign-in"), (SSO_FAILURE, "SSO sign-in refused"),
             (PASSWORD_SIGN_IN, "password sign-in"), (PASSWORD_FAILURE, "password sign-in refused"),
             (GROUPS_CHANGED, "groups changed at sign-in"), (TOKEN_ISSUED, "API token issued")]

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=20, choices=KINDS, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="jxai_sign_in_events")
    """The account concerned (the token's owner for ``token-issued``); empty when unknown."""
    actor = models.CharField(max_length=255, blank=True)
    """Who acted: the name typed or claimed at sign-in, the staff member who issued a token."""
    ip_address = models.GenericIPAddressField(null=True, blank=True)
    """The client address (:func:`jxai_app.web.clientip.client_ip`); empty from the command line."""
    detail = models.TextField(blank=True)
    """Why a sign-in was refused, which groups were added and removed, the token's name."""

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "sign-in event"


class ErasureRecord(models.Model):
    """One erasure of a user's data (docs/data.md "Erasure"): the user deleted their account,
    or staff holding ``erase_user_data`` ran "Erase user data" in admin. It keeps no personal
    data of the erased user: only the id their row had."""

    erased_user_id = models.BigIntegerField()
    """The primary key the erased user had (the row is gone)."""
    erased_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    """Who ran it: a staff member, ``None`` when the user deleted their own account (or the
    staff member's row is gone since)."""
    self_service = models.BooleanField(default=False)
    """True when the user deleted their own account from Settings."""
    erased_at = models.DateTimeField(auto_now_add=True)
    """When."""
    removed = models.JSONField(default=dict)
    """Rows removed per model label, e.g. ``{"jxai_app.Conversation": 3, …}``."""

    class Meta:
        ordering = ["-erased_at"]
        permissions = [("erase_user_data", "Can erase a user's data")]

    def __str__(self) -> str:
        return f"erasure of user {self.erased_user_id} at {self.erased_at:%Y-%m-%d %H:%M}"


class GroupEntitlements(models.Model):
    """What the members of one Django group may use: model aliases and limits, edited inline on
    the group's admin page (docs/security.md "Group entitlements"). Each limit: ``None`` (empty
    in admin) = this group does not set it, ``0`` = unlimited; a member's effective limit is
    the most generous of their groups' unless their :class:`UserLimits` row sets it
    (:mod:`jxai_app.policy.entitlements`)."""

    group = models.OneToOneField("auth.Group", on_delete=models.CASCADE, related_name="jxai_entitlements")
    """The group these entitlements apply to."""
    model_aliases = models.JSONField(
        default=list, blank=True,
        help_text="The model aliases members may use; none ticked = every configured model.")
    """Aliases (strings) the members may use; empty = every configured model."""
    turns_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most turns a member starts in any 60 s. Empty = not set by this group; "
                                         "0 = unlimited.")
    """Most turns per member per rolling minute; ``None`` = not set here, 0 = no limit."""
    tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Most tokens (input + output) per member per UTC day. Empty = not set "
                                         "by this group; 0 = unlimited.")
    """Most tokens per member per UTC day; ``None`` = not set here, 0 = no limit."""
    cost_per_day = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True, validators=[MinValueValidator(0)],
        help_text="Most spend in USD per member per UTC day. Empty = not set by this group; 0 = unlimited.")
    """Most cost in USD per member per UTC day; ``None`` = not set here, 0 = no limit."""
    storage_bytes_per_user = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Most bytes of stored files per member. Empty = not set by this group; "
                                         "0 = unlimited.")
    """Most bytes of stored files per member; ``None`` = not set here, 0 = no limit."""

    class Meta:
        verbose_name = "group entitlements"
        verbose_name_plural = "group entitlements"

    def __str__(self) -> str:
        return f"entitlements of {self.group}"


class Attachment(models.Model):
    """A file a user uploaded for a message (docs/attachments.md "Rows"): unclaimed
    (``message`` null) from its upload until a send names it. The bytes live in the
    ``jxai_attachments`` storage under ``file``; rows of several messages may share one
    stored file (an edit keeps its question's attachments)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    """Public identifier (the upload's answer, the send frame, the file view's URL)."""
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jxai_attachments")
    """The uploader: the only user (besides staff who may view conversations) who may read it."""
    message = models.ForeignKey(Message, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="attachments")
    """The user message it belongs to; ``None`` until a send claims it."""
    name = models.CharField(max_length=255)
    """The file's original name (no path separators or control characters)."""
    media_type = models.CharField(max_length=100)
    """The type sniffed from the bytes (``image/png``, ``application/pdf``, ``text/plain``, …)."""
    size = models.PositiveBigIntegerField()
    """Bytes stored."""
    sha256 = models.CharField(max_length=64)
    """Hex SHA-256 of the stored bytes."""
    width = models.PositiveIntegerField(null=True, blank=True)
    """Images only: pixels."""
    height = models.PositiveIntegerField(null=True, blank=True)
    """Images only: pixels."""
    position = models.PositiveSmallIntegerField(default=0)
    """Its place among its message's attachments (the order the send named them)."""
    text = models.TextField(blank=True, default="")
    """Documents only: the extracted text the model reads (capped; docs/attachments.md)."""
    file = models.CharField(max_length=300)
    """The storage name of the bytes in the ``jxai_attachments`` storage."""
    created_at = models.DateTimeField(auto_now_add=True)
    """When it was uploaded (unclaimed ones older than a day are removed)."""

    class Meta:
        ordering = ["message_id", "position"]
        indexes = [
            models.Index(fields=["owner", "created_at"], name="jxai_att_owner_created"),
            models.Index(fields=["message", "created_at"], name="jxai_att_message"),
            models.Index(fields=["file"], name="jxai_att_file"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_image(self) -> bool:
        """Whether it is an image (it has pixels)."""
        return self.width is not None
