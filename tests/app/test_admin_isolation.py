"""Admin isolation (docs/security.md, threats 1b, 6, 7a, 7b): message content only with ``view_conversation``,
no admin at all without staff status, and a transcript that escapes everything."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from jxai_app.models import ApiToken, Conversation, Message, ToolCall, UsageLedger

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
ESCAPED = ("&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;")

# Words that exist only inside what was said: none may reach a staff member without the
# content permission, on any page.
SAID = ("PANGOLIN-TITLE", "QUOKKA-QUESTION", "NARWHAL-ANSWER", "AXOLOTL-THOUGHT", "OKAPI-ARGUMENT",
        "TAPIR-RESULT", "DUGONG-TOOL-REPLY", "GHARIAL-ERROR")


def _conversation(owner: Any, *, title: str, words: dict[str, str], model: str = "fast") -> Conversation:
    now = timezone.now()
    conversation = Conversation.objects.create(owner=owner, title=title, model=model, status="error",
                                               last_error=words["error"], token_count=42,
                                               last_problem={"detail": words["error"]})
    question = Message.objects.create(conversation=conversation, position=0, role="user", content=words["question"])
    assistant = Message.objects.create(conversation=conversation, parent=question, position=1, role="assistant",
                                       content=words["answer"], reasoning_content=words["thought"], model=model,
                                       usage={"inputTokens": 30, "outputTokens": 12}, stop_reason="tool_calls")
    ToolCall.objects.create(message=assistant, position=0, call_id="call_1", name="lookup",
                            arguments='{"q": "%s"}' % words["argument"].replace('"', '\\"'),
                            result={"success": True, "data": words["result"]}, success=True,
                            started_at=now, finished_at=now)
    conversation.active_leaf = Message.objects.create(conversation=conversation, parent=assistant, position=2,
                                                      role="tool", tool_call_id="call_1", content=words["tool"])
    conversation.save(update_fields=["active_leaf"])  # one branch: the transcript (docs/store.md "Branches")
    return conversation


@pytest.fixture
def secret_conversation(user: Any) -> Conversation:
    return _conversation(user, title=SAID[0], words=dict(zip(
        ("question", "answer", "thought", "argument", "result", "tool", "error"), SAID[1:])))


def _staff(django_user_model: Any, name: str, *, content: bool) -> Any:
    """A staff member with every jxai_app permission, with or without ``view_conversation``."""
    staff = django_user_model.objects.create_user(name, is_staff=True)
    perms = Permission.objects.filter(content_type__app_label="jxai_app")
    if not content:
        perms = perms.exclude(codename="view_conversation")
    staff.user_permissions.add(*perms, *Permission.objects.filter(codename__in=["view_user", "change_user"]))
    return staff


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _pages(conversation: Conversation, owner: Any) -> dict[str, str]:
    pk = conversation.pk
    changelist = reverse("admin:jxai_app_conversation_changelist")
    return {
        "index": reverse("admin:index"),
        "app index": reverse("admin:app_list", args=["jxai_app"]),
        "changelist": changelist,
        "search by message text": changelist + "?q=QUOKKA",  # the box echoes the query
        "search by title": changelist + "?q=PANGOLIN",
        "search by answer": changelist + "?q=NARWHAL",
        "change page": reverse("admin:jxai_app_conversation_change", args=[pk]),
        "history": reverse("admin:jxai_app_conversation_history", args=[pk]),
        "delete page": reverse("admin:jxai_app_conversation_delete", args=[pk]),
        "usage": reverse("admin:jxai_app_usageledger_changelist"),
        "registered tools": reverse("admin:jxai_app_registered_tools"),
        "user page": reverse("admin:auth_user_change", args=[owner.pk]),
    }


def test_staff_without_view_conversation_see_no_message_content_anywhere(
    django_user_model: Any, secret_conversation: Conversation, user: Any
) -> None:
    UsageLedger.objects.create(user=user, day=timezone.now().date(), input_tokens=30, output_tokens=12, requests=1)
    client = _client(_staff(django_user_model, "operator", content=False))
    for label, url in _pages(secret_conversation, user).items():
        response = client.get(url)
        assert response.status_code == 200, label
        body = response.content.decode()
        leaked = [word for word in SAID if word in body]
        assert not leaked, f"{label} shows {leaked}"
    listing = client.get(reverse("admin:jxai_app_conversation_changelist"))
    assert [c.pk for c in listing.context["cl"].result_list] == [secret_conversation.pk]
    for query in ("QUOKKA", "PANGOLIN", "NARWHAL"):  # no search is an oracle on content
        found = client.get(reverse("admin:jxai_app_conversation_changelist"), {"q": query})
        assert list(found.context["cl"].result_list) == [], query
    assert "export_openai_json" not in listing.content.decode()

    transcript = client.get(reverse("admin:jxai_app_conversation_transcript", args=[secret_conversation.pk]))
    assert transcript.status_code == 403 and not any(w in transcript.content.decode() for w in SAID)
    export = client.post(reverse("admin:jxai_app_conversation_changelist"),
                         {"action": "export_openai_json", "_selected_action": [str(secret_conversation.pk)]})
    assert export.get("Content-Type") != "application/json"
    assert not any(word.encode() in export.content for word in SAID)
    # Editing the conversation through the change form cannot touch the (hidden) title.
    change = client.get(reverse("admin:jxai_app_conversation_change", args=[secret_conversation.pk]))
    assert 'name="title"' not in change.content.decode()


@pytest.mark.parametrize("content", [False, True])
def test_list_pages_filter_only_by_their_declared_filters(django_user_model: Any, secret_conversation: Conversation,
                                                          user: Any, content: bool) -> None:
    client = _client(_staff(django_user_model, "operator", content=content))
    conversations = reverse("admin:jxai_app_conversation_changelist")
    undeclared = {
        conversations: [{"title__startswith": "PAN"}, {"title__startswith": "X"}, {"title": SAID[0]},
                        {"last_error__icontains": "GHARIAL"}, {"last_problem__icontains": "x"},
                        {"title__regex": "("}, {"title__regex": "^(a+)+b"}, {"messages__content__contains": "Q"},
                        {"owner__password__startswith": "p"}, {"turn_id__isnull": "1"}],
        reverse("admin:jxai_app_apitoken_changelist"): [{"secret_hash__startswith": "a"}],
        reverse("admin:auth_user_changelist"): [{"password__startswith": "pbkdf2"}, {"email__regex": "("}],
        reverse("admin:jxai_app_userlimits_changelist"): [{"user__password__startswith": "p"}],
    }
    for url, queries in undeclared.items():
        for query in queries:
            response = client.get(url, query)
            assert response.status_code == 400, (url, query)  # the same answer whether or not it matches
            assert not any(word in response.content.decode() for word in SAID), (url, query)
    declared = [{"status__exact": "error"}, {"model": "fast"}, {"owner__id__exact": user.pk},
                {"created_at__year": secret_conversation.created_at.year}, {"status__isnull": "False"}]
    for query in declared:
        listed = client.get(conversations, query)
        assert listed.status_code == 200 and list(listed.context["cl"].result_list) == [secret_conversation], query
    usage = client.get(reverse("admin:jxai_app_usageledger_changelist"), {"user__id__exact": user.pk})
    assert usage.status_code == 200
    assert client.get(reverse("admin:auth_user_changelist"), {"is_staff__exact": "1"}).status_code == 200


def test_the_same_pages_show_content_with_the_permission(
    django_user_model: Any, secret_conversation: Conversation, user: Any
) -> None:
    """The control group: the words are really on those pages for a reader."""
    client = _client(_staff(django_user_model, "reader", content=True))
    pages = _pages(secret_conversation, user)
    assert "PANGOLIN-TITLE" in client.get(pages["changelist"]).content.decode()
    change = client.get(pages["change page"]).content.decode()
    for word in SAID:
        assert word in change, word
    found = client.get(pages["changelist"], {"q": "QUOKKA-QUESTION"})
    assert [c.pk for c in found.context["cl"].result_list] == [secret_conversation.pk]
    transcript = client.get(reverse("admin:jxai_app_conversation_transcript", args=[secret_conversation.pk]))
    assert all(word in transcript.content.decode() for word in SAID[1:])


@pytest.mark.parametrize("who", ["anonymous", "non-staff"])
def test_non_staff_are_sent_to_the_admin_login(who: str, django_user_model: Any,
                                               secret_conversation: Conversation, user: Any) -> None:
    client = Client()
    if who == "non-staff":
        client.force_login(user)  # the conversation's own owner, but not staff
    token, _ = ApiToken.issue(user=user, name="ci")
    urls = [*_pages(secret_conversation, user).values(),
            reverse("admin:jxai_app_conversation_transcript", args=[secret_conversation.pk]),
            reverse("admin:jxai_app_apitoken_change", args=[token.pk])]
    login = reverse("admin:login")
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(login + "?next="), url
    response = client.post(reverse("admin:jxai_app_conversation_changelist"),
                           {"action": "export_openai_json", "_selected_action": [str(secret_conversation.pk)]})
    assert response.status_code == 302 and response["Location"].startswith(login)
    response = client.post(reverse("admin:jxai_app_apitoken_changelist"),
                           {"action": "revoke", "_selected_action": [str(token.pk)]})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.is_active


def test_the_transcript_escapes_everything(django_user_model: Any) -> None:
    payload = SCRIPT + IMG
    owner = django_user_model.objects.create_user("owner" + payload)  # the ORM skips username validation
    conversation = _conversation(owner, title="title " + payload, model="model" + payload, words={
        key: f"{key} {payload}" for key in ("question", "answer", "thought", "argument", "result", "tool", "error")})
    ToolCall.objects.filter(message__conversation=conversation).update(name="tool" + payload, call_id="id" + payload)
    Message.objects.filter(conversation=conversation, role="tool").update(tool_call_id="id" + payload)

    client = _client(_staff(django_user_model, "reader", content=True))
    for url in (reverse("admin:jxai_app_conversation_transcript", args=[conversation.pk]),
                reverse("admin:jxai_app_conversation_change", args=[conversation.pk])):
        body = client.get(url).content.decode()
        assert SCRIPT not in body and IMG not in body and "onerror=alert(1)>" not in body, url
        assert "<script>alert" not in body and "<img src=x" not in body, url
        for escaped in ESCAPED:
            assert escaped in body, url
    transcript = client.get(reverse("admin:jxai_app_conversation_transcript", args=[conversation.pk])).content.decode()
    # Every place a payload was planted shows it escaped: question, answer, thought, tool
    # reply, error, arguments (JSON-escaped inside), the call's name and id, owner, model.
    assert transcript.count(ESCAPED[0]) >= 9


def test_revoking_an_api_token_in_admin_is_final(django_user_model: Any, user: Any) -> None:
    token, plaintext = ApiToken.issue(user=user, name="laptop")
    client = _client(django_user_model.objects.create_superuser("root", "root@example.com", None))
    response = client.post(reverse("admin:jxai_app_apitoken_changelist"),
                           {"action": "revoke", "_selected_action": [str(token.pk)]}, follow=True)
    assert "Revoked 1 token(s)." in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    listing = client.get(reverse("admin:jxai_app_apitoken_changelist")).content.decode()
    assert "revoked" in listing and plaintext not in listing
    change = client.get(reverse("admin:jxai_app_apitoken_change", args=[token.pk])).content.decode()
    assert 'name="revoked_at' not in change  # read-only: a revoked token cannot be revived in admin
    chat = Client().post("/ai/chat", data=b'{"messages": [{"role": "user", "content": "hi"}]}',
                         content_type="application/json", headers={"Authorization": f"Bearer {plaintext}"})
    assert chat.status_code == 401 and chat["Content-Type"] == "application/problem+json"


def _issue_in_admin(client: Client, owner: Any) -> bool:
    """Post admin's add-token form for ``owner``; True when a token was issued (the page
    that shows its plaintext once), False when the form refused the owner."""
    before = ApiToken.objects.count()
    response = client.post(reverse("admin:jxai_app_apitoken_add"), {"user": owner.pk, "name": "minted"})
    issued = ApiToken.objects.count() > before
    assert issued == ("plaintext" in (response.context or {}))
    if not issued:
        assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    return issued


@pytest.mark.parametrize("staff_for_users", [False, True])
def test_staff_issue_api_tokens_for_themselves_and_only_a_superuser_for_anyone(
    settings: Any, django_user_model: Any, user: Any, staff_for_users: bool
) -> None:
    settings.JXAI_STAFF_TOKENS_FOR_USERS = staff_for_users
    staff = _staff(django_user_model, "helpdesk", content=False)  # holds add_apitoken
    other_staff = _staff(django_user_model, "auditor", content=True)
    root = django_user_model.objects.create_superuser("root", "root@example.com", None)
    client = _client(staff)

    assert _issue_in_admin(client, staff)
    assert not _issue_in_admin(client, root)
    assert not _issue_in_admin(client, other_staff)
    assert _issue_in_admin(client, user) is staff_for_users  # a user without staff rights
    assert set(ApiToken.objects.values_list("user__username", flat=True)) == \
        {"helpdesk", *(["alice"] if staff_for_users else [])}
    superuser = _client(root)
    assert all(_issue_in_admin(superuser, owner) for owner in (user, other_staff, root))
