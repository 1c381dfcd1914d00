"""Attachments in turns (docs/attachments.md "Sending", "What the model gets"): through the real
websocket consumer, turn runner and store, the default storage in a temporary MEDIA_ROOT and a
FakeProvider on 127.0.0.1 that records each request body in the provider's own format."""

from __future__ import annotations

import base64
from typing import Any, Callable

import pytest
from asgiref.sync import sync_to_async

from jxai_app import conf, store
from jxai_app.models import Attachment, Message
from tests.app.attachment_support import media_root, pdf, png, stored_files  # noqa: F401  (fixture)
from tests.app.turns_support import Tab, fake, hub, provider_registry, text_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider, Script, anthropic_text_stream, responses_text_stream

pytestmark = pytest.mark.django_db(transaction=True)

PNG = png(6, 2, (1, 2, 3))
B64 = base64.b64encode(PNG).decode("ascii")


def _upload(user: Any, name: str, data: bytes) -> Any:
    return sync_to_async(store.attachment_upload)(user=user, name=name, data=data, quota=None)


def _registry(kind: str) -> Callable[[str], dict[str, Any]]:
    def build(url: str) -> dict[str, Any]:
        return {"providers": {"p": {"kind": kind, "base_url": url, "api_key_env": None}},
                "models": {"vision": {"provider": "p", "model_id": "m", "context_window": 100000},
                           "reader": {"provider": "p", "model_id": "m", "context_window": 100000,
                                      "input": ["text", "image", "file"]}}}
    return build


PDF = pdf("Total due 42 EUR")
PDF_URL = f"data:application/pdf;base64,{base64.b64encode(PDF).decode('ascii')}"
FORMATS = {
    # kind: (an answer in its stream format, the user message's content parts as the provider gets them,
    #        for "reader" (a PDF as the provider's file part), then the part the PDF's text becomes for "vision")
    "openai": (lambda: text_script(["Red."]), lambda body: body["messages"][-1]["content"],
               [{"type": "text", "text": "What colour?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}},
                {"type": "file", "file": {"filename": "total.pdf", "file_data": PDF_URL}}], "text"),
    "anthropic": (lambda: Script(writes=anthropic_text_stream(["Red."])), lambda body: body["messages"][-1]["content"],
                  [{"type": "text", "text": "What colour?"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
                   {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                                   "data": PDF_URL.split(",", 1)[1]}}], "text"),
    "openai-responses": (lambda: Script(writes=responses_text_stream(["Red."])),
                         lambda body: body["input"][-1]["content"],
                         [{"type": "input_text", "text": "What colour?"},
                          {"type": "input_image", "image_url": f"data:image/png;base64,{B64}"},
                          {"type": "input_file", "filename": "total.pdf", "file_data": PDF_URL}], "input_text"),
}


@pytest.mark.parametrize("kind", sorted(FORMATS))
async def test_the_provider_gets_the_uploaded_png_and_pdf_exactly(kind: str, user: Any, settings: Any,
                                                                  media_root: Any, hub: Any) -> None:
    answer, content_of, expected, text_type = FORMATS[kind]
    with provider_registry(settings, _registry(kind)) as provider:
        tab = await Tab(user).open()
        for model in ("reader", "vision"):  # "vision" lacks "file": the same PDF goes as its text
            provider.add(answer())
            files = [await _upload(user, "colour.png", PNG), await _upload(user, "total.pdf", PDF)]
            await tab.send(type="send", conversationId=None, text="What colour?", model=model,
                           attachments=[str(f.pk) for f in files])
            await tab.until_event("turn_end", timeout=15)
        await tab.close()
    [with_file, with_text] = provider.requests
    assert content_of(with_file.json) == expected
    *kept, as_text = content_of(with_text.json)
    assert kept == expected[:2]
    assert as_text["type"] == text_type and as_text["text"].startswith('<file name="total.pdf" type="application/pdf">')
    assert "Total due 42 EUR" in as_text["text"]


async def test_a_pdf_goes_as_its_text_and_the_page_sees_the_files_everywhere(user: Any, fake: FakeProvider,
                                                                             media_root: Any, hub: Any) -> None:
    image = await _upload(user, "chart.png", PNG)
    document = await _upload(user, "invoice.pdf", pdf("Total due 42 EUR"))
    one = await Tab(user).open()
    fake.add(text_script(["42 EUR."]))
    await one.send(type="send", conversationId=None, text="Sum?", attachments=[str(document.pk), str(image.pk)])
    saved = await one.until(lambda f: f["type"] == "message_saved" and f["message"]["role"] == "user")
    assert [(a["name"], a["mediaType"], a["width"]) for a in saved["message"]["attachments"]] == [
        ("invoice.pdf", "application/pdf", None), ("chart.png", "image/png", 6)]
    await one.until_event("turn_end")
    cid = one.frames[0]["conversation"]["id"]
    parts = fake.requests[0].json["messages"][-1]["content"]
    assert parts[0] == {"type": "text", "text": "Sum?"}
    assert parts[1]["type"] == "text" and parts[1]["text"].startswith('<file name="invoice.pdf"')
    assert "Total due 42 EUR" in parts[1]["text"]
    assert parts[2] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}}

    two = await Tab(user).open()  # a reload, a second tab
    await two.send(type="subscribe", conversationId=cid)
    snapshot = await two.until(lambda f: f["type"] == "snapshot")
    question = snapshot["messages"][0]
    assert [a["id"] for a in question["attachments"]] == [str(document.pk), str(image.pk)]

    fake.add(text_script(["Again."]))  # regenerate: the question's files go again
    await one.send(type="regenerate", conversationId=cid, messageId=snapshot["messages"][1]["id"])
    await one.until_event("turn_end")
    assert fake.requests[1].json["messages"][-1]["content"] == parts

    fake.add(text_script(["Kept."]))  # an edit keeps them unless told otherwise
    await one.send(type="edit", conversationId=cid, messageId=question["id"], text="Sum, please?")
    edited = await one.until(lambda f: f["type"] == "message_saved" and f["message"]["content"] == "Sum, please?")
    assert [a["name"] for a in edited["message"]["attachments"]] == ["invoice.pdf", "chart.png"]
    await one.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    assert fake.requests[2].json["messages"][-1]["content"][1:] == parts[1:]

    fake.add(text_script(["Only the chart."]))  # … or keeps some of them
    await one.send(type="edit", conversationId=cid, messageId=question["id"], text="The chart?",
                   attachments=[question["attachments"][1]["id"]])
    await one.until(lambda f: f["type"] == "message_saved" and f["message"]["content"] == "Only the chart.")
    assert fake.requests[3].json["messages"][-1]["content"] == [{"type": "text", "text": "The chart?"}, parts[2]]

    fake.add(Script(status=400, content_type="application/json", writes=[b'{"error": {"message": "no"}}']))
    await one.send(type="edit", conversationId=cid, messageId=question["id"], text="Fails")
    await one.until_event("error", timeout=15)
    await one.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "error")
    fake.add(text_script(["Retried."]))  # a retry sends the failed question's files again
    await one.send(type="retry", conversationId=cid)
    await one.until(lambda f: f["type"] == "message_saved" and f["message"]["content"] == "Retried.")
    assert fake.requests[-1].json["messages"][-1]["content"][1:] == parts[1:]
    # two stored files: every copy (one row per message holding it) names one of them
    assert len(stored_files(media_root)) == 2
    rows = await sync_to_async(lambda: list(Attachment.objects.order_by().values_list("file", flat=True).distinct()))()
    assert len(rows) == 2
    assert await sync_to_async(store.storage_used)(user) == image.size + document.size  # each file counted once
    await one.close()
    await two.close()


