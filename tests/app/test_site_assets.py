"""The site icon and the admin stylesheet, through Django's test client and the real database.

* Every page of ours (login, logged out, chat, the admin) links the SVG icon, and
  ``/favicon.ico`` (asked for by browsers on pages that name no icon) redirects to it instead
  of answering 404 — with the plain static name under ``DEBUG`` and the hashed one once
  ``collectstatic`` has run with the manifest storage.
* The registered-tools admin page (like every admin page) links ``jxai_app/admin.css`` (no inline ``<style>``), whose
  rules make long descriptions and schemas wrap (the browser check of the layout is
  ``tests/e2e/test_admin_pages.py``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.staticfiles import finders
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse
from tests.app.conftest import production_static

STATIC_SOURCE = Path(__file__).resolve().parents[2] / "jxai_app" / "static" / "jxai_app"
ICON_URL = "/static/jxai_app/favicon.svg"
SVG = "{http://www.w3.org/2000/svg}"


class Links(HTMLParser):
    """The ``<link>`` and ``<style>`` elements of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []
        self.style_elements = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "link":
            self.links.append(dict(attrs))
        self.style_elements += tag == "style"

    def hrefs(self, rel: str) -> list[str]:
        return [str(link.get("href")) for link in self.links if link.get("rel") == rel]


def links(html: str) -> Links:
    parser = Links()
    parser.feed(html)
    return parser


def _staff(django_user_model: Any, name: str, *perms: str) -> Any:
    user = django_user_model.objects.create_user(name, is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="jxai_app"))
    return user


def test_the_icon_is_a_small_valid_svg() -> None:
    path = finders.find("jxai_app/favicon.svg")
    assert path is not None and Path(path) == STATIC_SOURCE / "favicon.svg"
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg" and root.get("viewBox") == "0 0 32 32"
    assert root.findall(f"{SVG}path"), "draws something"
    assert Path(path).stat().st_size < 2_000


@pytest.mark.django_db
def test_every_page_links_the_icon(client: Client, django_user_model: Any) -> None:
    assert links(client.get("/accounts/login/").content.decode()).hrefs("icon") == [ICON_URL]
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-3141")
    client.force_login(user)
    for url in ("/", reverse("admin:index"), reverse("admin:jxai_app_conversation_changelist"),
                reverse("admin:jxai_app_registered_tools")):
        response = client.get(url)
        assert response.status_code == 200, url
        page = links(response.content.decode())
        assert page.hrefs("icon") == [ICON_URL], url
        icon = next(link for link in page.links if link.get("rel") == "icon")
        assert icon.get("type") == "image/svg+xml"
    # Logging out redirects to the login page (LOGOUT_REDIRECT_URL); the logged-out page
    # that Django shows without one extends the same base.
    assert client.post("/accounts/logout/")["Location"] == "/accounts/login/"
    assert links(render_to_string("registration/logged_out.html")).hrefs("icon") == [ICON_URL]


@pytest.mark.django_db
def test_favicon_ico_redirects_to_the_svg_for_anyone(client: Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 302 and response["Location"] == ICON_URL
    assert client.head("/favicon.ico").status_code == 302


@pytest.mark.django_db
def test_favicon_and_admin_css_with_the_manifest_storage(client: Client, django_user_model: Any,
                                                         tmp_path: Path) -> None:
    with production_static(tmp_path):
        client = Client()   # a fresh handler: WhiteNoise indexes STATIC_ROOT when it starts
        redirect = client.get("/favicon.ico")
        assert redirect.status_code == 302
        hashed = redirect["Location"]
        assert re.fullmatch(r"/static/jxai_app/favicon\.[0-9a-f]{12}\.svg", hashed), hashed
        icon = client.get(hashed)
        assert icon.status_code == 200 and icon["Content-Type"].startswith("image/svg+xml")
        assert b"".join(icon.streaming_content) == (STATIC_SOURCE / "favicon.svg").read_bytes()
        assert links(client.get("/accounts/login/").content.decode()).hrefs("icon") == [hashed]

        client.force_login(_staff(django_user_model, "tools", "view_toolpolicy"))
        page = links(client.get(reverse("admin:jxai_app_registered_tools")).content.decode())
        css = [href for href in page.hrefs("stylesheet") if "/jxai_app/admin." in href]
        assert len(css) == 1 and re.fullmatch(r"/static/jxai_app/admin\.[0-9a-f]{12}\.css", css[0]), css
        served = client.get(css[0])
        assert served.status_code == 200
        assert b"".join(served.streaming_content) == (STATIC_SOURCE / "admin.css").read_bytes()


@pytest.mark.django_db
def test_registered_tools_page_styles_itself_from_a_static_file(django_user_model: Any) -> None:
    client = Client()
    anonymous = client.get(reverse("admin:jxai_app_registered_tools"))
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    client.force_login(_staff(django_user_model, "tools", "view_toolpolicy"))
    response = client.get(reverse("admin:jxai_app_registered_tools"))
    assert response.status_code == 200
    body = response.content.decode()
    page = links(body)
    assert "/static/jxai_app/admin.css" in page.hrefs("stylesheet")
    assert page.style_elements == 0, "no inline <style>: the rules live in jxai_app/admin.css"
    assert body.count('<pre class="jxai-schema" tabindex="0">') == len(response.context["rows"]) > 0  # scrolls by keyboard

    rules = (STATIC_SOURCE / "admin.css").read_text()
    schema = re.search(r"\.jxai-schema\s*\{([^}]*)\}", rules)
    assert schema is not None
    assert "white-space: pre-wrap" in schema.group(1) and "overflow-wrap: anywhere" in schema.group(1)
    cells = re.search(r"#registered-tools td\.jxai-wrap,[^{]*\{([^}]*)\}", rules)
    assert cells is not None and "overflow-wrap: anywhere" in cells.group(1)
    # name, description, parameters and who-may-use-it wrap; the short columns keep whole words
    assert body.count('<td class="jxai-wrap">') == 4 * len(response.context["rows"])
