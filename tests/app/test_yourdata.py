"""Your data (docs/data.md): the export's archive and its round trip through the import, ChatGPT's
``conversations.json`` with branches, hostile files refused whole, retention's purge, and
account erasure. Real parts: the real database, Django's test clients against the real views
(the export streamed through the async view), the management command, admin, and a socket of
the real ASGI application.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import uuid
import zipfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.apps import apps
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.sessions.models import Session
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db.models import Sum
from django.test import AsyncClient, Client
from django.utils import timezone

from jxai_app import store
from jxai_app.store import attachments as store_attachments, export as store_export
from jxai_app.models import (
    Attachment, Conversation, ConversationStatus, ErasureRecord, Message, MessageFeedback, SignInEvent, ToolCall, UsageLedger,
)
from jxai_app.policy.usage import UsageCounts, ledger_add
from jxai_app.store.dataimport import MAX_DEPTH, MAX_TEXT_CHARS
from jxai_app.store.notes import note_save
from tests.app.attachment_support import media_root, png  # noqa: F401 (fixture)
from tests.app.store_support import TurnFeed

pytestmark = pytest.mark.django_db(transaction=True)

CHATGPT = Path(__file__).resolve().parent.parent / "data" / "chatgpt" / "conversations.json"
LOCAL = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]


def _answer(turn: store.TurnStart, text: str) -> None:
    feed = TurnFeed(turn)
    feed.add_delta(text)
    assert feed.finish_round(stop_reason="stop", last=True)


def _build(user: Any) -> Conversation:
    """A conversation with every kind of row: a system prompt; a question answered after a
    tool call (reasoning, arguments, result); that question edited (a branch) and the edit's
    answer regenerated (another); feedback; the first branch active again. Plus a note and
    custom instructions."""
    note_save(owner=user, text="Buy oat milk")
    store.instructions_set(user=user, text="Answer in British English.")
    conversation = store.conversation_create(user=user, model="gpt-4o", system_prompt="Be brief.")
    first = store.message_send(user=user, conversation_id=conversation.pk, text="Weather in Oslo?")
    feed = TurnFeed(first)
    feed.add_reasoning("I should look it up.")
    feed.tool_call_start("call_0", "get_weather")
    feed.tool_call_delta("call_0", '{"city": "Oslo"}')
    feed.tool_call_end("call_0")
    assert feed.finish_round(stop_reason="tool_calls", usage={"inputTokens": 30, "outputTokens": 5})
    feed.attach_tool_result(call_id="call_0", content='{"success": true, "temp_c": 4}')
    assert feed.begin_round()
    feed.add_delta("It is **4 °C** in Oslo.")
    assert feed.finish_round(stop_reason="stop", last=True)
    edit = store.message_send(user=user, conversation_id=conversation.pk, text="Weather in Bergen?",
                              replaces=first.user_message.pk)
    _answer(edit, "Rainy.")
    answer = Message.objects.get(conversation=conversation, content="Rainy.")
    _answer(store.answer_regenerate(user=user, conversation_id=conversation.pk, message_id=answer.pk), "Wet, 7 °C.")
    kept = Message.objects.get(conversation=conversation, content="It is **4 °C** in Oslo.")
    store.feedback_set(user=user, message_id=kept.pk, rating="up", comment="useful")
    store.branch_switch(user=user, conversation_id=conversation.pk, message_id=first.user_message.pk)
    return Conversation.objects.get(pk=conversation.pk)


def _tree(conversation: Conversation) -> dict[str, Any]:
    """The conversation as comparable values: each message (parent by place, every field the
    export carries, calls, feedback) and the active leaf by place."""
    messages = list(conversation.messages.order_by("position").prefetch_related("tool_calls"))
    place = {m.pk: i for i, m in enumerate(messages)}
    rows = []
    for m in messages:
        feedback = MessageFeedback.objects.filter(message=m).values_list("rating", "comment").first()
        calls = [(c.call_id, c.name, c.arguments, c.result, c.success, c.finished_at is not None)
                 for c in m.tool_calls.order_by("position")]
        rows.append((place.get(m.parent_id), m.role, m.content, m.reasoning_content, m.tool_call_id, m.model,
                     m.stop_reason, m.stopped, m.usage, m.created_at, calls, feedback))
    return {"title": conversation.title, "model": conversation.model, "created_at": conversation.created_at,
            "updated_at": conversation.updated_at, "messages": rows, "leaf": place[conversation.active_leaf_id]}


async def _export(user: Any) -> bytes:
    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get("/data/export")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/zip" and "attachment" in response["Content-Disposition"]
    return b"".join([piece async for piece in response.streaming_content])


def _import(user: Any, data: bytes, name: str = "export.zip") -> Any:
    client = Client()
    client.force_login(user)
    return client.post("/data/import", {"file": SimpleUploadedFile(name, data)})


async def test_export_then_import_gives_the_same_tree_message_by_message(user: Any, other_user: Any) -> None:
    original = await sync_to_async(_build)(user)
    archive = zipfile.ZipFile(io.BytesIO(await _export(user)))
    folder = f"conversations/{original.pk}/"
    assert set(archive.namelist()) == {folder + "conversation.json", folder + "openai.json", folder + "transcript.md",
                                       "feedback.json", "settings.json", "notes.json", "manifest.json"}
    manifest = json.loads(archive.read("manifest.json"))
    assert (manifest["format"], manifest["version"], manifest["user"]) == ("jxai-export", 2, "alice")
    assert json.loads(archive.read(folder + "openai.json")) == await sync_to_async(store.to_messages)(original)
    transcript = archive.read(folder + "transcript.md").decode()
    assert "It is **4 °C** in Oslo." in transcript and '"temp_c": 4' in transcript and "Bergen" not in transcript
    assert [(f["rating"], f["comment"]) for f in json.loads(archive.read("feedback.json"))] == [("up", "useful")]
    assert json.loads(archive.read("settings.json")) == {"custom_instructions": "Answer in British English."}
    assert [n["text"] for n in json.loads(archive.read("notes.json"))] == ["Buy oat milk"]
    tree = json.loads(archive.read(folder + "conversation.json"))
    assert len(tree["messages"]) == 8 and tree["format"] == "jxai-conversation"

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as again:  # re-packed by hand, as a user might
        for name in archive.namelist():
            again.writestr(name, archive.read(name))
    response = await sync_to_async(_import)(other_user, buffer.getvalue())
    assert response.status_code == 200, response.content
    report = response.json()
    assert report["skipped"] == [] and len(report["imported"]) == 1 and report["imported"][0]["messages"] == 8
    imported = await Conversation.objects.aget(pk=report["imported"][0]["id"])
    assert imported.owner_id == other_user.pk and imported.pk != original.pk
    assert await sync_to_async(_tree)(imported) == await sync_to_async(_tree)(original)
    assert await sync_to_async(store.to_messages)(imported) == await sync_to_async(store.to_messages)(original)

    response = await sync_to_async(_import)(other_user, archive.read(folder + "conversation.json"), "c.json")
    assert response.status_code == 200 and len(response.json()["imported"]) == 1  # the JSON alone imports too


def test_text_no_database_stores_is_imported_as_u_fffd(user: Any) -> None:
    conversation = _build(user)
    tree = json.loads(json.dumps(store_export.conversation_tree(conversation,
                                                                list(conversation.messages.order_by("position")))))
    call = next(m for m in tree["messages"] if m["tool_calls"])["tool_calls"][0]
    call["result"] = {"note\u0000": "a\u0000b", "list": ["\ud800"]}
    tree["messages"][1]["content"] = "NUL\u0000here"
    response = _import(user, json.dumps(tree).encode(), "conversation.json")
    assert response.status_code == 200, response.content
    imported = Conversation.objects.get(pk=response.json()["imported"][0]["id"])
    assert imported.messages.filter(content="NUL\ufffdhere").exists()
    assert ToolCall.objects.get(message__conversation=imported).result == {"note\ufffd": "a\ufffdb",
                                                                            "list": ["\ufffd"]}


def _siblings(conversation: Conversation) -> dict[int | None, list[str]]:
    out: dict[int | None, list[str]] = {}
    for m in conversation.messages.order_by("position"):
        out.setdefault(m.parent_id, []).append(m.content)
    return out


def test_a_chatgpt_export_imports_with_its_branches_titles_and_times(user: Any) -> None:
    response = _import(user, CHATGPT.read_bytes(), "conversations.json")
    assert response.status_code == 200, response.content
    report = response.json()
    assert [c["title"] for c in report["imported"]] == ["Packing for Lisbon", "Haiku"] and report["skipped"] == []
    lisbon = Conversation.objects.get(pk=report["imported"][0]["id"])
    assert lisbon.created_at.timestamp() == pytest.approx(1718000000.123456)
    assert lisbon.updated_at.timestamp() == pytest.approx(1718000900.5)
    tree = _siblings(lisbon)
    # The hidden system message and the root are left out: the question and its edit are sibling roots.
    assert tree[None] == ["What should I pack for Lisbon in June?",
                          "[attachment not imported]\nWhat should I pack for Lisbon in June? This is my suitcase."]
    first_question = lisbon.messages.get(content="What should I pack for Lisbon in June?")
    assert tree[first_question.pk] == ["Light layers, comfortable shoes for the hills, and sunscreen.",
                                       "A linen shirt, a light jacket for the evening wind, and shoes with grip: "
                                       "the cobbles are slippery."]  # a regenerated answer: two siblings
    # The browsing call and its output are left out; the answer follows the edited question.
    assert store.to_messages(lisbon) == [
        {"role": "user", "content": "[attachment not imported]\nWhat should I pack for Lisbon in June? This is my "
                                    "suitcase."},
        {"role": "assistant", "content": "Expect about 25 °C: your suitcase has room for a light jacket too."}]
    answer = lisbon.messages.get(content__startswith="Expect")
    assert answer.model == "gpt-4o-mini" and answer.created_at.timestamp() == pytest.approx(1718000330.0)
    _, path = store.message_list(user=user, conversation_id=lisbon.pk)
    assert (path.siblings[path.messages[0].pk].index, path.siblings[path.messages[0].pk].count) == (1, 2)


def _haiku(text: str = "Tea.") -> dict[str, Any]:
    document = json.loads(CHATGPT.read_text())[1]
    document["mapping"]["a-2"]["message"]["content"]["parts"] = [text]
    return document


def _counts() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), ToolCall.objects.count()


@pytest.mark.parametrize("data, status, words", [
    (b"[" * 100_000 + b"]" * 100_000, 400, f"more than {MAX_DEPTH} levels"),
    (json.dumps([{"title": "deep", "mapping": {}, "x": json.loads("[" * 40 + "]" * 40)}]).encode(), 400, "levels"),
    (b'[{"title": "cut", "mapping": {"a": ', 400, "not valid UTF-8 JSON"),
    (b"\xff\xfe[]", 400, "not valid UTF-8 JSON"),
    (json.dumps({"conversations": []}).encode(), 400, "neither a jxai export nor ChatGPT"),
    (b"PK\x03\x04 not really a zip", 400, "not a readable ZIP"),
])
def test_hostile_or_malformed_files_are_refused_whole(user: Any, data: bytes, status: int, words: str) -> None:
    before = _counts()
    response = _import(user, data, "conversations.json")
    assert response.status_code == status and response["Content-Type"] == "application/problem+json"
    assert words in response.json()["detail"] and "Nothing was imported" in response.json()["detail"]
    assert _counts() == before


def test_an_oversized_file_or_zip_bomb_is_refused_before_it_is_read(settings: Any, user: Any) -> None:
    settings.JXAI_IMPORT_MAX_BYTES = 100_000
    response = _import(user, json.dumps([_haiku("x" * 200_000)]).encode(), "conversations.json")
    assert response.status_code == 413 and response.json()["title"] == "Payload too large"
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("conversations.json", b" " * 5_000_000 + json.dumps([_haiku()]).encode())
    assert len(bomb.getvalue()) < 100_000
    response = _import(user, bomb.getvalue())
    assert response.status_code == 413 and "unpacked" in response.json()["detail"]
    assert _counts() == (0, 0, 0)


def test_a_bad_conversation_is_skipped_whole_and_named_the_others_imported(user: Any) -> None:
    huge = _haiku("y" * (MAX_TEXT_CHARS + 1))
    huge["title"] = "Huge"
    cycle = _haiku()
    cycle["title"] = "Loop"
    cycle["mapping"]["root-2"]["parent"] = "a-2"  # every node has a parent: no root, a cycle
    response = _import(user, json.dumps([huge, _haiku("Fine."), cycle]).encode(), "conversations.json")
    assert response.status_code == 200
    report = response.json()
    assert [c["title"] for c in report["imported"]] == ["Haiku"]
    assert [(s["index"], s["title"]) for s in report["skipped"]] == [(0, "Huge"), (2, "Loop")]
    assert "longer than" in report["skipped"][0]["reason"] and "cycle" in report["skipped"][1]["reason"]
    assert list(Conversation.objects.values_list("title", flat=True)) == ["Haiku"]
    assert Message.objects.count() == 2  # nothing of the skipped ones was saved

    response = _import(user, json.dumps([huge]).encode(), "conversations.json")
    assert response.status_code == 400 and response.json()["skipped"][0]["title"] == "Huge"
    assert Conversation.objects.count() == 1



def _jxai_document(message: dict[str, Any], **members: Any) -> dict[str, Any]:
    return {"format": store_export.CONVERSATION_FORMAT, "version": 1, "title": "Odd",
            "messages": [{"id": 1, "parent": None, "role": "user", "content": "hi", **message}], **members}


def _chatgpt_node(node: dict[str, Any], **members: Any) -> dict[str, Any]:
    message = {"author": {"role": "user"}, "content": {"content_type": "text", "parts": ["hi"]}}
    return {"title": "Odd", "mapping": {"a": {"parent": None, "message": message, **node}}, **members}


@pytest.mark.parametrize("document", [
    _jxai_document({"role": ["user"]}),
    _jxai_document({"id": [1]}),
    _jxai_document({"parent": {"id": 1}}),
    _jxai_document({}, active_leaf=[1]),
    _chatgpt_node({"parent": ["b"]}),
    _chatgpt_node({}, current_node=["a"]),
], ids=["role", "id", "parent", "active-leaf", "chatgpt-parent", "chatgpt-current-node"])
def test_an_id_role_or_state_that_is_a_list_or_object_skips_its_conversation(user: Any, document: Any) -> None:
    """A value of the wrong type (here one Python cannot hash) is a skipped conversation, not a 500."""
    response = _import(user, json.dumps([document] if "mapping" in document else document).encode(), "x.json")
    assert response.status_code == 400 and response["Content-Type"] == "application/problem+json"
    assert response.json()["skipped"][0]["title"] == "Odd" and response.json()["skipped"][0]["reason"]
    assert _counts() == (0, 0, 0)


def test_an_approval_state_that_is_not_text_imports_as_a_call_that_needed_none(user: Any) -> None:
    document = _jxai_document({"role": "assistant", "tool_calls": [{"call_id": "c", "approval_state": ["approved"]}]})
    response = _import(user, json.dumps(document).encode(), "x.json")
    assert response.status_code == 200 and response.json()["imported"][0]["messages"] == 1
    assert list(ToolCall.objects.values_list("call_id", "approval_state")) == [("c", "")]

# -- retention ---------------------------------------------------------------------------

def _ledger_totals() -> dict[str, Any]:
    return UsageLedger.objects.aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_usd"),
                                         r=Sum("requests"))


def _aged(user: Any, title: str, days: int, **fields: Any) -> Conversation:
    conversation = store.conversation_create(user=user, model="gpt-4o", title=title)
    _answer(store.message_send(user=user, conversation_id=conversation.pk, text=f"{title}?"), "ok")
    then = timezone.now() - timezone.timedelta(days=days)
    Message.objects.filter(conversation=conversation).update(updated_at=then)
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=then, **fields)
    return conversation


def test_purge_removes_idle_and_expired_temporary_conversations_only_and_keeps_the_ledger(
        settings: Any, user: Any) -> None:
    ledger_add(user.pk, timezone.now().date(), UsageCounts(input_tokens=100, output_tokens=50), model="gpt-4o",
               cost=Decimal("0.25"))
    old = _aged(user, "old", 40)
    recent = _aged(user, "recent", 5)
    running = _aged(user, "running", 40, status=ConversationStatus.STREAMING, turn_id=uuid.uuid4())
    waiting = _aged(user, "waiting", 40, status=ConversationStatus.AWAITING_APPROVAL)
    held = _aged(user, "held", 400, legal_hold=True)
    temporary = _aged(user, "temporary", 2, temporary=True)  # past JXAI_TEMPORARY_CHAT_HOURS (24)
    temporary_held = _aged(user, "temporary held", 2, temporary=True, legal_hold=True)
    written = _aged(user, "written", 40)
    Message.objects.filter(conversation=written).update(updated_at=timezone.now())  # a message changed lately
    assert _import(user, CHATGPT.read_bytes(), "conversations.json").status_code == 200  # 2024, imported today
    totals = _ledger_totals()

    out = io.StringIO()
    call_command("purge_conversations", stdout=out)
    assert f"removed temporary chat {temporary.pk}" in out.getvalue()
    assert "not set" in out.getvalue() and Conversation.objects.count() == 9  # retention is off by default

    settings.JXAI_RETENTION_DAYS = 30
    out = io.StringIO()
    call_command("purge_conversations", "--dry-run", stdout=out)
    assert f"would remove {old.pk} owner={user.pk}" in out.getvalue() and Conversation.objects.count() == 9
    out = io.StringIO()
    call_command("purge_conversations", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "removed 0 temporary chat(s) idle more than 24 hour(s)."
    assert lines[1].startswith(f"removed {old.pk} owner={user.pk} idle since ") and lines[1].endswith("messages=2")
    assert lines[-1] == "removed 1 conversation(s) idle more than 30 day(s)."
    assert set(Conversation.objects.exclude(title__in=("Packing for Lisbon", "Haiku")).values_list("pk", flat=True)) \
        == {recent.pk, running.pk, waiting.pk, held.pk, temporary_held.pk, written.pk}
    assert Conversation.objects.filter(title__in=("Packing for Lisbon", "Haiku")).count() == 2
    assert not Message.objects.filter(conversation_id=old.pk).exists()
    assert _ledger_totals() == totals


def test_staff_place_and_release_a_legal_hold_in_admin(django_user_model: Any, user: Any) -> None:
    conversation = _aged(user, "kept", 0)
    staff = django_user_model.objects.create_user("sam", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=("view_conversation", "change_conversation")))
    client = Client()
    client.force_login(staff)
    changelist = "/admin/jxai_app/conversation/"
    client.post(changelist, {"action": "hold", "_selected_action": [conversation.pk]})
    assert Conversation.objects.get(pk=conversation.pk).legal_hold
    assert b"legal_hold__exact=1" in client.get(changelist).content  # the list filter
    client.post(changelist, {"action": "release_hold", "_selected_action": [conversation.pk]})
    assert not Conversation.objects.get(pk=conversation.pk).legal_hold


# -- erasure -----------------------------------------------------------------------------

def _user_rows(user_pk: int) -> dict[str, int]:
    """Rows of every model with a foreign key to the user model that point at ``user_pk``."""
    user_model = get_user_model()
    found = {}
    for model in apps.get_models():
        for f in model._meta.get_fields():
            if (f.many_to_one or f.one_to_one) and f.concrete and f.related_model is user_model:
                count = model._default_manager.filter(**{f.name: user_pk}).count()
                if count:
                    found[f"{model._meta.label}.{f.name}"] = count
    return found


def _signed_in(user: Any, password: str) -> Client:
    user.set_password(password)
    user.save()
    client = Client()
    client.force_login(user)
    return client


def _delete(client: Client, password: str) -> Any:
    return client.post("/account/delete", json.dumps({"password": password}), content_type="application/json")


def test_signed_out_import_or_delete_is_an_unauthorized_problem_not_the_login_page(user: Any) -> None:
    """The page calls them with fetch, which would follow a redirect to the login page and
    read its 200 as done (after a logout in another tab, say)."""
    signed_out = Client()
    for response in (signed_out.post("/data/import", {"file": SimpleUploadedFile("x.json", b"[]")}),
                     _delete(signed_out, "anything")):
        assert response.status_code == 401 and response["Content-Type"] == "application/problem+json"
    assert get_user_model().objects.filter(pk=user.pk).exists()


def test_a_csrf_failure_is_a_problem_for_the_page_s_json_calls_and_django_s_page_for_forms(user: Any) -> None:
    """docs/security.md, threat 8: the page's fetch calls read a problem; a form keeps Django's page."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    token = str(uuid.uuid4())
    calls = [("/shares", {"content_type": "application/json", "data": "{}"}),
             (f"/shares/{token}/revoke", {}),
             ("/data/import", {"data": {"file": SimpleUploadedFile("x.json", b"[]")}}),
             ("/account/delete", {"content_type": "application/json", "data": "{}"}),
             ("/ai/attachments", {"data": {"file": SimpleUploadedFile("a.txt", b"hi")}}),
             ("/s/some-token/continue", {"headers": {"Accept": "application/json"}}),
             ("/s/some-token/continue", {"data": {"x": "1"}, "headers": {"Sec-Fetch-Mode": "cors"}})]
    for path, options in calls:
        response = client.post(path, **options)
        assert response.status_code == 403 and response["Content-Type"] == "application/problem+json", path
        body = response.json()
        assert body["title"] == "Forbidden" and body["detail"].startswith("CSRF check failed: reload the page"), path
    for path, headers in (("/accounts/logout/", {}), ("/s/some-token/continue", {"Sec-Fetch-Mode": "navigate"})):
        page = client.post(path, {"x": "1"}, headers=headers)
        assert page.status_code == 403 and page["Content-Type"].startswith("text/html"), path
        assert b"CSRF verification failed" in page.content
    assert get_user_model().objects.filter(pk=user.pk).exists() and client.get("/").status_code == 200