async def test_stop_keeps_the_questions_files(user: Any, fake: FakeProvider, media_root: Any, hub: Any) -> None:
    image = await _upload(user, "a.png", PNG)
    tab = await Tab(user).open()
    fake.add(text_script([f"w{i} " for i in range(40)], delay=0.05))
    await tab.send(type="send", conversationId=None, text="Describe", attachments=[str(image.pk)])
    await tab.until_event("delta")
    cid = tab.frames[0]["conversation"]["id"]
    await tab.send(type="cancel", conversationId=cid)
    await tab.until_event("turn_end", outcome="cancelled")
    question = await sync_to_async(Message.objects.get)(conversation_id=cid, role="user")
    assert await sync_to_async(lambda: [a.pk for a in question.attachments.all()])() == [image.pk]
    assert len(stored_files(media_root)) == 1
    await tab.close()


async def test_a_text_only_model_refuses_an_image_before_any_request(user: Any, settings: Any, media_root: Any,
                                                                     hub: Any) -> None:
    with provider_registry(settings, lambda url: conf.model_registry_dict_from_env({"JXAI_LOCAL_MODEL_URL": url})) \
            as local:
        image = await _upload(user, "a.png", PNG)
        tab = await Tab(user).open()
        await tab.send(type="send", conversationId=None, text="What is this?", attachments=[str(image.pk)])
        refusal = await tab.until(lambda f: f["type"] == "error")
        await tab.close()
    assert refusal["code"] == "capability-unavailable"
    assert "gemma-3-270m" in refusal["message"] and "text only" in refusal["message"]
    assert local.requests == []
    assert await sync_to_async(Message.objects.count)() == 0
    assert await sync_to_async(lambda: Attachment.objects.get(pk=image.pk).message_id)() is None


async def test_someone_elses_or_a_sent_upload_is_not_found(user: Any, other_user: Any, fake: FakeProvider,
                                                           media_root: Any, hub: Any) -> None:
    theirs = await _upload(other_user, "theirs.png", PNG)
    tab = await Tab(user).open()
    for ids in ([str(theirs.pk)], ["nonsense"]):
        await tab.send(type="send", conversationId=None, text="Look", attachments=ids)
        assert (await tab.until(lambda f: f["type"] == "error"))["code"] == "not-found"
    await tab.send(type="send", conversationId=None, text="Look", attachments="not a list")
    assert (await tab.until(lambda f: f["type"] == "error"))["code"] == "invalid-request"
    assert fake.requests == [] and await sync_to_async(Message.objects.count)() == 0
    await tab.close()
