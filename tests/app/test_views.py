"""The chat page, login/logout pages, CSP header and static files (docs/architecture.md "The chat page";
docs/security.md, threats 1 and 6), through Django's test client and the real database."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from jxai_app import store
from jxai_app.conf import get_model_registry
from jxai_app.web.csp import CSP_HEADER
from jxai_app.models import Conversation
from tests.app.conftest import production_static

STATIC_SOURCE = Path(__file__).resolve().parents[2] / "jxai_app" / "static" / "jxai_app"
HOOKS = ("composer", "send", "stop", "new-conversation", "error", "transcript", "model", "search",
         "open-settings", "custom-instructions", "settings-save")


class PageParser(HTMLParser):
    """Collects the pieces of a page the tests look at."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.stylesheets: list[str] = []
        self.testids: set[str] = set()
        self.inline_handlers: list[tuple[str, str]] = []
        self.style_attributes = 0
        self._json_id: str | None = None
        self.json_blocks: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if "data-testid" in attributes:
            self.testids.add(str(attributes["data-testid"]))
        self.inline_handlers += [(tag, name) for name, _ in attrs if name.startswith("on")]
        self.style_attributes += "style" in attributes
        if tag == "script":
            self.scripts.append(attributes)
            if attributes.get("type") == "application/json":
                self._json_id = attributes.get("id")
        if tag == "link" and attributes.get("rel") == "stylesheet":
            self.stylesheets.append(str(attributes["href"]))

    def handle_data(self, data: str) -> None:
        if self._json_id is not None:
            self.json_blocks[self._json_id] = self.json_blocks.get(self._json_id, "") + data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._json_id = None


def parse(html: str) -> PageParser:
    parser = PageParser()
    parser.feed(html)
    return parser


def initial_data(response: Any) -> dict[str, Any]:
    page = parse(response.content.decode())
    return json.loads(page.json_blocks["jxai-initial"])


def csp_directives(value: str) -> dict[str, list[str]]:
    directives: dict[str, list[str]] = {}
    for part in value.split(";"):
        words = part.split()
        if words:
            directives[words[0]] = words[1:]
    return directives


