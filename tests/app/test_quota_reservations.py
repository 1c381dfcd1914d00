"""The daily token quota holds against parallel sends and long turns
(docs/security.md "Quota reservations").

Real parts: the consumer through WebsocketCommunicator (many at once, ``asyncio.gather``),
the real database (PostgreSQL in the scale-out run), a FakeProvider on 127.0.0.1 whose
answers wait on a gate so the admitted turns run at the same time, and ``/ai/chat`` through
Django's real ASGI handler.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import date, datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group
from django.core.asgi import get_asgi_application
from django.db.models import Sum
from django.test import AsyncClient

from jxai_app.core.gateway import ChatRequest, prompt_estimate
from jxai_app.models import Conversation, GroupEntitlements, Message, TokenReservation, UsageLedger, UserLimits
from jxai_app.policy import ratelimit, reservations
from jxai_app.policy.budget import TurnBudget
from jxai_app.store import estimate_tokens, message_send
from jxai_app.turns.recovery import recover_turns
from tests.app.apisupport import fake as api_fake, token  # noqa: F401  (fixtures)
from tests.app.apisupport import bearer, frames, post_chat, read_all
from tests.app.turns_support import MODEL, Tab, fake, hub, provider_registry, text_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import (
    FakeProvider, Script, Write, anthropic_text_stream, json_response, openai_chunk, openai_text_stream,
    openai_tool_call_stream, responses_event,
)

pytestmark = pytest.mark.django_db(transaction=True)

NOON = datetime(2025, 3, 4, 12, 0, 0, tzinfo=timezone.utc).timestamp()
TODAY = date(2025, 3, 4)
RESERVE = 200
"""``JXAI_RESERVE_OUTPUT_TOKENS`` in these tests."""


@pytest.fixture(autouse=True)
def quota_setup(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Noon UTC, no system prompt (the estimates are the history's alone), a small answer allowance."""
    monkeypatch.setattr(ratelimit, "clock", lambda: NOON)
    settings.JXAI_SYSTEM_PROMPT = ""
    settings.JXAI_RESERVE_OUTPUT_TOKENS = RESERVE


def first_prompt(text: str) -> int:
    """The prompt estimate of a new conversation's first send of ``text`` (no system prompt)."""
    return estimate_tokens([{"role": "user", "content": text}])


async def ledger() -> SimpleNamespace | None:
    """Today's ledger summed over its rows (one per model: usage recorded without a model,
    as the tests seed it, has its own), ``None`` when there are none."""
    rows = UsageLedger.objects.filter(day=TODAY)
    if not await rows.aexists():
        return None
    fields = ("input_tokens", "output_tokens", "estimated_tokens", "requests")
    return SimpleNamespace(**await rows.aaggregate(**{name: Sum(name) for name in fields}))


async def held() -> int:
    return int((await TokenReservation.objects.aaggregate(total=Sum("tokens")))["total"] or 0)


async def _admitted_or_refused(tab: Tab) -> dict[str, Any]:
    return await tab.until(lambda f: f["type"] == "error" or f["type"] == "conversation")


async def quota_of_the_user(user: Any) -> None:
    """The 10,000 tokens a day come from the user's own ``UserLimits`` row."""
    await UserLimits.objects.acreate(user=user, tokens_per_day=10_000, turns_per_minute=0)


async def quota_of_a_group(user: Any) -> None:
    """The 10,000 tokens a day come from the most generous of the user's groups
    (docs/security.md "Group entitlements"); the user has no ``UserLimits`` row."""
    for name, tokens in (("interns", 10_000), ("visitors", 2_000)):
        group = await Group.objects.acreate(name=name)
        await GroupEntitlements.objects.acreate(group=group, tokens_per_day=tokens, turns_per_minute=0)
        await user.groups.aadd(group)


@pytest.mark.parametrize(("grant", "sends"), [(quota_of_the_user, 12), (quota_of_a_group, 30)],
                         ids=["user-limits", "group-entitlements"])