def test_delete_my_account_leaves_no_row_of_the_user_and_the_ledger_totals(user: Any, other_user: Any) -> None:
    conversation = _build(user)
    _build(other_user)
    ledger_add(user.pk, timezone.now().date(), UsageCounts(input_tokens=70, output_tokens=30), model="gpt-4o",
               cost=Decimal("0.5"))
    message_ids = list(Message.objects.filter(conversation=conversation).values_list("pk", flat=True))
    client = _signed_in(user, "correct horse 1")
    SignInEvent.objects.create(kind=SignInEvent.PASSWORD_SIGN_IN, user=user, actor=user.username,
                               ip_address="192.0.2.7")
    SignInEvent.objects.create(kind=SignInEvent.PASSWORD_FAILURE, actor=user.username.upper(), detail="wrong password")
    events = SignInEvent.objects.count()
    other_rows = _user_rows(other_user.pk)
    totals = _ledger_totals()
    assert set(_user_rows(user.pk)) >= {"jxai_app.Conversation.owner", "jxai_app.Note.owner",
                                        "jxai_app.UserSettings.user", "jxai_app.UsageLedger.user"}

    response = _delete(client, "wrong")
    assert response.status_code == 403 and Conversation.objects.filter(owner=user).exists()

    pk = user.pk
    response = _delete(client, "correct horse 1")
    assert response.status_code == 200 and response.json() == {"deleted": True}
    assert _user_rows(pk) == {}
    assert not Message.objects.filter(pk__in=message_ids).exists()
    assert not ToolCall.objects.filter(message_id__in=message_ids).exists()
    assert not MessageFeedback.objects.filter(message_id__in=message_ids).exists()
    assert _ledger_totals() == totals and UsageLedger.objects.filter(user__isnull=True).count() == 1
    assert _user_rows(other_user.pk) == other_rows
    assert not any(str(s.get_decoded().get("_auth_user_id")) == str(pk) for s in Session.objects.all())
    assert client.get("/").status_code == 302  # signed out
    record = ErasureRecord.objects.get()
    assert (record.erased_user_id, record.self_service, record.erased_by) == (pk, True, None)
    assert record.removed["jxai_app.Conversation"] == 1
    # the sign-in audit keeps when and from where, no longer whose
    assert SignInEvent.objects.count() == events
    assert not SignInEvent.objects.filter(actor__iexact=user.username).exists()
    assert SignInEvent.objects.filter(ip_address="192.0.2.7", actor="", detail="").exists()


