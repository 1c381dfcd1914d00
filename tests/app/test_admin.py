"""Admin pages through Django's test client: staff with and without the content permission."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse

from jxai_app import store
from jxai_app.models import ApiToken, Conversation, ToolPolicy, UserLimits
from tests.app.conftest import FakeClock
from tests.app.store_support import TurnFeed

pytestmark = pytest.mark.django_db

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _staff(django_user_model: Any, name: str, *perms: str) -> Any:
    user = django_user_model.objects.create_user(name, is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="jxai_app"))
    return user


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def reader(django_user_model: Any) -> Any:
    return _staff(django_user_model, "reader", "view_conversation", "view_toolpolicy")


@pytest.fixture
def conversations(user: Any, other_user: Any, clock: FakeClock) -> dict[str, Conversation]:
    weather = store.conversation_create(user=user, model="gpt-4o")
    rec = TurnFeed(store.message_send(user=user, conversation_id=weather.pk, text="Weather in Oslo?"))
    rec.add_reasoning("Need the weather tool.")
    rec.tool_call_start("call_1", "get_weather")
    rec.tool_call_delta("call_1", '{"city":"Oslo","note":"' + XSS.replace('"', '\\"') + '"}')
    rec.finish_round(stop_reason="tool_calls", usage={"inputTokens": 10, "outputTokens": 4})
    rec.attach_tool_result(call_id="call_1", content='{"success":true,"data":{"temp_c":7}}')
    rec.begin_round()
    rec.add_delta("It is 7 °C. " + XSS)
    rec.finish_round(stop_reason="stop", usage={"inputTokens": 30, "outputTokens": 9}, last=True)

    failed = store.conversation_create(user=other_user, model="claude")
    rec = TurnFeed(store.message_send(user=other_user, conversation_id=failed.pk,
                                                text="Summarise the pangolin report"))
    rec.fail("Provider overloaded", {"type": "https://jxai.dev/problems/upstream-failure"})
    return {"weather": weather, "failed": failed}


CHANGELIST = "admin:jxai_app_conversation_changelist"


def _listed(response: Any) -> set[str]:
    return {str(c.pk) for c in response.context["cl"].result_list}


def test_changelist_filters_and_search(reader: Any, conversations: dict[str, Conversation], user: Any) -> None:
    client = _client(reader)
    url = reverse(CHANGELIST)
    everything = client.get(url)
    assert everything.status_code == 200
    assert _listed(everything) == {str(c.pk) for c in conversations.values()}
    weather = next(c for c in everything.context["cl"].result_list if c.pk == conversations["weather"].pk)
    assert (weather.message_count, weather.token_count) == (4, 39)
    body = everything.content.decode()
    assert "Weather in Oslo?" in body and "transcript" in body

    assert _listed(client.get(url, {"status__exact": "error"})) == {str(conversations["failed"].pk)}
    assert _listed(client.get(url, {"model": "gpt-4o"})) == {str(conversations["weather"].pk)}
    assert _listed(client.get(url, {"owner__id__exact": user.pk})) == {str(conversations["weather"].pk)}
    date = conversations["weather"].created_at.date()
    by_date = client.get(url, {"created_at__year": date.year, "created_at__month": date.month,
                               "created_at__day": date.day})
    assert _listed(by_date) == {str(c.pk) for c in conversations.values()}
    assert _listed(client.get(url, {"q": "pangolin"})) == {str(conversations["failed"].pk)}, "title search"
    assert _listed(client.get(url, {"q": "7 °C"})) == {str(conversations["weather"].pk)}, "message text search"
    assert _listed(client.get(url, {"q": "no such words"})) == set()


def test_change_page_shows_messages_and_calls_read_only(reader: Any, conversations: dict[str, Conversation]) -> None:
    response = _client(reader).get(reverse("admin:jxai_app_conversation_change",
                                           args=[conversations["weather"].pk]))
    assert response.status_code == 200
    body = response.content.decode()
    assert "Need the weather tool." in body and "get_weather" in body and "Transcript" in body
    assert XSS not in body and "&lt;script&gt;" in body
    assert 'name="messages-0-content"' not in body, "inline rows are read-only"


def test_transcript_is_readable_and_escaped(reader: Any, conversations: dict[str, Conversation]) -> None:
    url = reverse("admin:jxai_app_conversation_transcript", args=[conversations["weather"].pk])
    response = _client(reader).get(url)
    assert response.status_code == 200
    body = response.content.decode()
    for text in ("Weather in Oslo?", "Need the weather tool.", "get_weather", "call_1", "succeeded",
                 "&quot;city&quot;: &quot;Oslo&quot;", "&quot;temp_c&quot;: 7", "10 in / 4 out"):
        assert text in body, text
    assert XSS not in body and "onerror=alert(1)>" not in body
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in body
    failed = _client(reader).get(reverse("admin:jxai_app_conversation_transcript",
                                         args=[conversations["failed"].pk]))
    assert "Provider overloaded" in failed.content.decode()


def test_export_action_downloads_openai_wire_json(reader: Any, conversations: dict[str, Conversation]) -> None:
    selected = [conversations["weather"].pk, conversations["failed"].pk]
    response = _client(reader).post(reverse(CHANGELIST), {
        "action": "export_openai_json", "_selected_action": [str(pk) for pk in selected],
    })
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"].startswith('attachment; filename="jxai-conversations-')
    documents = json.loads(response.content)
    by_id = {d["id"]: d for d in documents}
    weather = by_id[str(conversations["weather"].pk)]
    assert weather["owner"] == "alice" and weather["model"] == "gpt-4o"
    assert weather["messages"] == store.to_messages(conversations["weather"])
    assert [m["role"] for m in weather["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert weather["messages"][1]["reasoning_content"] == "Need the weather tool."
    assert by_id[str(conversations["failed"].pk)]["messages"] == [
        {"role": "user", "content": "Summarise the pangolin report"}]


def test_staff_without_any_conversation_permission_is_refused(django_user_model: Any,
                                                              conversations: dict[str, Conversation]) -> None:
    client = _client(_staff(django_user_model, "intern"))
    pk = conversations["weather"].pk
    for url in (reverse(CHANGELIST), reverse("admin:jxai_app_conversation_change", args=[pk]),
                reverse("admin:jxai_app_conversation_transcript", args=[pk])):
        response = client.get(url)
        assert response.status_code == 403, url
        assert "Oslo" not in response.content.decode()
    response = client.post(reverse(CHANGELIST), {"action": "export_openai_json", "_selected_action": [str(pk)]})
    assert response.status_code == 403


def test_staff_who_may_change_but_not_view_sees_no_message_content(
    django_user_model: Any, conversations: dict[str, Conversation]
) -> None:
    client = _client(_staff(django_user_model, "operator", "change_conversation"))
    pk = conversations["weather"].pk
    listing = client.get(reverse(CHANGELIST))
    assert listing.status_code == 200 and _listed(listing) == {str(c.pk) for c in conversations.values()}
    assert "export_openai_json" not in listing.content.decode()
    assert _listed(client.get(reverse(CHANGELIST), {"q": "7 °C"})) == set(), "no search over message text"
    change = client.get(reverse("admin:jxai_app_conversation_change", args=[pk]))
    assert change.status_code == 200
    body = change.content.decode()
    assert "It is 7 °C" not in body and "get_weather" not in body and "Need the weather tool." not in body
    assert client.get(reverse("admin:jxai_app_conversation_transcript", args=[pk])).status_code == 403
    export = client.post(reverse(CHANGELIST), {"action": "export_openai_json", "_selected_action": [str(pk)]})
    assert export.get("Content-Type") != "application/json"
    assert b"It is 7" not in export.content


def test_registered_tools_page(reader: Any, django_user_model: Any) -> None:
    from jxai_app.tools.registry import get_tool_registry

    team = Group.objects.create(name="analysts")
    policy = ToolPolicy.objects.create(tool_name="search_conversations", max_calls_per_turn=3)
    policy.allowed_groups.add(team)
    ToolPolicy.objects.create(tool_name="calculate", enabled=False)
    response = _client(reader).get(reverse("admin:jxai_app_registered_tools"))
    assert response.status_code == 200
    body = response.content.decode()
    names = [row["tool"].name for row in response.context["rows"]]
    assert names == [d.name for d in get_tool_registry().list()] and names
    for row in response.context["rows"]:
        assert row["schema"] == json.dumps(row["tool"].parameters, indent=2, ensure_ascii=False)
    who = {row["tool"].name: row["who"] for row in response.context["rows"]}
    assert who["search_conversations"] == "members of analysts, and superusers"
    assert who["calculate"] == "nobody (disabled)"
    assert who["current_datetime"] == "every user (no policy)"
    assert "at most 3 calls per turn" in body and "&quot;type&quot;: &quot;object&quot;" in body
    assert _client(_staff(django_user_model, "nobody")).get(
        reverse("admin:jxai_app_registered_tools")).status_code == 403


def test_api_token_created_in_admin_shows_the_secret_once(django_user_model: Any, user: Any) -> None:
    admin_user = django_user_model.objects.create_superuser("root", "root@example.com", None)
    client = _client(admin_user)
    response = client.post(reverse("admin:jxai_app_apitoken_add"), {"user": user.pk, "name": "ci"})
    assert response.status_code == 200
    plaintext = response.context["plaintext"]
    assert plaintext.startswith("jxai_") and plaintext in response.content.decode()
    token = ApiToken.objects.get(name="ci")
    assert token.user == user and token.secret_hash == ApiToken.hash_secret(plaintext)
    later = client.get(reverse("admin:jxai_app_apitoken_change", args=[token.pk])).content.decode()
    assert plaintext not in later and token.prefix in later
    client.post(reverse("admin:jxai_app_apitoken_changelist"),
                {"action": "revoke", "_selected_action": [str(token.pk)]})
    token.refresh_from_db()
    assert token.revoked_at is not None and not token.is_active


def test_limits_and_policies_are_editable(django_user_model: Any, user: Any) -> None:
    client = _client(django_user_model.objects.create_superuser("root", "root@example.com", None))
    response = client.post(reverse("admin:jxai_app_userlimits_add"),
                           {"user": user.pk, "turns_per_minute": 3, "tokens_per_day": ""})
    assert response.status_code == 302
    limits = UserLimits.objects.get(user=user)
    assert (limits.turns_per_minute, limits.tokens_per_day) == (3, None)
    for name in ("userlimits", "toolpolicy", "apitoken"):
        assert client.get(reverse(f"admin:jxai_app_{name}_changelist")).status_code == 200
    assert client.get(reverse("admin:jxai_app_conversation_add")).status_code == 403


def test_the_transcript_says_when_messages_are_on_other_branches(reader: Any, user: Any) -> None:
    """The transcript is the active path (docs/store.md "Branches"); when an edit or a
    regenerate left other branches, it says how many messages it does not show."""
    from jxai_app.models import Message
    from tests.support.chain import messages_chain

    conversation = Conversation.objects.create(owner=user, model="m", title="branches")
    question, _ = messages_chain(conversation, {"role": "user", "content": "first try"},
                                 {"role": "assistant", "content": "first answer"})
    url = reverse("admin:jxai_app_conversation_transcript", args=[conversation.pk])
    assert 'data-testid="transcript-branches"' not in _client(reader).get(url).content.decode()
    edited = Message.objects.create(conversation=conversation, position=2, role="user", content="second try")
    Conversation.objects.filter(pk=conversation.pk).update(active_leaf=edited)
    body = _client(reader).get(url).content.decode()
    assert "second try" in body and "first try" not in body
    assert 'data-testid="transcript-branches"' in body and "1 of 3 messages" in body


def test_the_transcript_marks_a_question_whose_turn_was_stopped(reader: Any, user: Any) -> None:
    """A Stop that saved no answer marks the question (docs/websocket.md "Branches"); the
    transcript says so, as the page does, instead of one question after another."""
    from tests.support.chain import messages_chain

    conversation = Conversation.objects.create(owner=user, model="m", title="stopped")
    stopped, _ = messages_chain(conversation, {"role": "user", "content": "a long story, please"},
                                {"role": "user", "content": "a short one then"})
    stopped.stopped = True
    stopped.save(update_fields=["stopped"])
    url = reverse("admin:jxai_app_conversation_transcript", args=[conversation.pk])
    body = _client(reader).get(url).content.decode()
    assert body.count('data-testid="admin-stopped"') == 1
    assert body.index("a long story, please") < body.index("Stopped — no answer was saved") < body.index("a short one")