async def test_parallel_sends_with_little_quota_left_admit_only_what_fits(
    user: Any, fake: FakeProvider, hub: Any, grant: Any, sends: int
) -> None:
    await grant(user)
    assert (await sync_to_async(ratelimit.allowance_for)(user)).tokens_per_day == 10_000
    await sync_to_async(ratelimit.record_usage)(user, {"inputTokens": 9_000, "outputTokens": 0}, estimated=False)
    texts = [f"Question {n:02d}?" for n in range(sends)]
    need = reservations.size(first_prompt(texts[0]))
    fits = 1_000 // need
    assert 1 <= fits < len(texts)
    gate = threading.Event()

    def answer(_request: Any) -> Script:
        writes = openai_text_stream(["Answer."], usage={"prompt_tokens": 20, "completion_tokens": 5})
        return Script(writes=[Write(writes[0], gate=gate), *writes[1:]])

    fake.handler = answer
    tabs = [await Tab(user).open() for _ in texts]
    await asyncio.gather(*(tab.send(type="send", conversationId=None, text=text) for tab, text in zip(tabs, texts)))
    first = await asyncio.gather(*(_admitted_or_refused(tab) for tab in tabs))

    admitted = [tab for tab, frame in zip(tabs, first) if frame["type"] == "conversation"]
    refusals = [frame for frame in first if frame["type"] == "error"]
    assert len(admitted) == fits and len(refusals) == len(texts) - fits
    assert {r["code"] for r in refusals} == {"quota-exceeded"}
    assert refusals[0]["problem"]["retry_after"] == 12 * 3600
    assert f"may take {need} tokens" in refusals[0]["message"]
    assert await held() == fits * need
    assert await Conversation.objects.filter(owner=user).acount() == fits

    gate.set()
    for tab in admitted:
        assert (await tab.until_event("turn_end"))["event"]["outcome"] == "complete"
        await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    row = await ledger()
    assert row is not None and row.input_tokens == 9_000 + fits * 20 and row.output_tokens == fits * 5
    assert len(fake.requests) == fits
    assert not await TokenReservation.objects.aexists()  # every reservation settled and gone
    for tab in tabs:
        await tab.close()


async def test_stop_before_the_first_output_byte_counts_the_prompt_and_settles(
    user: Any, fake: FakeProvider, hub: Any
) -> None:
    await UserLimits.objects.acreate(user=user, tokens_per_day=100_000)
    text = "p" * 31_000  # a 31k-character turn
    fake.add(Script(writes=[], hold=True))  # headers, then nothing until the client goes away
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text=text)
    await tab.until(lambda f: f["type"] == "conversation")
    while not fake.requests:  # the prompt reached the provider
        await asyncio.sleep(0.01)
    reservation = await TokenReservation.objects.aget()
    assert reservation.tokens == reservations.size(first_prompt(text)) and reservation.prompt_tokens == first_prompt(text)

    cid = tab.frames[0]["conversation"]["id"]
    await tab.send(type="cancel", conversationId=cid)
    assert (await tab.until_event("turn_end"))["event"]["outcome"] == "cancelled"
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")

    row = await ledger()
    assert row is not None
    assert (row.input_tokens, row.output_tokens, row.estimated_tokens) == (first_prompt(text), 0, first_prompt(text))
    assert not await TokenReservation.objects.aexists()
    await tab.close()


async def test_a_provider_error_after_the_prompt_was_sent_counts_the_prompt(
    user: Any, fake: FakeProvider, hub: Any
) -> None:
    await UserLimits.objects.acreate(user=user, tokens_per_day=100_000)
    text = "Tell me a long story. " * 100
    fake.add(Script(writes=[openai_chunk({"role": "assistant", "content": ""})], close_abruptly=True))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text=text)
    end = await tab.until_event("turn_end")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "error")

    assert end["event"]["outcome"] == "error" and len(fake.requests) == 1
    row = await ledger()
    assert row is not None and row.input_tokens == first_prompt(text) and row.estimated_tokens == first_prompt(text)
    assert row.requests == 1
    assert not await TokenReservation.objects.aexists()
    await tab.close()