def test_erasure_is_refused_while_a_turn_runs_or_a_conversation_is_held(user: Any) -> None:
    client = _signed_in(user, "pw 12345 abc")
    running = _aged(user, "running", 0, status=ConversationStatus.STREAMING)
    response = _delete(client, "pw 12345 abc")
    assert response.status_code == 409 and "stop it" in response.json()["detail"]
    Conversation.objects.filter(pk=running.pk).update(status=ConversationStatus.IDLE, legal_hold=True)
    response = _delete(client, "pw 12345 abc")
    assert response.status_code == 409 and response.json()["code"] == "legal_hold"
    assert get_user_model().objects.filter(pk=user.pk).exists() and not ErasureRecord.objects.exists()


def test_staff_erase_with_the_permission_only_and_it_is_recorded(django_user_model: Any, user: Any) -> None:
    staff = django_user_model.objects.create_user("sam", password="staff pw 1", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_user"),
                               Permission.objects.get(codename="change_user"))
    client = Client()
    client.force_login(staff)
    changelist = "/admin/auth/user/"
    assert b"erase_user_data" not in client.get(changelist).content
    staff.user_permissions.add(Permission.objects.get(codename="erase_user_data"))
    staff = django_user_model.objects.get(pk=staff.pk)  # permissions are cached per object
    client.force_login(staff)
    assert b"erase_user_data" in client.get(changelist).content
    _build(user)
    pk = user.pk
    confirm = client.post(changelist, {"action": "erase_user_data", "_selected_action": [pk]})
    assert confirm.status_code == 200 and b"Yes, erase" in confirm.content and _user_rows(pk)
    done = client.post(changelist, {"action": "erase_user_data", "_selected_action": [pk], "confirm": "yes"},
                       follow=True)
    assert [str(m) for m in done.context["messages"]] == ["alice: data erased."]
    assert _user_rows(pk) == {}
    record = ErasureRecord.objects.get()
    assert (record.erased_user_id, record.erased_by_id, record.self_service) == (pk, staff.pk, False)


