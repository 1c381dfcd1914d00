"""Share links (docs/data.md "Share links") and temporary chats (docs/data.md "Temporary
chats") on the real database, through the store and Django's test client."""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import zipfile
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from jxai_app import store
from jxai_app.core.errors import ProblemError
from jxai_app.models import Conversation, ConversationStatus, Message, ShareLink, ToolCall
from jxai_app.store.dataimport import data_import
from jxai_app.store.export import export_zip
from jxai_app.store.shares import share_continue, share_create, share_open, share_revoke, share_update
from jxai_app.store.temporary import temporary_chats_purge
from tests.app.store_support import TurnFeed

pytestmark = pytest.mark.django_db


def _answer(user: Any, conversation_id: Any, question: str, answer: str, *, replaces: int | None = None,
            tool: bool = False) -> store.TurnStart:
    """One saved exchange; with ``tool``, the answer follows a ``lookup`` call and its result."""
    turn = store.message_send(user=user, conversation_id=conversation_id, text=question, replaces=replaces)
    feed = TurnFeed(turn)
    if tool:
        feed.tool_call_start("call_1", "lookup")
        feed.tool_call_delta("call_1", '{"q":"x"}')
        assert feed.finish_round(stop_reason="tool_calls")
        feed.attach_tool_result(call_id="call_1", content='{"success":true,"data":"<b>found</b>"}')
        assert feed.begin_round()
    feed.add_delta(answer)
    assert feed.finish_round(stop_reason="stop", last=True)
    return turn


@pytest.fixture
def shared(user: Any) -> Conversation:
    """Alice's conversation: custom instructions as its system message, a first branch with
    a tool call, then an edited question (the active branch) with a tool call too."""
    conversation = store.conversation_create(user=user, model="m", system_prompt="SECRET INSTRUCTIONS")
    first = _answer(user, conversation.pk, "old question", "old answer")
    _answer(user, conversation.pk, "new question", "new answer", replaces=first.user_message.pk, tool=True)
    return conversation