async def test_an_http_refusal_by_the_provider_counts_nothing(user: Any, fake: FakeProvider, hub: Any) -> None:
    await UserLimits.objects.acreate(user=user, tokens_per_day=100_000)
    fake.add(json_response(400, {"error": {"message": "bad request"}}))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Hello there.")
    assert (await tab.until_event("turn_end"))["event"]["outcome"] == "error"
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "error")
    row = await ledger()
    assert row is None or row.input_tokens + row.output_tokens == 0
    assert not await TokenReservation.objects.aexists()
    await tab.close()


async def test_a_turn_that_crosses_the_quota_between_rounds_is_stopped(
    user: Any, fake: FakeProvider, hub: Any
) -> None:
    await UserLimits.objects.acreate(user=user, tokens_per_day=1_000)
    round_one = openai_tool_call_stream("call_1", "calculate", ['{"expression": "6 * 7"}'],
                                        usage={"prompt_tokens": 800, "completion_tokens": 10})
    fake.add(Script(writes=round_one), text_script(["Never asked."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="What is 6 * 7?")
    end = await tab.until_event("turn_end")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "error")

    assert end["event"]["outcome"] == "error"
    assert len(fake.requests) == 1  # the second round never went out
    errors = [i["event"] for i in tab.events() if i["event"]["type"] == "error"]
    assert errors[-1]["code"] == "quota-exceeded" and errors[-1]["problem"]["status"] == 429
    conversation = await Conversation.objects.aget()
    assert conversation.last_problem["type"].endswith("/quota-exceeded")
    # The completed round and its tool result stay; only what the quota stopped is gone.
    roles = [m.role async for m in Message.objects.filter(conversation=conversation).order_by("position")]
    assert roles == ["user", "assistant", "tool"]
    row = await ledger()
    assert row is not None and (row.input_tokens, row.output_tokens) == (800, 10)
    assert not await TokenReservation.objects.aexists()
    await tab.close()


async def test_a_retry_hands_its_reservation_to_the_new_turn(user: Any, fake: FakeProvider, hub: Any) -> None:
    await UserLimits.objects.acreate(user=user, tokens_per_day=100_000)
    fake.add(json_response(400, {"error": {"message": "bad request"}}))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="First try.")
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "error")
    cid = tab.frames[0]["conversation"]["id"]
    gate = threading.Event()
    writes = openai_text_stream(["Second try worked."], usage={"prompt_tokens": 9, "completion_tokens": 4})
    fake.add(Script(writes=[Write(writes[0], gate=gate), *writes[1:]]))
    await tab.send(type="retry", conversationId=cid)
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "streaming")
    reservation = await TokenReservation.objects.aget()
    conversation = await Conversation.objects.aget()
    assert reservation.turn_id == conversation.turn_id
    assert reservation.tokens == reservations.size(first_prompt("First try."))
    gate.set()
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
    assert not await TokenReservation.objects.aexists()
    row = await ledger()
    assert row is not None and (row.input_tokens, row.output_tokens) == (9, 4)
    await tab.close()


def test_recovering_a_dead_turn_counts_its_prompt_in_flight(user: Any) -> None:
    UserLimits.objects.create(user=user, tokens_per_day=100_000)
    turn = message_send(user=user, conversation_id=None, text="x" * 4_000, model="m")
    TurnBudget.admit(user, prompt_tokens=turn.prompt_tokens, turn_id=turn.turn_id, model=turn.model)
    assert TokenReservation.objects.get().turn_id == turn.turn_id
    assert [r.turn_id for r in recover_turns(lease=0, everything=True)] == [turn.turn_id]
    row = UsageLedger.objects.get(day=TODAY)
    assert row.input_tokens == row.estimated_tokens == first_prompt("x" * 4_000)
    assert not TokenReservation.objects.exists()


