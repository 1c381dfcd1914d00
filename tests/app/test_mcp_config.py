"""MCP servers configured without admin (JSON) and in admin, and who may edit them.

No server runs here: these are the configuration's rules (``jxai_app.conf``,
``jxai_app.core.mcp.config``, ``McpServer``) and admin's permissions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from jxai_app import conf
from jxai_app.tools import mcp as mcp_tools
from jxai_app.core.errors import ConfigurationError
from jxai_app.core.mcp import McpServerConfig, registry_name
from jxai_app.models import McpServer

TICKETS = {"name": "tickets", "transport": "streamable-http", "url": "https://mcp.example.com/mcp",
           "headers": {"Authorization": "TICKETS_AUTH"}, "timeout": 20, "pass_user_id": True}
FILES = {"name": "files", "transport": "stdio", "command": "npx",
         "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"], "env": ["HOME"]}


def test_servers_come_from_json_text_or_a_file(tmp_path: Path) -> None:
    [tickets, files] = conf.mcp_servers_from_env({"JXAI_MCP_SERVERS_JSON": json.dumps([TICKETS, FILES])})
    assert tickets == McpServerConfig(name="tickets", transport="streamable-http", url="https://mcp.example.com/mcp",
                                      header_env={"Authorization": "TICKETS_AUTH"}, timeout=20.0, pass_user_id=True)
    assert files.args == ("-y", "@modelcontextprotocol/server-filesystem", "/srv") and files.env_names == ("HOME",)
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"servers": [FILES]}))
    assert conf.mcp_servers_from_env({"JXAI_MCP_SERVERS_FILE": str(path)}) == [files]
    assert conf.mcp_servers_from_env({}) == []


@pytest.mark.parametrize(("entries", "says"), [
    ("[{", "is not JSON"),
    ('{"name": "x"}', "must be a JSON list"),
    (json.dumps([{**FILES, "secret": "x"}]), "unknown member(s) secret"),
    (json.dumps([{**FILES, "name": "a__b"}]), "single '_'"),
    (json.dumps([{**FILES, "command": ""}]), "needs a command"),
    (json.dumps([{**TICKETS, "url": "ftp://x"}]), "http(s) URL"),
    (json.dumps([{**TICKETS, "headers": {"Authorization": "sk-live-123 abc"}}]), "not an environment variable name"),
    (json.dumps([{**FILES, "timeout": 0}]), "positive number"),
    (json.dumps([FILES, FILES]), "same name"),
])
def test_a_bad_configuration_says_what_is_wrong(entries: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=None) as raised:
        conf.mcp_servers_from_env({"JXAI_MCP_SERVERS_JSON": entries})
    assert says in str(raised.value)


def test_registry_names_follow_openais_rule_and_long_ones_stay_apart() -> None:
    assert registry_name("tickets", "create_ticket") == "tickets__create_ticket"
    assert registry_name("files", "read.file/v2") == "files__read_file_v2"
    long_a, long_b = registry_name("s", "x" * 80 + "a"), registry_name("s", "x" * 80 + "b")
    assert len(long_a) == len(long_b) == 64 and long_a != long_b
    assert long_a == registry_name("s", "x" * 80 + "a")  # the same every time
    assert all(c.isalnum() or c in "_-" for c in long_a)


@pytest.mark.django_db
def test_a_row_replaces_a_file_entry_of_its_name_and_a_bad_row_is_left_out(settings: Any) -> None:
    settings.JXAI_MCP_SERVERS = [FILES, TICKETS]
    McpServer.objects.create(name="files", transport="stdio", command="/usr/bin/files-mcp", env_names=["HOME"])
    McpServer.objects.create(name="broken", transport="streamable-http", url="")
    configs = {c.name: c for c in mcp_tools.server_configs()}
    assert set(configs) == {"files", "tickets"}
    assert configs["files"].command == "/usr/bin/files-mcp" and configs["files"].args == ()


@pytest.mark.django_db
def test_only_superusers_edit_servers_and_staff_see_the_health_section(django_user_model: Any, settings: Any) -> None:
    settings.JXAI_MCP_SERVERS = [FILES]
    staff = django_user_model.objects.create_user("staff", password="pw-12345-long", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=[
        "add_mcpserver", "change_mcpserver", "view_mcpserver", "view_toolpolicy"]))
    client = Client()
    client.force_login(staff)
    assert client.get(reverse("admin:jxai_app_mcpserver_add")).status_code == 403
    added = client.post(reverse("admin:jxai_app_mcpserver_add"), {"name": "evil", "transport": "stdio",
                                                                  "command": "/bin/sh", "arguments": "[]"})
    assert added.status_code == 403 and not McpServer.objects.exists()
    assert client.get(reverse("admin:jxai_app_mcpserver_changelist")).status_code == 200

    page = client.get(reverse("admin:jxai_app_registered_tools")).content.decode()
    assert 'data-server="files"' in page and "not started here" in page

    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw-12345-long")
    client.force_login(root)
    made = client.post(reverse("admin:jxai_app_mcpserver_add"), {
        "name": "files2", "transport": "stdio", "command": "/usr/bin/files-mcp", "arguments": '["--root", "/srv"]',
        "env_names": '["HOME"]', "url": "", "header_env": "{}", "timeout_seconds": "15", "user_header": "X-Jxai-User"})
    assert made.status_code == 302
    assert McpServer.objects.get(name="files2").to_config().args == ("--root", "/srv")
    refused = client.post(reverse("admin:jxai_app_mcpserver_add"), {
        "name": "web", "transport": "streamable-http", "command": "", "arguments": "[]", "env_names": "[]",
        "url": "https://mcp.example.com/mcp", "header_env": '{"Authorization": "Bearer sk-123"}',
        "timeout_seconds": "15", "user_header": "X-Jxai-User"})
    assert refused.status_code == 200 and "not an environment variable name" in refused.content.decode()
