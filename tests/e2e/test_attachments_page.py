"""Attachments on the chat page in a real browser (docs/attachments.md "The page"): a PNG
dropped on the composer and a screenshot pasted into it become chips with a thumbnail and an
upload bar; the send carries them, the model gets the exact bytes, the question shows
thumbnails served by the owner-checked file view; a reload and an edit keep them; another
user and an anonymous caller cannot read the file; for a text-only model the page refuses an
image before uploading it."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.app.attachment_support import png
from tests.e2e.steps import assert_clean, login, reload, screenshot, wait_idle

pytestmark = pytest.mark.browser

DROPPED = png(12, 8, (250, 10, 10))
PASTED = png(9, 9, (10, 10, 250))

_FILES = """([name, b64]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], name, { type: "image/png" }));
  return transfer;
}"""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_drop_paste_send_reload_edit_and_the_file_stays_private(
        logged_in: Any, open_page: Any, make_user: Any, fake_llm: Any) -> None:
    tab = logged_in()
    page = tab.page
    dropped = page.evaluate_handle(_FILES, ["drop.png", _b64(DROPPED)])
    page.dispatch_event("#composer-form", "dragover", {"dataTransfer": dropped})
    page.dispatch_event("#composer-form", "drop", {"dataTransfer": dropped})
    pasted = page.evaluate_handle(_FILES, ["image.png", _b64(PASTED)])
    page.evaluate("""(transfer) => document.getElementById("composer").dispatchEvent(
        new ClipboardEvent("paste", { clipboardData: transfer, bubbles: true, cancelable: true }))""", pasted)

    chips = page.get_by_test_id("attachment-chip")
    chips.nth(1).wait_for()
    assert chips.count() == 2
    assert [chips.nth(i).locator(".attachment-name").inner_text() for i in range(2)] == ["drop.png", "image.png"]
    for i in range(2):
        assert chips.nth(i).get_by_test_id("attachment-remove").is_visible()
        assert chips.nth(i).locator("img.attachment-thumbnail").get_attribute("src").startswith("data:image/png")
        page.wait_for_function("(p) => p.value === 1", arg=chips.nth(i).get_by_test_id("attachment-progress")
                               .element_handle())

    page.get_by_test_id("composer").fill("what colours")
    page.get_by_test_id("composer").press("Enter")
    page.get_by_text("You said: what colours").wait_for()
    wait_idle(tab)
    assert chips.count() == 0
    fake, _ = fake_llm
    sent = next(r.json for r in reversed(fake.requests) if "what colours" in str(r.json))
    assert sent["messages"][-1]["content"] == [
        {"type": "text", "text": "what colours"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(DROPPED)}"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(PASTED)}"}}]

    def thumbnails() -> Any:
        shown = page.get_by_test_id("message-user").first.get_by_test_id("message-attachment")
        shown.nth(1).locator("img").wait_for()
        page.wait_for_function("() => [...document.querySelectorAll('[data-testid=message-attachment] img')]"
                               ".every((img) => img.complete && img.naturalWidth > 0)")
        return shown

    shown = thumbnails()
    screenshot(tab, "attachments.png")
    assert shown.count() == 2
    url = shown.first.get_attribute("href")
    reload(tab)
    assert thumbnails().count() == 2

    question = page.get_by_test_id("message-user").first
    question.get_by_test_id("edit").click()
    question.get_by_test_id("edit-input").fill("which colours")
    question.get_by_test_id("edit-submit").click()
    page.get_by_text("You said: which colours").wait_for()
    wait_idle(tab)
    assert thumbnails().count() == 2
    edited = next(r.json for r in reversed(fake.requests) if "which colours" in str(r.json))
    assert edited["messages"][-1]["content"][1:] == sent["messages"][-1]["content"][1:]

    assert page.request.get(url).body() == DROPPED
    stranger = open_page()
    assert stranger.page.request.get(url).status == 401
    login(stranger, make_user("mallory"))
    assert stranger.page.request.get(url).status == 404
    assert_clean(tab)

    def text_only(route: Any) -> None:  # the same page, its model listed as taking text only
        served = route.fetch()
        body = served.text().replace('"input": ["text", "image"]', '"input": ["text"]')
        route.fulfill(status=served.status, headers={"Content-Type": served.headers["content-type"]}, body=body)

    # (Chromium keeps a page served by a route off the local network: no socket, none needed here)
    page.route("**/c/*", text_only)
    page.reload()
    page.get_by_test_id("composer").wait_for()
    uploads = len([u for u in tab.requests if u.endswith("/ai/attachments")])
    page.dispatch_event("#composer-form", "drop",
                        {"dataTransfer": page.evaluate_handle(_FILES, ["drop.png", _b64(DROPPED)])})
    page.get_by_test_id("error").get_by_text("takes text only, not images").wait_for()
    assert chips.count() == 0 and len([u for u in tab.requests if u.endswith("/ai/attachments")]) == uploads