async def test_ai_chat_reserves_and_a_disconnect_before_the_first_byte_counts_the_prompt(
    api_fake: FakeProvider, token: str, user: Any
) -> None:
    """A long prompt (931 KB, sized down): the caller goes away while the provider has
    not answered yet; the prompt still counts, and the reservation is gone."""
    await UserLimits.objects.acreate(user=user, tokens_per_day=1_000_000)
    api_fake.add(Script(writes=[], hold=True))
    content = "q" * 30_000  # within JXAI_MAX_MESSAGE_CHARS
    body = json.dumps({"messages": [{"role": "user", "content": content}]}).encode()
    expected = prompt_estimate(ChatRequest(messages=[{"role": "user", "content": content}], tools=[],
                                           system_prompt="", model=None, bytes=len(body)))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/ai/chat", "raw_path": b"/ai/chat", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()), (b"authorization", f"Bearer {token}".encode())],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
    }
    calls = 0
    seen_reservation: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": body, "more_body": False}
        while not api_fake.requests:  # the prompt reached the provider
            await asyncio.sleep(0.01)
        seen_reservation.append(await held())
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        pass

    await asyncio.wait_for(get_asgi_application()(scope, receive, send), timeout=20)
    assert seen_reservation == [reservations.size(expected)]
    assert await asyncio.to_thread(api_fake.wait_closed, 5.0)
    row = await ledger()
    assert row is not None and (row.input_tokens, row.output_tokens) == (expected, 0)
    assert not await TokenReservation.objects.aexists()


_CUT_AT_THE_LIMIT = {
    "openai": ("max_tokens", openai_text_stream(["Cut here"], finish="length")),
    "anthropic": ("max_tokens", anthropic_text_stream(["Cut here"], stop_reason="max_tokens")),
    "openai-responses": ("max_output_tokens", [
        responses_event("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="Cut here"),
        responses_event("response.incomplete", response={"status": "incomplete",
                                                         "incomplete_details": {"reason": "max_output_tokens"}}),
    ]),
}
"""Per provider kind: the request member carrying the output limit, and an answer the
provider cut at that limit."""


@pytest.mark.parametrize("kind", sorted(_CUT_AT_THE_LIMIT))
async def test_each_request_is_sent_its_reserved_answer_as_the_output_limit_and_ends_length_there(
    kind: str, user: Any, settings: Any, hub: Any
) -> None:
    member, cut = _CUT_AT_THE_LIMIT[kind]
    registry = lambda url: {  # noqa: E731
        "providers": {"p": {"kind": kind, "base_url": url, "api_key_env": None}},
        "models": {MODEL: {"provider": "p", "model_id": "m", "context_window": 100000, "max_tokens": 64000}},
        "roles": {"default": MODEL}}
    with provider_registry(settings, registry) as provider:
        provider.add(Script(writes=cut))
        await UserLimits.objects.acreate(user=user, tokens_per_day=1_000)
        tab = await Tab(user).open()
        await tab.send(type="send", conversationId=None, text="Write at length.")
        await tab.until_event("turn_end")
        await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle")
        await tab.close()
    assert provider.requests[0].json[member] == RESERVE  # the reservation's answer, not the model's 64,000
    answer = await Message.objects.aget(role="assistant")
    assert (answer.content, answer.stop_reason) == ("Cut here", "length")


async def test_ai_chat_sends_the_reserved_answer_as_the_output_limit(api_fake: FakeProvider, token: str) -> None:
    api_fake.add(Script(writes=openai_text_stream(["Cut"], finish="length")))
    response = await post_chat(AsyncClient(), {"messages": [{"role": "user", "content": "Long?"}]}, bearer(token))
    assert frames(await read_all(response))[-1] == {"type": "done", "stopReason": "length"}
    assert api_fake.requests[0].json["max_tokens"] == RESERVE
