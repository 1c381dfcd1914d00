"""MCP servers (docs/mcp.md) in a real browser against the real server: a staff member adds an MCP server in
admin, the registered-tools page lists its tools with their server and the server's health
after a refresh, and a tool's output shows on the chat page as text, never as markup.

The server is ``tests/app/mcp_servers.py`` over stdio, started by the daphne worker that
serves the pages; deleting the row and refreshing again closes its session (the child ends).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe

from jxai_app.models import McpServer
from tests.app.mcp_support import SERVER_SCRIPT
from tests.e2e.conftest import PASSWORD
from tests.e2e.steps import admin_login, assert_clean, screenshot, send, wait_connected

pytestmark = pytest.mark.browser

REGISTERED = "/admin/jxai_app/toolpolicy/registered/"


def test_an_mcp_server_added_in_admin_lists_its_tools_with_their_server(open_page: Any, live_db: None,
                                                                        django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)
    tab = open_page(viewport={"width": 1280, "height": 900})
    page = tab.page
    admin_login(tab, "root", "/admin/jxai_app/mcpserver/add/")
    assert "named NAME__TOOL (this name" in page.locator(".field-name .help").inner_text()  # read as written
    violations = [v["id"] for v in Axe().run(page).response["violations"] if v["impact"] in ("serious", "critical")]
    assert violations == []  # axe-core, as for the other admin pages (tests/e2e/test_admin_pages.py)
    page.fill("#id_name", "e2e")
    page.select_option("#id_transport", "stdio")
    page.fill("#id_command", sys.executable)
    page.fill("#id_arguments", json.dumps([str(SERVER_SCRIPT), "stdio"]))
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/jxai_app/mcpserver/")
    assert McpServer.objects.get(name="e2e").arguments == [str(SERVER_SCRIPT), "stdio"]

    try:
        page.goto(REGISTERED)
        page.get_by_test_id("refresh-mcp").click()  # this worker reads the new row and connects
        page.wait_for_url(f"**{REGISTERED}", timeout=40_000)  # the child's start: seconds on a loaded machine
        assert page.locator("ul.messagelist .success").count() == 1
        server = page.locator("#mcp-servers tr[data-server='e2e']")
        assert server.locator(".jxai-state").inner_text() == "connected"
        rows = page.locator("#registered-tools tr[data-source='MCP server e2e']")
        names = rows.evaluate_all("rows => rows.map(r => r.dataset.tool)")
        assert {"e2e__add", "e2e__echo", "e2e__html", "e2e__picture"} <= set(names), names
        assert rows.filter(has_text="Add two integers.").count() == 1
        assert page.locator("#registered-tools tr[data-tool='calculate']").get_attribute("data-source") == "built-in"
        screenshot(tab, "admin-registered-tools-mcp.png")

        # The tool's output is data: the chat page shows the markup it returned as text.
        page.goto("/")
        wait_connected(tab)
        send(tab, "[tool e2e__html]")
        page.get_by_text("(from the calculator)").wait_for(timeout=30_000)  # the scripted answer after the call
        card = page.get_by_test_id("tool-call")
        card.locator("summary", has_text="Result").click()  # open the result, as a person would
        result = card.locator(".tool-result-text")
        assert "<img src=x onerror=" in result.inner_text()  # shown as text, not as markup
        assert card.locator("img, script").count() == 0
        assert page.evaluate("window.__pwned") is None
        screenshot(tab, "chat-mcp-tool-output.png")
    finally:
        McpServer.objects.filter(name="e2e").delete()
        page.goto(REGISTERED)
        page.get_by_test_id("refresh-mcp").click()  # the worker closes the session: the child ends
        page.wait_for_url(f"**{REGISTERED}", timeout=40_000)
    assert page.locator("#mcp-servers").count() == 0
    assert_clean(tab)
