"""Tools from MCP servers (docs/mcp.md), through live websocket turns.

Real parts: MCP servers written with the SDK's server side (``tests/app/mcp_servers.py``) — a
stdio child the worker starts and a streamable-HTTP server on 127.0.0.1 — reached by the SDK's
client; the consumer through WebsocketCommunicator, the real database, and a FakeProvider on
127.0.0.1 playing the model. The hub's teardown closes the sessions, which ends the stdio
child; the HTTP server is killed by its fixture.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group

from jxai_app import conf
from jxai_app.tools import mcp as mcp_tools
from jxai_app.tools.registry import get_tool_registry
from jxai_app.models import McpServer, ToolCall, ToolPolicy
from tests.app.mcp_support import HttpServer, McpLog, stdio_server
from tests.app.turns_support import Tab, fake, hub, text_script, tool_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def mcp_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> McpLog:
    path = tmp_path / "mcp.log"
    monkeypatch.setenv("JXAI_TEST_MCP_LOG", str(path))
    return McpLog(path)


@pytest.fixture
def servers(settings: Any, fake: FakeProvider) -> Callable[..., Awaitable[None]]:
    """Configure the MCP servers (``JXAI_MCP_SERVERS``, after ``fake`` set up the models) and
    let this worker connect them, as its first request does (``mcp_tools.sync``): a child's
    start takes seconds on a loaded machine, which the turns' own waits should not count."""
    settings.JXAI_MCP_ALLOW_INTERNAL = True

    async def configure(*entries: dict[str, Any]) -> None:
        settings.JXAI_MCP_SERVERS = list(entries)
        await mcp_tools.sync()

    return configure


@pytest.fixture
def http_server(mcp_log: McpLog) -> Iterator[HttpServer]:
    server = HttpServer(mcp_log)
    yield server
    server.stop()


