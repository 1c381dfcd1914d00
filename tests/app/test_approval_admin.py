"""The approval policy (per tool, optionally per group) as a turn's tool
view and admin's registered-tools page read it, and the audit of a decision in admin's
transcript and export (docs/approval.md "Policy", "Audit"). Django's test client, the real
database, the store's own services to pause and decide a call."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse

from jxai_app import conf, store
from jxai_app.tools.registry import get_tool_registry
from jxai_app.models import ToolPolicy
from jxai_app.tools import policy as toolpolicy

pytestmark = pytest.mark.django_db


def _reader(django_user_model: Any) -> Client:
    staff = django_user_model.objects.create_user("reader", is_staff=True)
    for codename in ("view_conversation", "view_toolpolicy"):
        staff.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="jxai_app"))
    client = Client()
    client.force_login(staff)
    return client


def test_approval_is_a_policy_per_tool_and_optionally_per_group(user: Any, other_user: Any,
                                                                django_user_model: Any) -> None:
    signers = Group.objects.create(name="signers")
    user.groups.add(signers)
    ToolPolicy.objects.update_or_create(tool_name="save_note", defaults={"requires_approval": "always"})
    grouped = ToolPolicy.objects.create(tool_name="calculate", requires_approval="always")
    grouped.approval_groups.add(signers)
    ToolPolicy.objects.create(tool_name="current_datetime", requires_approval="never")

    registry = get_tool_registry()
    mine, theirs = toolpolicy.tool_view_for(user, registry), toolpolicy.tool_view_for(other_user, registry)
    assert [mine.requires_approval(n) for n in ("save_note", "calculate", "current_datetime")] == [True, True, False]
    assert [theirs.requires_approval(n) for n in ("save_note", "calculate", "current_datetime")] == [True, False, False]
    no_tools = toolpolicy.tool_view_for(user, registry, model_supports_tools=False)
    assert not no_tools.requires_approval("save_note")  # not offered: nothing to approve

    response = _reader(django_user_model).get(reverse("admin:jxai_app_registered_tools"))
    shown = {row["tool"].name: row["approval"] for row in response.context["rows"]}
    assert shown["save_note"] == "always" and shown["calculate"] == "always for members of signers"
    assert shown["current_datetime"] == "never" and shown["search_conversations"] == "never"
    assert 'data-testid="requires-approval">always for members of signers<' in response.content.decode()


def test_a_decision_is_audited_in_the_transcript_and_the_export(user: Any, django_user_model: Any) -> None:
    turn = store.message_send(user=user, conversation_id=None, text="Note it down.")
    recorder = store.TurnRecorder(turn, user=user)
    call = {"id": "call_n", "type": "function", "function": {"name": "save_note", "arguments": '{"text": "x"}'}}
    recorder.finish_round(message={"role": "assistant", "content": None, "tool_calls": [call]},
                          stop_reason="tool_calls", usage=None, estimated=False)
    assert recorder.pause(["call_n"])
    decided = store.approval_decide(user=user, conversation_id=turn.conversation_id, call_id="call_n", approved=False,
                                    reason="<b>not now</b>", timeout=600)
    assert decided.resumed is not None  # the last waiting call: the turn is claimed for its resume

    client = _reader(django_user_model)
    page = client.get(reverse("admin:jxai_app_conversation_transcript", args=[turn.conversation_id])).content.decode()
    assert "Approval: <strong>denied</strong>" in page and "approver alice" in page and "decided by alice" in page
    assert "reason: &lt;b&gt;not now&lt;/b&gt;" in page  # escaped

    export = client.post(reverse("admin:jxai_app_conversation_changelist"), {
        "action": "export_openai_json", "_selected_action": [str(turn.conversation_id)]})
    [document] = json.loads(export.content)
    [audit] = document["approvals"]
    assert {k: audit[k] for k in ("call_id", "name", "state", "approver", "decided_by", "reason")} == {
        "call_id": "call_n", "name": "save_note", "state": "denied", "approver": "alice", "decided_by": "alice",
        "reason": "<b>not now</b>"}
    assert audit["requested_at"] and audit["decided_at"]


def test_notes_are_content_shown_read_only_to_readers_of_conversations(user: Any, django_user_model: Any) -> None:
    from jxai_app.models import Note
    from jxai_app.store.notes import note_save

    saved = note_save(owner=user, text="<i>oat milk</i>")
    assert Note.objects.get(pk=saved["id"]).owner == user and saved["text"] == "<i>oat milk</i>"
    reader = _reader(django_user_model)
    listing = reader.get(reverse("admin:jxai_app_note_changelist"))
    assert listing.status_code == 200 and "&lt;i&gt;oat milk&lt;/i&gt;" in listing.content.decode()
    outsider = django_user_model.objects.create_user("outsider", is_staff=True)
    outsider.user_permissions.add(Permission.objects.get(codename="view_toolpolicy"))
    client = Client()
    client.force_login(outsider)
    assert client.get(reverse("admin:jxai_app_note_changelist")).status_code == 403
    assert reader.get(reverse("admin:jxai_app_note_add")).status_code == 403
