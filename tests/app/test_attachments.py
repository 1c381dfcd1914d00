"""Uploading, storing, serving and removing attachments (docs/attachments.md), through the
real upload view (multipart over Django's test client), the default FileSystemStorage in a
temporary MEDIA_ROOT, and the real database."""

from __future__ import annotations

import hashlib
import io
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from PIL import Image

from jxai_app import store
from jxai_app.core.tokens import IMAGE_TOKENS
from jxai_app.models import ApiToken, Attachment, GroupEntitlements
from jxai_app.store.attachments import data_url
from tests.app.attachment_support import bomb_png, jpeg_with_gps, media_root, pdf, png, stored_files  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def upload(client: Client, name: str, data: bytes, **headers: Any) -> Any:
    """POST one file as a browser does, its name exactly as given (Django's test client would
    strip path components from it)."""
    boundary = "----jxai-test-boundary"
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{quoted}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return client.generic("POST", "/ai/attachments", body, content_type=f"multipart/form-data; boundary={boundary}",
                          **headers)


@pytest.fixture
def owner(client: Client, user: Any) -> Client:
    client.force_login(user)
    return client


def test_an_upload_is_stored_and_only_its_owner_and_staff_read_it(owner: Client, user: Any, other_user: Any,
                                                                  django_user_model: Any, media_root: Any) -> None:
    data = png(5, 7)
    response = upload(owner, "screenshot.png", data)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "screenshot.png" and body["mediaType"] == "image/png"
    assert (body["size"], body["width"], body["height"]) == (len(data), 5, 7)
    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert body["url"] == f"/ai/attachments/{body['id']}"
    [on_disk] = stored_files(media_root)
    assert on_disk.read_bytes() == data and on_disk.relative_to(media_root).parts[0] == "attachments"
    row = Attachment.objects.get(pk=body["id"])
    assert row.owner == user and row.message is None

    served = owner.get(body["url"])
    assert served.status_code == 200 and served["Content-Type"] == "image/png"
    assert b"".join(served.streaming_content if served.streaming else [served.content]) == data
    assert served["X-Content-Type-Options"] == "nosniff" and "sandbox" in served["Content-Security-Policy"]

    stranger = Client()
    assert stranger.get(body["url"]).status_code == 401  # anonymous
    stranger.force_login(other_user)
    assert stranger.get(body["url"]).status_code == 404  # someone else's is not found, alike a missing one
    assert stranger.get("/ai/attachments/not-an-id").status_code == 404
    staff = django_user_model.objects.create_user("auditor", password="pw-auditor-1", is_staff=True)
    staff_client = Client()
    staff_client.force_login(staff)
    assert staff_client.get(body["url"]).status_code == 404  # staff without the permission
    staff.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    staff_client.force_login(django_user_model.objects.get(pk=staff.pk))
    assert staff_client.get(body["url"]).status_code == 200


