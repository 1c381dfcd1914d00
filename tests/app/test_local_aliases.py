"""The embedded model's two aliases as the page uses them (README "The embedded local model"),
through the real websocket consumer, turn runner, agent loop and registry that
``conf.model_registry_dict_from_env`` builds when no provider is configured, with a
FakeProvider on 127.0.0.1 (or a closed port) standing where llama.cpp's server would be:

* the calculator alias forces ``calculate`` only on a message with arithmetic in it; the
  calculator reads "12 times 7";
* an answer's leading whitespace (llama.cpp's model starts every answer with a space) is
  neither streamed nor saved;
* a model server that does not answer gives an error naming it and saying how to start it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jxai_app import conf
from jxai_app.models import Message
from tests.app.turns_support import (  # noqa: F401  (fixture)
    Tab, closed_port, hub, provider_registry, text_script, tool_script,
)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db(transaction=True)

FORCED = {"type": "function", "function": {"name": "calculate"}}


@pytest.fixture
def local(settings: Any) -> Iterator[FakeProvider]:
    """The no-provider registry, its local model server URL pointing at a FakeProvider."""
    with provider_registry(settings, lambda url: conf.model_registry_dict_from_env({"JXAI_LOCAL_MODEL_URL": url})) as fake:
        yield fake


async def ask(user: Any, text: str, model: str) -> Tab:
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text=text, model=model)
    await tab.until_event("turn_end", timeout=15)
    return tab


async def test_the_calculator_is_forced_on_arithmetic_only(user: Any, local: FakeProvider, hub: Any) -> None:
    local.add(tool_script("call_1", "calculate", {"expression": "12 times 7"}), text_script(["12 times 7 is 84."]),
              text_script(["The capital of Italy is Rome."]))
    tab = await ask(user, "What is 12 times 7?", conf.LOCAL_CALCULATOR_ALIAS)
    result = next(i["event"] for i in tab.events() if i["event"]["type"] == "tool_result")
    assert result["success"] is True, result
    assert result["result"]["data"] == {"expression": "12 * 7", "result": 84}  # the words were read
    assert result["result"]["summary"] == "12 * 7 = 84"
    await tab.close()

    tab = await ask(user, "What is the capital of Italy?", conf.LOCAL_CALCULATOR_ALIAS)
    assert not [i for i in tab.events() if i["event"]["type"].startswith("tool")]
    await tab.close()
    forced, after_result, plain = (r.json for r in local.requests)
    assert forced["tool_choice"] == FORCED
    assert after_result["tool_choice"] == "auto"  # the answer to the tool result is never forced
    assert plain["tool_choice"] == "auto" and plain["tools"]  # offered, not forced


async def test_an_answer_starts_without_the_models_leading_space(user: Any, local: FakeProvider, hub: Any) -> None:
    local.add(text_script([" ", "  Write", " a table", "\n\n|a|b|"]))
    tab = await ask(user, "Make me a table.", conf.LOCAL_MODEL_ALIAS)
    assert tab.text() == "Write a table\n\n|a|b|"
    cid = tab.frames[0]["conversation"]["id"]
    saved = [m async for m in Message.objects.filter(conversation_id=cid, role="assistant").values_list(
        "content", flat=True)]
    assert saved == ["Write a table\n\n|a|b|"]
    await tab.close()


async def test_a_local_model_server_that_does_not_answer_is_named_with_what_to_do(user: Any, settings: Any,
                                                                                  hub: Any) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    settings.JXAI_MODELS = conf.model_registry_dict_from_env({"JXAI_LOCAL_MODEL_URL": url})
    conf.reset_caches()
    try:
        tab = await Tab(user).open()
        await tab.send(type="send", conversationId=None, text="Hello?", model=conf.LOCAL_MODEL_ALIAS)
        error = (await tab.until_event("error", timeout=15))["event"]
        await tab.close()
    finally:
        conf.reset_caches()
    assert error["code"] == "network_error"
    assert error["message"] == (f"The local model server at {url} is not answering. Start it with make run "
                                "(or .venv/bin/python manage.py runlocalmodel), then send again.")
    assert error["problem"]["detail"] == error["message"]  # what the page shows
    assert error["problem"]["type"].endswith("/upstream-failure")