@pytest.fixture
def logged_in(client: Client, user: Any) -> Client:
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_logged_out_visitors_are_sent_to_the_login_page(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"
    some_id = uuid.uuid4()
    response = client.get(f"/c/{some_id}")
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next=/c/{some_id}"


@pytest.mark.django_db
def test_the_chat_page_renders_every_hook_and_no_inline_script(logged_in: Client) -> None:
    response = logged_in.get("/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = parse(response.content.decode())
    assert set(HOOKS) <= page.testids
    # Every script is a file from our static folder, or the json_script data block.
    for script in page.scripts:
        if script.get("type") == "application/json":
            continue
        assert str(script.get("src", "")).startswith("/static/jxai_app/"), script
    srcs = [s.get("src") for s in page.scripts]
    assert srcs.index("/static/jxai_app/vendor/purify.min.js") < srcs.index("/static/jxai_app/chat.js")
    assert page.inline_handlers == [] and page.style_attributes == 0
    assert page.stylesheets == ["/static/jxai_app/chat.css", "/static/jxai_app/vendor/highlight-github.min.css",
                                "/static/jxai_app/vendor/highlight-github-dark.min.css"]


@pytest.mark.django_db
def test_the_page_hands_models_and_conversations_to_the_script(logged_in: Client, user: Any, other_user: Any) -> None:
    registry = get_model_registry()
    older = store.conversation_create(user=user, model=registry.default_alias, title="older")
    newer = store.conversation_create(user=user, model=registry.default_alias, title="newer")
    store.conversation_rename(user=user, conversation_id=newer.pk, title="newer, renamed")
    store.conversation_create(user=other_user, model=registry.default_alias, title="mallory's")
    data = initial_data(logged_in.get("/"))
    assert data["conversationId"] is None and data["conversation"] is None
    assert data["models"] == registry.public_listing()
    assert data["defaultModel"] == registry.default_alias
    assert data["wsPath"] == "/ws/chat/"
    assert [c["title"] for c in data["conversations"]] == ["newer, renamed", "older"]
    entry = data["conversations"][1]
    assert entry["id"] == str(older.pk)
    assert entry["status"] == "idle" and entry["tokenCount"] == 0 and entry["lastError"] is None
    assert entry["contextWindow"] == registry.get(registry.default_alias).context_window

    data = initial_data(logged_in.get(f"/c/{older.pk}"))
    assert data["conversationId"] == str(older.pk)
    assert data["conversation"]["title"] == "older"


@pytest.mark.django_db
@override_settings(JXAI_CONVERSATIONS_PAGE_SIZE=3)
def test_the_page_hands_only_the_first_page_of_a_long_list(logged_in: Client, user: Any) -> None:
    """Many conversations: the page carries one page (``JXAI_CONVERSATIONS_PAGE_SIZE``), in the
    socket's order (most recently updated first, ties by id descending, docs/websocket.md), and
    an older conversation opened by address still comes along on its own."""
    rows = [store.conversation_create(user=user, model="m", title=f"c{i}") for i in range(7)]
    base = timezone.now()
    for i, row in enumerate(rows):
        # c2 and c3 share a timestamp at the page boundary: the id decides which one is on it.
        moment = base - timedelta(minutes=2 if i in (2, 3) else i)
        Conversation.objects.filter(pk=row.pk).update(updated_at=moment)
    expected = sorted(Conversation.objects.filter(owner=user), key=lambda c: (c.updated_at, c.pk.hex), reverse=True)
    data = initial_data(logged_in.get("/"))
    assert [c["id"] for c in data["conversations"]] == [str(c.pk) for c in expected[:3]]

    oldest = expected[-1]
    data = initial_data(logged_in.get(f"/c/{oldest.pk}"))
    assert len(data["conversations"]) == 3 and str(oldest.pk) not in [c["id"] for c in data["conversations"]]
    assert data["conversation"]["id"] == str(oldest.pk)


@pytest.mark.django_db
def test_a_title_cannot_break_out_of_the_data_block(logged_in: Client, user: Any) -> None:
    title = "</script><script>window.__pwned=1</script><img src=x onerror=alert(1)>"
    conversation = store.conversation_create(user=user, model="m", title=title)
    response = logged_in.get(f"/c/{conversation.pk}")
    body = response.content.decode()
    assert "<script>window.__pwned" not in body and "<img src=x" not in body
    assert initial_data(response)["conversation"]["title"] == title
    assert parse(body).inline_handlers == []


@pytest.mark.django_db
def test_someone_elses_conversation_answers_exactly_like_a_missing_one(
    logged_in: Client, other_user: Any
) -> None:
    theirs = store.conversation_create(user=other_user, model="m", title="secret plans")
    foreign = logged_in.get(f"/c/{theirs.pk}")
    missing = logged_in.get(f"/c/{uuid.uuid4()}")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.content == missing.content
    assert b"secret plans" not in foreign.content
    assert {k: v for k, v in foreign.items() if k != "Content-Length"} == {
        k: v for k, v in missing.items() if k != "Content-Length"
    }
    assert logged_in.get("/c/not-a-uuid").status_code == 404


@pytest.mark.django_db
def test_the_page_answers_only_safe_methods(logged_in: Client) -> None:
    assert logged_in.post("/").status_code == 405
    assert logged_in.head("/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/accounts/login/"])
def test_pages_carry_a_strict_content_security_policy(client: Client, user: Any, path: str) -> None:
    if path == "/":
        client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    policy = csp_directives(response[CSP_HEADER])
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["img-src"] == ["'self'", "data:"]
    assert policy["default-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert policy["connect-src"] == ["'self'", "ws://testserver", "wss://testserver"]
    assert not any("unsafe" in source for sources in policy.values() for source in sources)


@pytest.mark.django_db
def test_admin_and_non_html_answers_keep_their_own_headers(admin_client: Client) -> None:
    assert CSP_HEADER not in admin_client.get("/admin/")
    assert CSP_HEADER not in admin_client.get("/static/jxai_app/chat.js")


@pytest.mark.django_db
def test_log_in_and_log_out_through_the_pages(client: Client, user: Any) -> None:
    user.set_password("alice-pw-123")
    user.save()
    page = client.get("/accounts/login/?next=/")
    assert page.status_code == 200
    assert {"login-username", "login-password", "login-submit"} <= parse(page.content.decode()).testids

    refused = client.post("/accounts/login/", {"username": "alice", "password": "wrong", "next": "/"})
    assert refused.status_code == 200
    assert "login-error" in parse(refused.content.decode()).testids

    accepted = client.post("/accounts/login/", {"username": "alice", "password": "alice-pw-123", "next": "/"})
    assert accepted.status_code == 302 and accepted["Location"] == "/"
    chat = client.get("/")
    assert chat.status_code == 200
    assert "logout" in parse(chat.content.decode()).testids

    assert client.get("/accounts/logout/").status_code == 405   # Django 5: logout is POST only
    out = client.post("/accounts/logout/")
    assert out.status_code == 302 and out["Location"] == "/accounts/login/"
    assert client.get("/").status_code == 302


@pytest.mark.django_db
def test_static_files_are_served_by_the_app_with_debug_off(user: Any, tmp_path: Path) -> None:
    with production_static(tmp_path):
        client = Client()   # a fresh handler: WhiteNoise indexes STATIC_ROOT when it starts
        client.force_login(user)
        page = parse(client.get("/").content.decode())
        urls = [str(s["src"]) for s in page.scripts if s.get("src")] + page.stylesheets
        assert len(urls) == 9  # theme.js, early.js, three vendor scripts, chat.js; chat.css and two highlight styles
        for url in urls:
            assert re.search(r"\.[0-9a-f]{12}\.(js|css)$", url), url   # hashed names, cached forever
            response = client.get(url)
            assert response.status_code == 200, url
            name = re.sub(r"\.[0-9a-f]{12}\.", ".", url.removeprefix("/static/jxai_app/"))
            body = b"".join(response.streaming_content)
            assert body == (STATIC_SOURCE / name).read_bytes()
            assert "max-age=315360000" in response["Cache-Control"]
        # chat.js imports its modules by relative name; the unhashed copies are served too.
        for module in ("render.js", "socket.js", "transcript.js", "code.js", "actions.js", "feedback.js",
                       "search.js", "settings.js"):
            response = client.get(f"/static/jxai_app/{module}")
            assert response.status_code == 200
            assert response["Content-Type"].startswith("text/javascript")