def test_an_api_token_uploads_and_a_session_needs_csrf(user: Any, media_root: Any) -> None:
    _, plaintext = ApiToken.issue(user=user, name="script")
    response = upload(Client(), "notes.md", b"# Notes\n\nbuy milk\n", HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert response.status_code == 201 and response.json()["mediaType"] == "text/markdown"
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    refused = upload(strict, "notes.md", b"text")
    assert refused.status_code == 403 and refused["Content-Type"] == "application/problem+json"
    assert Attachment.objects.count() == 1


@pytest.mark.parametrize(("name", "data", "status", "words"), [
    ("bomb.png", bomb_png(), 413, "pixels"),
    ("photo.pdf", png(), 415, "image/png"),  # a lying extension
    ("report.png", pdf("hi"), 415, "PDF"),
    ("fake.png", b"just some text", 415, "not one"),
    ("cut.png", png(64, 64)[:-40], 415, "cannot be read"),  # truncated
    ("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog >>\n", 415, "PDF cannot be read"),
    ("program.exe", b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff\x00\x00" + b"\x00" * 64, 415, "does not take"),
    ("binary.txt", b"abc\xff\xfe\x00", 415, "UTF-8"),
    ("../../etc/passwd.txt", b"x", 400, "path separator"),
    ("a\\b.txt", b"x", 400, "path separator"),
    ("bell\x07.txt", b"x", 400, "control characters"),
])
def test_bad_uploads_get_a_problem_and_save_nothing(owner: Client, media_root: Any, name: str, data: bytes,
                                                    status: int, words: str) -> None:
    response = upload(owner, name, data)
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert words in response.json()["detail"]
    assert Attachment.objects.count() == 0 and stored_files(media_root) == []


def test_the_caps_and_the_quota(owner: Client, user: Any, settings: Any, media_root: Any) -> None:
    settings.JXAI_MAX_ATTACHMENT_BYTES = 100
    assert upload(owner, "big.txt", b"x" * 101).status_code == 413
    settings.JXAI_MAX_ATTACHMENT_BYTES = 10_000
    settings.JXAI_STORAGE_PER_USER_BYTES = 150
    assert upload(owner, "a.txt", b"a" * 100).status_code == 201
    over = upload(owner, "b.txt", b"b" * 100)
    assert over.status_code == 413 and "150 bytes" in over.json()["detail"]
    settings.JXAI_MAX_IMAGE_PIXELS = 99
    assert upload(owner, "ten.png", png(10, 10)).status_code == 413
    assert [f.read_bytes() for f in stored_files(media_root)] == [b"a" * 100]
    usage = owner.get("/").content.decode()  # the Settings dialog shows the quota
    assert 'data-testid="storage-usage">Attached files: 100\xa0bytes' in usage and "of 150\xa0bytes" in usage
    # a group's stored-files limit, more generous than the setting, is the user's (docs/security.md
    # "Group entitlements")
    group = Group.objects.create(name="archivists")
    GroupEntitlements.objects.create(group=group, storage_bytes_per_user=250)
    user.groups.add(group)
    assert upload(owner, "b.txt", b"b" * 100).status_code == 201
    assert upload(owner, "c.txt", b"c" * 100).status_code == 413


def test_exif_is_stripped_by_reencoding(owner: Client, media_root: Any) -> None:
    data = jpeg_with_gps()
    assert Image.open(io.BytesIO(data)).getexif()
    body = upload(owner, "holiday.jpg", data).json()
    [on_disk] = stored_files(media_root)
    kept = on_disk.read_bytes()
    assert kept != data and body["sha256"] == hashlib.sha256(kept).hexdigest() and body["size"] == len(kept)
    with Image.open(io.BytesIO(kept)) as image:
        assert not image.getexif() and "exif" not in image.info and image.size == (8, 8)


def test_a_pdf_keeps_its_text_and_unclaimed_uploads_are_swept(owner: Client, media_root: Any) -> None:
    body = upload(owner, "invoice.pdf", pdf("Total due 42 EUR")).json()
    row = Attachment.objects.get(pk=body["id"])
    assert row.media_type == "application/pdf" and "Total due 42 EUR" in row.text
    fresh = upload(owner, "fresh.txt", b"still wanted").json()
    Attachment.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(hours=25))
    out = io.StringIO()
    call_command("sweep_attachments", stdout=out)
    assert out.getvalue().strip() == "removed 1 unclaimed attachment"
    assert [str(pk) for pk in Attachment.objects.values_list("id", flat=True)] == [fresh["id"]]
    assert [f.read_bytes() for f in stored_files(media_root)] == [b"still wanted"]


def test_deleting_the_conversation_deletes_its_files(user: Any, media_root: Any) -> None:
    first = store.attachment_upload(user=user, name="one.png", data=png(), quota=None)
    second = store.attachment_upload(user=user, name="two.txt", data=b"two", quota=None)
    turn = store.message_send(user=user, conversation_id=None, text="Look", model="m",
                              attachments=[str(first.pk), str(second.pk)])
    assert [a.pk for a in turn.user_message.attachments.all()] == [first.pk, second.pk]
    assert IMAGE_TOKENS < turn.prompt_tokens < IMAGE_TOKENS + 50  # the reservation's estimate: one image, a little text
    assert len(stored_files(media_root)) == 2
    unclaimed = store.attachment_upload(user=user, name="other.txt", data=b"keep", quota=None)
    store.conversation_delete(user=user, conversation_id=turn.conversation_id)
    assert list(Attachment.objects.all()) == [unclaimed]
    assert [f.read_bytes() for f in stored_files(media_root)] == [b"keep"]


def test_admin_transcript_shows_the_files_to_staff(user: Any, django_user_model: Any, media_root: Any) -> None:
    image = store.attachment_upload(user=user, name="plan.png", data=png(), quota=None)
    turn = store.message_send(user=user, conversation_id=None, text="See the plan", model="m",
                              attachments=[str(image.pk)])
    staff = django_user_model.objects.create_user("reviewer", password="pw-reviewer-1", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client = Client()
    client.force_login(staff)
    page = client.get(f"/admin/jxai_app/conversation/{turn.conversation_id}/transcript/").content.decode()
    url = f"/ai/attachments/{image.pk}"
    assert f'<img src="{url}" alt="plan.png">' in page and f'<a href="{url}" download="plan.png">plan.png</a>' in page
    assert client.get(url).status_code == 200
    [exported] = store.conversations_export([store.conversation_get(user=user, conversation_id=turn.conversation_id)])
    assert exported["messages"][-1]["content"][1] == {"type": "image_url", "image_url": {"url": data_url(image)}}