def _client(user: Any | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def test_the_snapshot_is_the_active_branch_and_only_the_tokens_hash_is_kept(user: Any, shared: Conversation) -> None:
    link, token = share_create(user=user, conversation_id=shared.pk)
    assert len(token) >= 43 and link.token_hash == hashlib.sha256(token.encode()).hexdigest()
    row = json.dumps(list(ShareLink.objects.filter(pk=link.pk).values())[0], default=str)
    assert token not in row
    messages = link.snapshot["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "new question"), ("assistant", ""), ("tool", '{"success":true,"data":"<b>found</b>"}'),
        ("assistant", "new answer")]
    assert messages[1]["toolCalls"] == [{"id": "call_1", "name": "lookup", "arguments": '{"q":"x"}',
                                         "result": {"success": True, "data": "<b>found</b>"}, "success": True}]
    kept = json.dumps(link.snapshot)
    assert "SECRET" not in row and "old question" not in kept and "old answer" not in kept
    assert link.scope == "signed_in" and link.expires_at is None

    _answer(user, shared.pk, "after sharing", "later answer")
    assert "after sharing" not in json.dumps(share_open(token=token, viewer=user).snapshot)
    share_update(user=user, share_id=link.pk)
    assert "later answer" in json.dumps(share_open(token=token, viewer=user).snapshot)


def test_scopes_signed_in_groups_and_public(user: Any, other_user: Any, shared: Conversation,
                                            django_user_model: Any, settings: Any) -> None:
    team = Group.objects.create(name="team")
    user.groups.add(team)
    member = django_user_model.objects.create_user("bob")
    member.groups.add(team)
    _, everyone = share_create(user=user, conversation_id=shared.pk)
    _, grouped = share_create(user=user, conversation_id=shared.pk, scope="groups", group_ids=[team.pk])
    assert _client(other_user).get(f"/s/{everyone}").status_code == 200
    anonymous = _client(None).get(f"/s/{everyone}")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert _client(None).get(f"/s/{secrets.token_urlsafe(32)}")["Location"].startswith("/accounts/login/")
    assert _client(member).get(f"/s/{grouped}").status_code == 200
    assert _client(user).get(f"/s/{grouped}").status_code == 200
    outsider = _client(other_user).get(f"/s/{grouped}")
    unknown = _client(other_user).get(f"/s/{secrets.token_urlsafe(32)}")
    assert outsider.status_code == unknown.status_code == 404 and outsider.content == unknown.content

    with pytest.raises(ProblemError) as refused:
        share_create(user=user, conversation_id=shared.pk, scope="groups", group_ids=[Group.objects.create(name="x").pk])
    assert refused.value.slug == "invalid-request"
    with pytest.raises(ProblemError) as refused:
        share_create(user=user, conversation_id=shared.pk, scope="public")
    assert refused.value.slug == "forbidden"
    assert _client(user).post("/shares", {"conversationId": str(shared.pk), "scope": "public"},
                              content_type="application/json").status_code == 403

    settings.JXAI_PUBLIC_SHARES = True
    _, public = share_create(user=user, conversation_id=shared.pk, scope="public")
    page = _client(None).get(f"/s/{public}")
    assert page.status_code == 200 and b"share-continue" not in page.content
    settings.JXAI_PUBLIC_SHARES = False
    assert _client(None).get(f"/s/{public}").status_code == 302, "turned off: no longer open to anyone"


def test_revoked_expired_and_unknown_links_answer_the_same_404(user: Any, other_user: Any, shared: Conversation,
                                                               ) -> None:
    viewer = _client(other_user)
    revoked, revoked_token = share_create(user=user, conversation_id=shared.pk)
    expired, expired_token = share_create(user=user, conversation_id=shared.pk, expires_in_days=1)
    live, live_token = share_create(user=user, conversation_id=shared.pk, expires_in_days=7)
    page = viewer.get(f"/s/{revoked_token}")
    assert page.status_code == 200
    assert page["Referrer-Policy"] == "no-referrer" and page["X-Robots-Tag"] == "noindex"
    assert "script-src 'self'" in page["Content-Security-Policy"]
    assert b'data-testid="composer"' not in page.content and b"/ws/chat/" not in page.content
    assert b"new answer" in page.content and str(shared.pk).encode() not in page.content

    share_revoke(user=user, share_id=revoked.pk)
    ShareLink.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    answers = [viewer.get(f"/s/{t}") for t in (revoked_token, expired_token, secrets.token_urlsafe(32), "x")]
    assert {a.status_code for a in answers} == {404}
    assert len({a.content for a in answers}) == 1
    assert all(a["Referrer-Policy"] == "no-referrer" and a["X-Robots-Tag"] == "noindex" for a in answers)
    assert viewer.post(f"/s/{revoked_token}/continue").content == answers[0].content

    viewer.get(f"/s/{live_token}")
    assert ShareLink.objects.get(pk=live.pk).view_count == 1
    assert ShareLink.objects.get(pk=revoked.pk).view_count == 1, "refused views are not counted"


def test_continue_copies_the_snapshot_into_a_new_conversation_of_the_viewer(user: Any, other_user: Any,
                                                                             shared: Conversation) -> None:
    _, token = share_create(user=user, conversation_id=shared.pk)
    answer = _client(other_user).post(f"/s/{token}/continue")
    assert answer.status_code == 302
    copy = Conversation.objects.get(owner=other_user)
    assert answer["Location"] == f"/c/{copy.pk}"
    _, path = store.message_list(user=other_user, conversation_id=copy.pk)
    assert [(m.role, m.content) for m in path.messages] == [
        ("user", "new question"), ("assistant", ""), ("tool", '{"success":true,"data":"<b>found</b>"}'),
        ("assistant", "new answer")]
    assert [(c.name, c.result) for c in path.messages[1].tool_calls.all()] == [
        ("lookup", {"success": True, "data": "<b>found</b>"})]
    assert copy.title == "old question" and copy.status == ConversationStatus.IDLE
    assert not Message.objects.filter(conversation=copy, role="system").exists()
    # The copy is the viewer's own conversation: a new turn continues it.
    _answer(other_user, copy.pk, "go on", "more")
    assert Message.objects.filter(conversation=shared).count() == 7, "the owner's conversation is untouched"


def test_another_conversation_is_never_reachable_through_a_share(user: Any, other_user: Any,
                                                                  shared: Conversation) -> None:
    private = store.conversation_create(user=user, model="m")
    _answer(user, private.pk, "private question", "private answer")
    link, token = share_create(user=user, conversation_id=shared.pk)
    with pytest.raises(ProblemError):
        share_create(user=other_user, conversation_id=private.pk)
    with pytest.raises(ProblemError):
        share_update(user=other_user, share_id=link.pk)
    with pytest.raises(ProblemError):
        share_revoke(user=other_user, share_id=link.pk)
    mallory = _client(other_user)
    assert mallory.post("/shares", {"conversationId": str(private.pk)}, content_type="application/json").status_code == 404
    assert mallory.post(f"/shares/{link.pk}/revoke").status_code == 404
    assert mallory.get("/shares").json()["shares"] == []
    share_continue(token=token, viewer=other_user, model_for=str)
    copy = Conversation.objects.get(owner=other_user)
    with pytest.raises(ProblemError):
        store.conversation_get(user=other_user, conversation_id=shared.pk)
    seen = json.dumps([m.content for m in Message.objects.filter(conversation=copy)])
    assert "private" not in seen and "old question" not in seen
    assert ShareLink.objects.get(pk=link.pk).conversation_id == shared.pk


def test_the_owners_endpoints_create_list_update_and_revoke(user: Any, other_user: Any, shared: Conversation) -> None:
    owner = _client(user)
    created = owner.post("/shares", {"conversationId": str(shared.pk), "expiresInDays": 30},
                         content_type="application/json")
    assert created.status_code == 201
    body = created.json()
    token = body["url"].rsplit("/s/", 1)[1]
    assert body["scope"] == "signed_in" and body["expiresAt"] and body["viewCount"] == 0
    listed = owner.get("/shares").json()
    assert [s["id"] for s in listed["shares"]] == [body["id"]] and "url" not in listed["shares"][0]
    assert listed["scopes"] == ["signed_in"], "no group to choose: the dialog does not offer chosen groups"
    user.groups.add(Group.objects.create(name="research"))
    assert owner.get("/shares").json()["scopes"] == ["signed_in", "groups"]
    assert owner.post("/shares", {"conversationId": str(shared.pk), "expiresInDays": 0},
                      content_type="application/json").status_code == 400
    assert owner.post("/shares", "[1]", content_type="application/json").status_code == 400
    assert owner.post(f"/shares/{body['id']}/update").json()["snapshotAt"] >= body["snapshotAt"]
    assert _client(None).get("/shares").status_code == 401
    unknown = owner.post(f"/shares/{body['id']}/delete")
    assert unknown.status_code == 404 and unknown["Content-Type"] == "application/problem+json"
    assert owner.get("/shares").json()["shares"] != [], "an action other than update or revoke changes nothing"
    assert owner.post(f"/shares/{body['id']}/revoke").status_code == 204
    assert owner.get("/shares").json()["shares"] == []
    assert _client(other_user).get(f"/s/{token}").status_code == 404
    assert owner.post(f"/shares/{body['id']}/revoke").status_code == 404


def test_staff_list_and_revoke_share_links_in_admin(user: Any, other_user: Any, shared: Conversation,
                                                    django_user_model: Any) -> None:
    link, token = share_create(user=user, conversation_id=shared.pk)
    admin_user = django_user_model.objects.create_superuser("root", password="pw")
    staff = _client(admin_user)
    listing = staff.get("/admin/jxai_app/sharelink/")
    assert listing.status_code == 200 and str(link.pk).encode() in listing.content and b"alice" in listing.content
    assert b"new answer" not in listing.content
    answer = staff.post("/admin/jxai_app/sharelink/", {"action": "revoke", "_selected_action": [str(link.pk)]})
    assert answer.status_code == 302
    assert _client(other_user).get(f"/s/{token}").status_code == 404


# ------------------------------------------------------------------ temporary chats

def test_temporary_chats_are_left_out_of_the_list_and_search(user: Any) -> None:
    kept = store.message_send(user=user, conversation_id=None, text="visible dough", model="m")
    temporary = store.message_send(user=user, conversation_id=None, text="hidden dough", model="m", temporary=True)
    assert temporary.conversation.temporary and not kept.conversation.temporary
    assert list(store.conversation_list(user=user)) == [kept.conversation]
    assert store.conversation_page(user=user, size=10)[0] == [kept.conversation]
    assert [r["id"] for r in store.conversation_search(owner=user, query="dough")] == [str(kept.conversation.pk)]
    assert [r["conversation_id"] for r in store.message_search(owner=user, query="hidden")] == []
    assert store.conversation_get(user=user, conversation_id=temporary.conversation_id).temporary


def test_the_purge_removes_idle_temporary_chats_but_never_a_running_or_waiting_one(user: Any, settings: Any) -> None:
    def chat(text: str, **fields: Any) -> Conversation:
        turn = _answer(user, None, text, "ok") if not fields.pop("running", False) else \
            store.message_send(user=user, conversation_id=None, text=text, model="m", temporary=True)
        conversation = Conversation.objects.get(pk=turn.conversation_id)
        Conversation.objects.filter(pk=conversation.pk).update(temporary=True, **fields)
        return conversation

    idle = chat("idle")
    running = chat("running", running=True)
    waiting = chat("waiting", status=ConversationStatus.AWAITING_APPROVAL)
    kept = _answer(user, None, "not temporary", "ok").conversation
    settings.JXAI_TEMPORARY_CHAT_HOURS = 24
    assert temporary_chats_purge() == [], "nothing is 24 hours idle yet"
    later = timezone.now() + timedelta(hours=25)
    assert temporary_chats_purge(now=later, dry_run=True) == [idle.pk]
    assert Conversation.objects.filter(pk=idle.pk).exists()
    assert temporary_chats_purge(now=later) == [idle.pk]
    assert set(Conversation.objects.values_list("pk", flat=True)) == {running.pk, waiting.pk, kept.pk}
    assert not Message.objects.filter(conversation_id=idle.pk).exists()
    assert not ToolCall.objects.filter(message__conversation_id=idle.pk).exists()
    assert temporary_chats_purge(hours=1, now=timezone.now() + timedelta(hours=2)) == []


def test_a_temporary_chat_cannot_be_shared(user: Any) -> None:
    temporary = _answer(user, None, "just between us", "ok").conversation
    Conversation.objects.filter(pk=temporary.pk).update(temporary=True)
    with pytest.raises(ProblemError) as refused:
        share_create(user=user, conversation_id=temporary.pk)
    assert refused.value.problem["status"] == 409
    answer = _client(user).post("/shares", {"conversationId": str(temporary.pk)}, content_type="application/json")
    assert answer.status_code == 409 and answer["Content-Type"] == "application/problem+json"
    assert "temporary chat cannot be shared" in answer.json()["detail"]
    assert not ShareLink.objects.exists()


def test_a_temporary_chat_is_exported_marked_and_imported_still_temporary(user: Any, other_user: Any,
                                                                           settings: Any) -> None:
    temporary = _answer(user, None, "fleeting", "ok").conversation
    Conversation.objects.filter(pk=temporary.pk).update(temporary=True)
    kept = _answer(user, None, "lasting", "ok").conversation
    exported = b"".join(export_zip(user))
    archive = zipfile.ZipFile(io.BytesIO(exported))
    marks = {pk: json.loads(archive.read(f"conversations/{pk}/conversation.json"))["temporary"]
             for pk in (temporary.pk, kept.pk)}
    assert marks == {temporary.pk: True, kept.pk: False}

    report = data_import(user=other_user, data=exported, quota=None)
    imported = {c.title: c for c in Conversation.objects.filter(pk__in=[i["id"] for i in report.imported])}
    assert imported["fleeting"].temporary and not imported["lasting"].temporary
    assert list(store.conversation_list(user=other_user)) == [imported["lasting"]]
    settings.JXAI_TEMPORARY_CHAT_HOURS = 24
    purged = temporary_chats_purge(now=timezone.now() + timedelta(hours=25))
    assert set(purged) == {temporary.pk, imported["fleeting"].pk}
    assert Conversation.objects.filter(pk=imported["lasting"].pk).exists()