def test_staff_with_the_content_permission_export_one_user_s_archive(django_user_model: Any, user: Any) -> None:
    conversation = _build(user)
    staff = django_user_model.objects.create_user("sam", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=("view_user", "view_conversation")))
    client = Client()
    client.force_login(staff)
    response = client.post("/admin/auth/user/", {"action": "export_user_data", "_selected_action": [user.pk]})
    assert response["Content-Type"] == "application/zip" and response.is_async
    with pytest.warns(Warning, match="asynchronous iterators"):  # the sync test client reads the async stream
        body = b"".join(response)
    names = zipfile.ZipFile(io.BytesIO(body)).namelist()
    assert f"conversations/{conversation.pk}/conversation.json" in names


async def test_deleting_the_account_closes_the_user_s_open_socket(settings: Any, user: Any) -> None:
    from project.asgi import application
    settings.JXAI_WS_SESSION_CHECK_SECONDS = 0.1
    client = await sync_to_async(_signed_in)(user, "sock pw 42 x")
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    comm = WebsocketCommunicator(application, "/ws/chat/", headers=[*LOCAL, (b"cookie", cookie.encode())])
    assert (await comm.connect())[0]
    await comm.send_json_to({"type": "list"})
    assert (await comm.receive_json_from(5))["type"] == "conversations"
    assert (await sync_to_async(_delete)(client, "sock pw 42 x")).status_code == 200
    while True:
        output = await asyncio.wait_for(comm.receive_output(5), 5)
        if output["type"] == "websocket.close":
            assert output["code"] == 4401
            break
    await comm.wait()


