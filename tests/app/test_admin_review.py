"""Admin for review (docs/architecture.md "Admin") through Django's test client: the registered-tools
entry on the admin index, feedback (filter, column, inline, transcript, export), a long
conversation's paged messages, users' custom instructions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from jxai_app import store
from jxai_app.models import Conversation, Message
from tests.app.conftest import FakeClock
from tests.app.store_support import TurnFeed
from tests.app.test_admin import CHANGELIST, _client, _listed
from tests.app.test_admin import _staff as staff

pytestmark = pytest.mark.django_db


def _staff(django_user_model: Any, name: str, *perms: str) -> Client:
    return _client(staff(django_user_model, name, *perms))


def _answered(user: Any, question: str, answer: str) -> tuple[Conversation, int]:
    conversation = store.conversation_create(user=user, model="gpt-4o")
    recorder = TurnFeed(store.message_send(user=user, conversation_id=conversation.pk, text=question))
    recorder.add_delta(answer)
    recorder.finish_round(stop_reason="stop", last=True)
    return conversation, Message.objects.get(conversation=conversation, role="assistant").pk


def test_the_registered_tools_page_is_an_entry_of_its_own_on_the_admin_index(django_user_model: Any) -> None:
    url = reverse("admin:jxai_app_registered_tools")
    reader = _staff(django_user_model, "reader", "view_toolpolicy")
    for page in (reverse("admin:index"), reverse("admin:app_list", args=["jxai_app"])):
        body = reader.get(page).content.decode()
        assert f'<a href="{url}">Registered tools</a>' in body, page
    listed = [row["name"] for row in reader.get(reverse("admin:index")).context["app_list"][0]["models"]]
    assert "Registered tools" in listed and listed == sorted(listed)
    assert reader.get(url).status_code == 200
    other = _staff(django_user_model, "limits", "view_userlimits")             # may not see tool policies
    assert url not in other.get(reverse("admin:index")).content.decode()


def test_feedback_is_filtered_counted_and_shown_to_reviewers(user: Any, other_user: Any, clock: FakeClock,
                                                             django_user_model: Any) -> None:
    rated, answer = _answered(user, "Explain monads", "A monad is a burrito.")
    praised, good = _answered(other_user, "Capital of Italy?", "Rome.")
    silent, _ = _answered(user, "Hello", "Hi.")
    store.feedback_set(user=user, message_id=answer, rating="down", comment="Not helpful <b>at all</b>")
    store.feedback_set(user=other_user, message_id=good, rating="up")
    reader = _staff(django_user_model, "reader", "view_conversation")

    by_rating = {value: _listed(reader.get(reverse(CHANGELIST), {"feedback": value}))
                 for value in ("down", "up", "any", "none")}
    assert by_rating == {"down": {str(rated.pk)}, "up": {str(praised.pk)},
                         "any": {str(rated.pk), str(praised.pk)}, "none": {str(silent.pk)}}
    listing = reader.get(reverse(CHANGELIST)).content.decode()
    assert '<td class="field-feedback_summary">1 down</td>' in listing
    assert '<td class="field-feedback_summary">1 up</td>' in listing

    change = reader.get(reverse("admin:jxai_app_conversation_change", args=[rated.pk])).content.decode()
    assert "<strong>thumbs down</strong>: Not helpful &lt;b&gt;at all&lt;/b&gt;" in change
    transcript = reader.get(reverse("admin:jxai_app_conversation_transcript", args=[rated.pk])).content.decode()
    assert 'data-rating="down"' in transcript and "thumbs down</strong> — Not helpful &lt;b&gt;" in transcript
    export = reader.post(reverse(CHANGELIST), {"action": "export_openai_json", "_selected_action": [str(rated.pk)]})
    document = json.loads(export.content)[0]
    assert [{k: v for k, v in f.items() if k != "updated_at"} for f in document["feedback"]] == [
        {"position": 1, "answer": "A monad is a burrito.", "rating": "down", "comment": "Not helpful <b>at all</b>"}]
    assert document["messages"] == store.to_messages(rated)                     # the wire itself unchanged

    operator = _staff(django_user_model, "operator", "change_conversation")     # no content permission
    assert _listed(operator.get(reverse(CHANGELIST), {"feedback": "down"})) == {str(rated.pk)}
    page = operator.get(reverse("admin:jxai_app_conversation_change", args=[rated.pk])).content.decode()
    assert "Not helpful" not in page and "Not helpful" not in operator.get(reverse(CHANGELIST)).content.decode()


def test_a_conversation_with_hundreds_of_messages_shows_them_a_page_at_a_time(user: Any,
                                                                               django_user_model: Any) -> None:
    conversation = Conversation.objects.create(owner=user, model="gpt-4o", title="Long")
    Message.objects.bulk_create([
        Message(conversation=conversation, position=i, role="user" if i % 2 == 0 else "assistant",
                content=f"message number {i:03d}") for i in range(300)])
    reader = _staff(django_user_model, "reader", "view_conversation")
    url = reverse("admin:jxai_app_conversation_change", args=[conversation.pk])

    def shown(query: dict[str, str]) -> tuple[list[str], str]:
        body = reader.get(url, query).content.decode()
        return [n for n in (f"message number {i:03d}" for i in range(300)) if n in body], body

    first, body = shown({})
    assert first == [f"message number {i:03d}" for i in range(25)]
    assert "Messages 1–25 of 300 · page" in " ".join(body.split())
    assert '<a href="?messages_page=12">12</a>' in body and '<strong aria-current="page">1</strong>' in body
    assert shown({"messages_page": "12"})[0] == [f"message number {i:03d}" for i in range(275, 300)]
    assert shown({"messages_page": "99"})[0] == shown({"messages_page": "12"})[0]   # clamped to the last page
    assert shown({"messages_page": "x"})[0] == first


def test_custom_instructions_are_listed_read_only(user: Any, django_user_model: Any) -> None:
    store.instructions_set(user=user, text="Always answer in haiku. " * 10)
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(root)
    listing = client.get(reverse("admin:jxai_app_usersettings_changelist")).content.decode()
    assert "Always answer in haiku. Always answer" in listing and "…" in listing
    row = store.instructions_get(user=user)
    change = client.get(reverse("admin:jxai_app_usersettings_change",
                                args=[user.jxai_settings.pk])).content.decode()
    assert row.strip() in change and 'name="_save"' not in change
    assert client.get(reverse("admin:jxai_app_usersettings_add")).status_code == 403
