"""Your data through Settings in a real browser (docs/data.md): "Download my data" gives the ZIP,
importing that ZIP adds the conversation again, "Delete my account" with the password ends
at the login page with the account gone. Headless Chromium against daphne (``conftest.py``).
"""

from __future__ import annotations

import json
import zipfile
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from jxai_app.models import Conversation
from tests.e2e.conftest import PASSWORD
from tests.e2e.steps import ask_for_echo, assert_clean

pytestmark = pytest.mark.browser


def test_download_import_and_delete_my_account_through_settings(logged_in: Any, tmp_path: Any) -> None:
    tab = logged_in()
    page = tab.page
    ask_for_echo(tab, "hello export")
    user = Conversation.objects.get().owner

    page.get_by_test_id("open-settings").click()
    with page.expect_download() as download:
        page.get_by_test_id("download-data").click()
    archive_path = tmp_path / download.value.suggested_filename
    download.value.save_as(archive_path)
    assert archive_path.name.startswith(f"jxai-{user.get_username()}-") and archive_path.suffix == ".zip"
    with zipfile.ZipFile(archive_path) as archive:
        tree_name = next(n for n in archive.namelist() if n.endswith("/conversation.json"))
        tree = json.loads(archive.read(tree_name))
    assert [m["content"] for m in tree["messages"] if m["role"] == "user"] == ["hello export"]

    page.get_by_test_id("import-data").set_input_files(str(archive_path))
    expect(page.locator("#import-status")).to_have_text("Imported 1 conversation.")
    expect(page.get_by_test_id("conversation-link").filter(has_text="hello export")).to_have_count(2)
    assert Conversation.objects.filter(owner=user).count() == 2
    # A report with skipped conversations on a phone: one entry per skipped conversation,
    # told apart, and a long title wraps inside the dialog.
    page.set_viewport_size({"width": 390, "height": 844})
    message = {"author": {"role": "user"}, "content": {"content_type": "text", "parts": ["x"]}}
    loop = {"title": "Loop" + "o" * 150, "mapping": {"a": {"parent": "b", "message": message},
                                                     "b": {"parent": "a", "message": message}}}
    mixed = tmp_path / "conversations.json"
    fine = {"mapping": {"a": {"parent": None, "message": message}}}
    mixed.write_text(json.dumps([{"title": "Fine", **fine}, {"title": "Fine too", **fine}, loop,
                                 {"title": "Bad time", "create_time": "yesterday", "mapping": {}}]))
    page.get_by_test_id("import-data").set_input_files(str(mixed))
    status = page.locator("#import-status")
    expect(status).to_contain_text("Skipped 2:")
    assert status.inner_text().startswith("Imported 2 conversations. Skipped 2:")
    assert status.inner_text().endswith("its messages form a cycle · Bad time: the time 'yesterday' cannot be read")
    assert status.evaluate("e => e.scrollWidth <= e.clientWidth")
    page.set_viewport_size({"width": 1280, "height": 820})

    page.locator("[data-testid=delete-account-confirm]").fill("not my password")
    page.get_by_test_id("delete-account").click()
    expect(page.locator("#delete-account-status")).to_contain_text("not your password")
    page.locator("[data-testid=delete-account-confirm]").fill(PASSWORD)
    page.get_by_test_id("delete-account").click()
    page.wait_for_url("**/accounts/login/")
    assert not get_user_model().objects.filter(pk=user.pk).exists() and not Conversation.objects.exists()
    page.goto("/")
    page.wait_for_url("**/accounts/login/?next=/")
    tab.console_errors[:] = [e for e in tab.console_errors if "403" not in e]  # the wrong password's answer
    assert_clean(tab)
