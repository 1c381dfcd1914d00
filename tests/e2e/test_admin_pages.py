"""Admin pages in a real browser against the real server: the registered-tools page keeps
long names, descriptions and JSON schemas inside a 1024 px window, a conversation's page
keeps a long transcript inside a 1280 px window, and the site icon answers.

A staff user logs in through the admin's login form, as a person would. The page's wrapping
comes from ``jxai_app/static/jxai_app/admin.css`` (see ``tests/app/test_site_assets.py`` for
the markup checks).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group

from jxai_app.models import ToolPolicy
from tests.e2e.conftest import PASSWORD
from tests.e2e.steps import admin_login, assert_clean, screenshot

pytestmark = pytest.mark.browser

REGISTERED = "/admin/jxai_app/toolpolicy/registered/"
WIDTH = 1024

LENGTHEN = """() => {
  // As a tool module with long documentation would show: one description of a 300-letter
  // word and 200 short ones, and a schema whose lines run far past the window.
  const row = document.querySelector('#registered-tools tbody tr');
  row.cells[1].textContent = 'D'.repeat(300) + ' ' + 'word '.repeat(200);
  const schema = {type: 'object', properties: {}};
  for (let i = 0; i < 5; i++) {
    schema.properties['p' + i] = {type: 'string', description: 'long description '.repeat(20) + 'x'.repeat(250)};
  }
  row.querySelector('pre.jxai-schema').textContent = JSON.stringify(schema, null, 2);
}"""

MEASURE = """() => {
  const pres = [...document.querySelectorAll('pre.jxai-schema')];
  return {
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    tableRight: document.querySelector('#registered-tools').getBoundingClientRect().right,
    notesRight: Math.max(0, ...[...document.querySelectorAll('#content p')].map(p => p.getBoundingClientRect().right)),
    schemaOverflow: pres.filter(p => p.scrollWidth > p.clientWidth + 1).length,
    whiteSpace: [...new Set(pres.map(p => getComputedStyle(p).whiteSpace))],
    descriptionHeight: document.querySelector('#registered-tools tbody tr').cells[1].getBoundingClientRect().height,
  };
}"""


def test_registered_tools_page_wraps_inside_a_1024_px_window(open_page: Any, live_db: None,
                                                             django_user_model: Any) -> None:
    team = Group.objects.create(name="analysts_" + "a" * 120)     # one unbroken 129-letter name
    ToolPolicy.objects.create(tool_name="search_conversations").allowed_groups.add(team)
    ToolPolicy.objects.create(tool_name="retired_" + "r" * 180)    # a policy for no registered tool
    django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)

    tab = open_page(viewport={"width": WIDTH, "height": 800})
    admin_login(tab, "root", REGISTERED)
    page = tab.page
    page.locator("#registered-tools tbody tr[data-tool]").first.wait_for()
    assert page.locator("#registered-tools tbody tr[data-tool]").count() >= 3
    assert page.locator("link[rel=stylesheet][href$='jxai_app/admin.css']").count() == 1

    seen = page.evaluate(MEASURE)
    screenshot(tab, "admin-registered-tools-1024.png")
    assert seen["whiteSpace"] == ["pre-wrap"], seen
    assert seen["scrollWidth"] <= seen["clientWidth"], f"the page scrolls sideways: {seen}"
    assert seen["tableRight"] <= seen["clientWidth"] and seen["notesRight"] <= seen["clientWidth"], seen
    assert seen["schemaOverflow"] == 0, seen

    page.evaluate(LENGTHEN)
    seen = page.evaluate(MEASURE)
    screenshot(tab, "admin-registered-tools-1024-long.png")
    assert seen["scrollWidth"] <= seen["clientWidth"], f"long content widens the page: {seen}"
    assert seen["tableRight"] <= seen["clientWidth"], seen
    assert seen["schemaOverflow"] == 0, f"a schema scrolls sideways inside its cell: {seen}"
    assert seen["descriptionHeight"] > 200, f"the long description wrapped onto many lines: {seen}"
    assert_clean(tab)


def test_the_site_icon_answers_on_admin_and_app_pages(open_page: Any, live_db: None,
                                                       django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)
    tab = open_page(viewport={"width": WIDTH, "height": 800})
    admin_login(tab, "root", "/admin/")
    page = tab.page
    icon = page.locator("link[rel=icon]")
    assert icon.count() == 1 and icon.get_attribute("type") == "image/svg+xml"
    svg = page.request.get(str(icon.get_attribute("href")))
    assert svg.ok and svg.headers["content-type"].startswith("image/svg+xml")

    ico = page.request.get("/favicon.ico", max_redirects=0)
    assert ico.status == 302 and ico.headers["location"] == icon.get_attribute("href")
    followed = page.request.get("/favicon.ico")
    assert followed.status == 200 and followed.body() == svg.body()

    page.goto("/accounts/login/")
    assert page.locator("link[rel=icon]").get_attribute("href") == icon.get_attribute("href")
    # The icon really renders: an <img> of it has its natural size (a broken image has 0).
    size = page.evaluate("""href => new Promise(done => {
      const img = new Image(); img.onload = () => done([img.naturalWidth, img.naturalHeight]);
      img.onerror = () => done([0, 0]); img.src = href; })""", icon.get_attribute("href"))
    assert size[0] > 0 and size[1] > 0, size
    assert_clean(tab)


TRANSCRIPT = """() => {
  const table = document.querySelector('.jxai-transcript table');
  const content = [...document.querySelectorAll('.jxai-transcript td.field-content p')];
  return {
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    tableRight: table.getBoundingClientRect().right,
    tableOverflow: table.parentElement.scrollWidth - table.parentElement.clientWidth,
    // a short column squeezed until its words break: its header or cells overflow
    squeezed: [...table.querySelectorAll('th, td')].filter(c => c.scrollWidth > c.clientWidth + 1)
      .map(c => c.className),
    whiteSpace: [...new Set(content.map(p => getComputedStyle(p).whiteSpace))],
  };
}"""


def test_a_conversation_page_keeps_a_long_transcript_inside_a_1280_px_window(open_page: Any, live_db: None,
                                                                            django_user_model: Any) -> None:
    from jxai_app.models import Conversation, Message

    root = django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)
    conversation = Conversation.objects.create(owner=root, model="gpt-4o", title="Long answers")
    Message.objects.create(conversation=conversation, position=0, role="user", content="Tell me everything.")
    Message.objects.create(conversation=conversation, position=1, role="assistant", status="complete",
                           content="A" * 400 + "\n" + "word " * 600, reasoning_content="think " * 300 + "R" * 300,
                           usage={"inputTokens": 12, "outputTokens": 3456, "note": "n" * 200})
    path = f"/admin/jxai_app/conversation/{conversation.pk}/change/"

    tab = open_page(viewport={"width": 1280, "height": 900})
    admin_login(tab, "root", path)
    page = tab.page
    page.locator(".jxai-transcript td.field-content").first.wait_for()
    seen = page.evaluate(TRANSCRIPT)
    page.locator(".jxai-transcript").scroll_into_view_if_needed()
    screenshot(tab, "admin-conversation-1280.png")
    assert seen["whiteSpace"] == ["pre-wrap"], seen
    assert seen["scrollWidth"] <= seen["clientWidth"], f"the page scrolls sideways: {seen}"
    assert seen["tableRight"] <= seen["clientWidth"] and seen["tableOverflow"] <= 1, seen
    assert seen["squeezed"] == [], seen
    assert_clean(tab)


def test_a_conversation_with_hundreds_of_messages_keeps_a_usable_page(open_page: Any, live_db: None,
                                                                     django_user_model: Any) -> None:
    """Every message used to be on the change page (hundreds made it 6,843 px tall, and
    a 120-character message took a 298 px row in a 131 px column); now 25 a page, the others a
    click away, in a wide text column (3,956 px for this page, whatever the message count)."""
    from jxai_app.models import Conversation, Message

    root = django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)
    conversation = Conversation.objects.create(owner=root, model="gpt-4o", title="Hundreds")
    Message.objects.bulk_create([
        Message(conversation=conversation, position=i, role="user" if i % 2 == 0 else "assistant",
                content=f"message number {i:03d} " + "and some words " * 8) for i in range(400)])
    path = f"/admin/jxai_app/conversation/{conversation.pk}/change/"
    tab = open_page(viewport={"width": 1280, "height": 900})
    admin_login(tab, "root", path)
    page = tab.page
    rows = page.locator(".jxai-transcript tbody tr.has_original")
    assert rows.count() == 25
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 4500, f"the change page is {height} px tall"
    assert page.locator(".jxai-transcript th.column-content").evaluate("th => th.getBoundingClientRect().width") > 300
    pages = page.get_by_test_id("message-pages")
    assert "Messages 1–25 of 400" in pages.inner_text()
    pages.get_by_role("link", name="16", exact=True).click()
    page.wait_for_url("**?messages_page=16")
    assert page.locator(".jxai-transcript td.field-position").all_text_contents()[0].strip() == "375"
    screenshot(tab, "admin-conversation-paged.png")
    assert_clean(tab)


AXE_PAGES = ("/admin/", "/admin/jxai_app/conversation/", "/admin/jxai_app/conversation/{pk}/change/",
             "/admin/jxai_app/conversation/{pk}/transcript/", REGISTERED, "/admin/jxai_app/usageledger/")
"""The MCP server's add page is checked by tests/e2e/test_mcp_admin.py, which saves through it:
the server caches content type ids, and every test's flush numbers them anew, so a model's
admin pages are opened by one test only."""


LIST_FIT = """() => {
  const table = document.querySelector('#result_list');
  const title = table.querySelector('td.field-title');
  return {tableRight: table.getBoundingClientRect().right, clientWidth: document.documentElement.clientWidth,
          overflow: table.parentElement.scrollWidth - table.parentElement.clientWidth,
          titleWidth: title ? title.getBoundingClientRect().width : 0};
}"""


def test_admin_pages_say_jxai_show_the_transcript_link_and_pass_axe(open_page: Any, live_db: None,
                                                                    django_user_model: Any) -> None:
    """At 1280 px the conversation list's columns are all on screen, the header names jxai,
    and axe-core finds no serious or critical issue (docs/architecture.md "Admin")."""
    from axe_playwright_python.sync_playwright import Axe

    from jxai_app.models import Conversation, Message

    root = django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)
    conversation = Conversation.objects.create(owner=root, model="gpt-4o", title="A title " * 8)
    question = Message.objects.create(conversation=conversation, position=0, role="user", content="Hello")
    Message.objects.create(conversation=conversation, position=1, role="assistant", status="complete", content="Hi",
                           parent=question)
    conversation.active_leaf = Message.objects.create(conversation=conversation, position=2, role="assistant",
                                                      status="complete", content="Hello again", parent=question)
    conversation.save(update_fields=["active_leaf"])  # a second branch: the transcript links the change page
    tab = open_page(viewport={"width": 1280, "height": 900})
    admin_login(tab, "root", "/admin/jxai_app/conversation/")
    page = tab.page
    link = page.get_by_role("link", name="transcript")
    box = link.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280, box
    fit = page.evaluate(LIST_FIT)
    screenshot(tab, "admin-conversations-1280.png")
    assert fit["tableRight"] <= fit["clientWidth"] and fit["overflow"] <= 1, fit   # every column on screen
    assert fit["titleWidth"] >= 120, fit                                          # not a word a line
    assert page.locator("#site-name").inner_text() == "jxai administration"
    assert page.title().endswith("jxai admin")

    axe = Axe()
    found = {}
    for path in AXE_PAGES:
        page.goto(path.format(pk=conversation.pk))
        found[path] = [(v["id"], [n["html"][:120] for n in v["nodes"]]) for v in axe.run(page).response["violations"]
                       if v["impact"] in ("serious", "critical")]
    assert all(not issues for issues in found.values()), found
    assert_clean(tab)


def test_the_share_links_list_fits_a_1280_px_window(open_page: Any, live_db: None, django_user_model: Any) -> None:
    """Every column of the share links list is on screen at 1280 px, with no sideways scroll
    (it was a 1,500 px table: two UUIDs and six dates)."""
    from django.utils import timezone

    from jxai_app.models import Conversation, ShareLink

    root = django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)
    conversation = Conversation.objects.create(owner=root, model="gpt-4o", title="Shared")
    now = timezone.now()
    ShareLink.objects.create(owner=root, conversation=conversation, token_hash="a" * 64, snapshot_at=now,
                             expires_at=now + timezone.timedelta(days=7), revoked_at=now, view_count=12)
    tab = open_page(viewport={"width": 1280, "height": 900})
    admin_login(tab, "root", "/admin/jxai_app/sharelink/")
    page = tab.page
    table = page.locator("#result_list")
    table.wait_for()
    seen = page.evaluate(LIST_FIT)
    screenshot(tab, "admin-share-links-1280.png")
    assert seen["tableRight"] <= seen["clientWidth"] and seen["overflow"] <= 1, seen
    assert_clean(tab)