async def eventually(predicate: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    """Wait for a condition another task or process brings about (bounded; not a timing assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := predicate()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return value


def _offered(request_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"] for t in request_json.get("tools") or []}


async def _turn(user: Any, text: str) -> tuple[Tab, dict[str, Any], list[dict[str, Any]]]:
    """One turn on a fresh tab: the tab, ``turn_end`` and the ``tool_result`` events."""
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text=text)
    end = await tab.until_event("turn_end", timeout=30)
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] != "streaming")
    results = [i["event"] for i in tab.events() if i["event"]["type"] == "tool_result"]
    await tab.close()
    return tab, end, results


def _health(name: str) -> Any:
    manager = mcp_tools.current()
    return None if manager is None else next((h for h in manager.health() if h.name == name), None)


# -- discovery and calls ------------------------------------------------------------------
async def test_stdio_tools_are_discovered_and_called_through_a_turn(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog
) -> None:
    await servers(stdio_server())
    fake.add(tool_script("call_1", "local__add", {"a": 2, "b": "3"}), text_script(["It is 5."]))
    _, end, [result] = await _turn(user, "Add 2 and 3.")

    offered = _offered(fake.requests[0].json)
    assert {"local__add", "local__echo", "local__fail", "local__picture", "local__slow", "local__grow"} <= set(offered)
    assert "calculate" in offered  # built-ins stay
    add = offered["local__add"]
    assert add["description"] == "Add two integers."
    assert add["parameters"]["properties"]["a"]["type"] == "integer" and add["parameters"]["required"] == ["a", "b"]
    assert end["event"]["outcome"] == "complete"
    assert result["success"] is True and result["result"]["data"] == {"result": 5}
    assert mcp_log.calls("add") == [{"call": "add", "a": 2, "b": 3}]  # "3" became 3 before the server saw it
    call = await ToolCall.objects.aget(call_id="call_1")
    assert call.name == "local__add" and call.success is True
    answer = fake.requests[1].json["messages"][-1]
    assert answer["role"] == "tool" and answer["content"] == '{"success":true,"data":{"result":5}}'
    health = _health("local")
    assert health.state == "connected" and health.tool_count == 7 and health.protocol_version


async def test_images_resources_and_server_errors_become_our_results(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog
) -> None:
    await servers(stdio_server())
    fake.add(tool_script("call_1", "local__picture", {}), tool_script("call_2", "local__fail", {"reason": "no disk"}),
             text_script(["Done."]))
    _, end, [picture, failed] = await _turn(user, "Show a picture, then fail.")

    assert picture["success"] is True
    assert picture["result"]["data"] == [
        {"type": "text", "text": "A red dot."},
        {"type": "image", "mimeType": "image/png", "bytes": 70},  # a description, not the bytes
        {"type": "resource_link", "uri": "https://example.com/dot.png", "name": "dot.png"},
    ]
    assert picture["result"]["summary"] == "1 image, 1 resource_link"
    assert failed["success"] is False and "fail" in failed["result"]["error"]  # isError → a failed result
    assert end["event"]["outcome"] == "complete"


async def test_schema_validation_refuses_bad_arguments_before_the_server_sees_them(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog
) -> None:
    await servers(stdio_server())
    fake.add(tool_script("call_1", "local__add", {"a": "two"}), text_script(["Sorry."]))
    _, _, [result] = await _turn(user, "Add.")

    assert result["success"] is False
    assert result["result"]["error"].startswith("Validation failed: ")
    assert "'b'" in result["result"]["error"] and "'a'" in result["result"]["error"]
    assert mcp_log.calls("add") == []


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
async def test_a_tool_added_at_run_time_appears_after_list_changed(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog, era: str
) -> None:
    """Both protocol eras: a 2026-07-28 server sends the change on the ``subscriptions/listen``
    stream the client opened; a 2025 one (the handshake only) sends it unasked."""
    config = stdio_server()
    if era != "2026-07-28":
        config["args"].append("legacy")
    await servers(config)
    fake.add(tool_script("call_1", "local__grow", {}), text_script(["Grown."]))
    _, _, [grown] = await _turn(user, "Grow.")
    assert grown["success"] is True and "local__late" not in _offered(fake.requests[0].json)
    # The server sent notifications/tools/list_changed; the worker listed again by itself.
    await eventually(lambda: "local__late" in get_tool_registry(), "local__late in the registry")

    fake.add(tool_script("call_2", "local__late", {"word": "hi"}), text_script(["HI."]))
    _, _, [late] = await _turn(user, "Use the new tool.")
    offered = _offered(fake.requests[2].json)
    assert offered["local__late"]["description"] == "A tool added at run time."
    assert late["success"] is True and late["result"]["data"] == {"result": "HI"}
    assert _health("local").tool_count == 8 and _health("local").protocol_version == era


async def test_a_server_killed_mid_turn_gives_a_failed_result_and_reconnects(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog
) -> None:
    await servers(stdio_server())
    fake.add(tool_script("call_1", "local__slow", {"seconds": 120}), text_script(["It failed."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Wait long.")
    await eventually(lambda: mcp_log.calls("slow"), "the slow call to reach the server")
    [first_pid] = mcp_log.pids()
    os.kill(first_pid, signal.SIGKILL)
    end = await tab.until_event("turn_end", timeout=30)
    [result] = [i["event"] for i in tab.events() if i["event"]["type"] == "tool_result"]
    await tab.close()

    assert end["event"]["outcome"] == "complete"  # the turn went on to the model's answer
    assert result["success"] is False and result["result"]["error"].startswith('MCP server "local" ')
    # The worker starts a new child and lists again (backoff from 0.5 s).
    await eventually(lambda: len(mcp_log.pids()) == 2 and _health("local").state == "connected", "a reconnection")
    fake.add(tool_script("call_2", "local__add", {"a": 1, "b": 1}), text_script(["2."]))
    _, _, [again] = await _turn(user, "Add 1 and 1.")
    assert again["success"] is True and again["result"]["data"] == {"result": 2}
    assert _health("local").last_error  # why it dropped stays visible after the reconnection


async def test_a_loopback_http_server_is_reached_directly_whatever_the_proxy_variables_say(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog, http_server: HttpServer,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # the discard port: no proxy answers there
    monkeypatch.delenv("NO_PROXY", raising=False)
    await servers({"name": "remote", "transport": "streamable-http", "url": http_server.url, "timeout": 5})
    fake.add(tool_script("call_1", "remote__add", {"a": 1, "b": 2}), text_script(["3."]))
    _, _, [result] = await _turn(user, "Add.")
    assert result["success"] is True and result["result"]["data"] == {"result": 3}


async def test_a_server_that_is_down_fails_calls_at_once(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog, http_server: HttpServer
) -> None:
    await servers({"name": "remote", "transport": "streamable-http", "url": http_server.url, "timeout": 5})
    fake.add(tool_script("call_1", "remote__add", {"a": 1, "b": 2}), text_script(["3."]))
    _, _, [working] = await _turn(user, "Add.")
    assert working["success"] is True
    http_server.stop()
    fake.add(tool_script("call_2", "remote__add", {"a": 1, "b": 2}), text_script(["Down."]))
    _, end, [down] = await _turn(user, "Add again.")

    assert end["event"]["outcome"] == "complete"
    assert down["success"] is False and down["result"]["error"].startswith('MCP server "remote" ')
    assert "remote__add" in _offered(fake.requests[2].json)  # still offered: the last listing stands


# -- policies -----------------------------------------------------------------------------
async def test_tool_policies_caps_and_timeouts_apply_to_mcp_tools(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog
) -> None:
    await servers(stdio_server())
    auditors = await Group.objects.acreate(name="auditors")
    echo_policy = await ToolPolicy.objects.acreate(tool_name="local__echo")
    await echo_policy.allowed_groups.aadd(auditors)
    await ToolPolicy.objects.acreate(tool_name="local__add", max_calls_per_turn=1)
    await ToolPolicy.objects.acreate(tool_name="local__slow", timeout_seconds=0.5)
    fake.add(tool_script("call_1", "local__add", {"a": 1, "b": 2}), tool_script("call_2", "local__add", {"a": 3, "b": 4}),
             tool_script("call_3", "local__echo", {"text": "x"}), tool_script("call_4", "local__slow", {"seconds": 30}),
             text_script(["Done."]))
    _, _, results = await _turn(user, "Use them all.")

    offered = _offered(fake.requests[0].json)
    assert "local__echo" not in offered and "local__add" in offered
    first, second, echo, slow = results
    assert first["success"] is True
    assert second["success"] is False and "at most 1 time per turn" in second["result"]["error"]
    assert echo["result"]["error"] == 'Tool "local__echo" is not available in this conversation'
    assert slow["result"]["error"] == 'Tool "local__slow" timed out after 0.5 seconds'
    assert [c["a"] for c in mcp_log.calls("add")] == [1] and mcp_log.calls("echo") == []


# -- streamable HTTP ----------------------------------------------------------------------
async def test_an_http_server_gets_the_user_id_and_configured_headers_and_lists_again_on_change(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog, http_server: HttpServer,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JXAI_TEST_TEAM", "blue")
    await servers({"name": "remote", "transport": "streamable-http", "url": http_server.url, "timeout": 30,
             "headers": {"X-Team": "JXAI_TEST_TEAM"}, "pass_user_id": True})
    fake.add(tool_script("call_1", "remote__echo", {"text": "hi"}), tool_script("call_2", "remote__grow", {}),
             text_script(["Hi."]))
    _, _, [echo, grown] = await _turn(user, "Echo hi.")

    assert echo["success"] is True
    assert echo["result"]["data"] == {"text": "hi", "headers": {"x-jxai-user": str(user.pk), "x-team": "blue"}}
    assert grown["success"] is True
    await eventually(lambda: "remote__late" in get_tool_registry(), "remote__late after list_changed")


async def test_without_the_setting_an_internal_http_server_is_refused(
    user: Any, servers: Any, settings: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog, http_server: HttpServer
) -> None:
    settings.JXAI_MCP_ALLOW_INTERNAL = False
    await servers({"name": "remote", "transport": "streamable-http", "url": http_server.url, "timeout": 5})
    fake.add(text_script(["No tools."]))
    await _turn(user, "Hello.")

    assert not any(name.startswith("remote__") for name in _offered(fake.requests[0].json))
    health = _health("remote")
    assert health.state == "down" and "loopback" in health.last_error
    assert mcp_log.calls() == []


async def test_a_server_added_in_admin_reaches_the_next_turn_and_a_removed_one_leaves(
    user: Any, servers: Any, fake: FakeProvider, hub: Any, mcp_log: McpLog
) -> None:
    await servers()
    fake.add(text_script(["None yet."]))
    await _turn(user, "Hello.")
    config = stdio_server("admin-made")
    row = await McpServer.objects.acreate(name="admin-made", transport="stdio", command=config["command"],
                                          arguments=config["args"], env_names=config["env"])
    fake.add(tool_script("call_1", "admin-made__add", {"a": 2, "b": 2}), text_script(["4."]))
    _, _, [result] = await _turn(user, "Add.")
    assert "admin-made__add" in _offered(fake.requests[1].json) and result["success"] is True

    await row.adelete()
    fake.add(text_script(["Gone."]))
    await _turn(user, "Hello again.")
    assert not any(n.startswith("admin-made__") for n in _offered(fake.requests[3].json))
    assert "admin-made" not in mcp_tools.current().connections