def _stored(attachment: Attachment) -> bytes:
    return b"".join(store_attachments.attachment_chunks(attachment))


def test_attachments_go_out_with_the_export_and_come_back_through_the_upload_checks(
        settings: Any, django_user_model: Any, user: Any, other_user: Any, media_root: Any) -> None:
    files = {"plan.png": png(), "notes (v2).txt": "Plan: één\n- oat milk\n".encode(), "big.txt": b"x" * 400}
    uploads = [store.attachment_upload(user=user, name=name, data=data, quota=None) for name, data in files.items()]
    turn = store.message_send(user=user, conversation_id=None, text="See these", model="gpt-4o",
                              attachments=[str(a.pk) for a in uploads])
    _answer(turn, "Noted.")
    staff = django_user_model.objects.create_user("sam", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=("view_user", "view_conversation")))
    client = Client()
    client.force_login(staff)
    response = client.post("/admin/auth/user/", {"action": "export_user_data", "_selected_action": [user.pk]})
    with pytest.warns(Warning, match="asynchronous iterators"):  # the sync test client reads the async stream
        archive = zipfile.ZipFile(io.BytesIO(b"".join(response)))

    folder = f"conversations/{turn.conversation_id}/"
    paths = [f"attachments/{uploads[0].pk}-plan.png", f"attachments/{uploads[1].pk}-notes__v2_.txt",
             f"attachments/{uploads[2].pk}-big.txt"]
    assert {folder + p for p in paths} <= set(archive.namelist())
    tree = json.loads(archive.read(folder + "conversation.json"))
    [question] = [m for m in tree["messages"] if m["role"] == "user"]
    assert [(a["name"], a["path"], a["size"], a["sha256"], a["width"]) for a in question["attachments"]] == [
        (name, path, len(data), hashlib.sha256(data).hexdigest(), 4 if name.endswith(".png") else None)
        for (name, data), path in zip(files.items(), paths)]
    assert [archive.read(folder + p) for p in paths] == list(files.values())

    # Repacked with a file whose contents are not what its name says; the importer's quota
    # takes the image and the notes but not big.txt.
    question["attachments"].append({"name": "fake.png", "path": "attachments/fake.png"})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as again:
        for name in archive.namelist():
            again.writestr(name, json.dumps(tree) if name == folder + "conversation.json" else archive.read(name))
        again.writestr(folder + "attachments/fake.png", b"just text")
    settings.JXAI_STORAGE_PER_USER_BYTES = len(files["plan.png"]) + len(files["notes (v2).txt"]) + 100
    response = _import(other_user, buffer.getvalue())
    assert response.status_code == 200, response.content
    report = response.json()
    [imported] = report["imported"]
    assert (imported["messages"], imported["attachments"], report["skipped"]) == (2, 2, [])
    assert [(s["conversation"], s["message"], s["name"]) for s in report["skipped_attachments"]] == [
        (imported["id"], question["id"], "big.txt"), (imported["id"], question["id"], "fake.png")]
    quota_reason, type_reason = (s["reason"] for s in report["skipped_attachments"])
    assert "more than your" in quota_reason and "named like an image" in type_reason
    [copy] = Message.objects.filter(conversation_id=imported["id"], role="user")
    restored = list(copy.attachments.order_by("position"))
    assert copy.content == "See these" and [a.owner_id for a in restored] == [other_user.pk] * 2
    assert [(a.name, a.media_type, _stored(a), a.sha256) for a in restored] == [
        (u.name, u.media_type, files[u.name], hashlib.sha256(files[u.name]).hexdigest()) for u in uploads[:2]]
    assert {a.file for a in restored}.isdisjoint({u.file for u in uploads})  # files of their own

    response = _import(other_user, archive.read(folder + "conversation.json"), "c.json")
    assert response.status_code == 200 and response.json()["imported"][0]["attachments"] == 0
    assert {s["reason"] for s in response.json()["skipped_attachments"]} == {"only a ZIP export carries the files"}
