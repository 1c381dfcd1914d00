"""Group entitlements: the effective-limit rule, model access on every way a model request
starts, admin's group inline and user page, and ``manage.py group_entitlements``
(docs/security.md "Group entitlements").

Real parts: the real database, a FakeProvider on 127.0.0.1 serving both configured aliases,
the consumer through WebsocketCommunicator, ``/ai/chat`` and ``/ai/models`` through Django's
test client (session and API token), admin through the test client.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import AsyncClient, Client

from jxai_app.models import ApiToken, Conversation, GroupEntitlements, Message, UserLimits
from jxai_app.policy import ratelimit
from jxai_app.policy.entitlements import entitlements_for, most_generous
from jxai_app.store.shares import share_create
from tests.app.turns_support import Tab, hub, provider_registry, text_script  # noqa: F401  (fixtures)
from tests.support.fake_provider import FakeProvider

BIG, SMALL = "big", "small"


def two_models(url: str) -> dict[str, Any]:
    """``big`` (the default) and ``small``, both answered by the fake provider at ``url``."""
    return {"providers": {"fake": {"kind": "openai", "base_url": url, "api_key_env": None}},
            "models": {BIG: {"provider": "fake", "model_id": "m-big", "context_window": 1000},
                       SMALL: {"provider": "fake", "model_id": "m-small", "context_window": 1000, "label": "Small"}},
            "roles": {"default": BIG}}


@pytest.fixture
def fake(settings: Any) -> Iterator[FakeProvider]:
    with provider_registry(settings, two_models) as provider:
        yield provider


def entitle(name: str, **fields: Any) -> Group:
    group = Group.objects.create(name=name)
    GroupEntitlements.objects.create(group=group, **fields)
    return group


@pytest.fixture
def intern(user: Any) -> Any:
    """alice in "interns", who may use ``small`` only."""
    user.groups.add(entitle("interns", model_aliases=[SMALL]))
    return user


# -- the rule ------------------------------------------------------------------------------
def test_most_generous_prefers_unlimited_then_the_largest_and_skips_unset() -> None:
    assert most_generous([5, None, 9]) == 9
    assert most_generous([5, 0, 9]) == 0
    assert most_generous([None, None]) is None
    assert most_generous([Decimal("1.5"), Decimal("0.2")]) == Decimal("1.5")


@pytest.mark.django_db
def test_the_effective_limits_are_the_users_row_then_the_most_generous_group_then_the_settings(
        user: Any, settings: Any) -> None:
    settings.JXAI_TURNS_PER_MINUTE, settings.JXAI_TOKENS_PER_DAY, settings.JXAI_COST_PER_DAY = 20, 2_000_000, "3"
    settings.JXAI_STORAGE_PER_USER_BYTES = 1_000_000
    assert ratelimit.allowance_for(user) == ratelimit.Allowance(20, 2_000_000, Decimal(3))  # no group, no row

    user.groups.add(entitle("interns", turns_per_minute=5, tokens_per_day=10_000, storage_bytes_per_user=10),
                    entitle("analysts", turns_per_minute=8, tokens_per_day=0, cost_per_day=Decimal("1.5")),
                    Group.objects.create(name="plain"))  # a group without a row has no say
    granted = entitlements_for(user)
    assert (granted.turns_per_minute, granted.tokens_per_day, granted.cost_per_day,
            granted.storage_bytes_per_user) == (8, 0, Decimal("1.5"), 10)
    assert granted.sources == {"turns_per_minute": "group analysts", "tokens_per_day": "group analysts",
                               "cost_per_day": "group analysts", "storage_bytes_per_user": "group interns",
                               "models": "group analysts"}
    assert granted.models is None  # analysts list no alias: every model

    UserLimits.objects.create(user=user, turns_per_minute=2, tokens_per_day=None, cost_per_day=Decimal(0))
    granted = entitlements_for(user)
    assert (granted.turns_per_minute, granted.tokens_per_day, granted.cost_per_day) == (2, 0, Decimal(0))
    assert ratelimit.allowance_for(user) == ratelimit.Allowance(2, 0, Decimal(0))  # the rate limit reads the same
    assert granted.sources["turns_per_minute"] == "user limits"
    assert granted.sources["tokens_per_day"] == "group analysts"


@pytest.mark.django_db
def test_models_are_the_union_of_the_groups_lists_and_a_superuser_has_every_one(
        user: Any, django_user_model: Any, fake: FakeProvider) -> None:
    user.groups.add(entitle("interns", model_aliases=[SMALL]), entitle("testers", model_aliases=["gone"]))
    granted = entitlements_for(user)
    assert granted.models == {SMALL, "gone"} and granted.may_use(SMALL) and not granted.may_use(BIG)
    root = django_user_model.objects.create_superuser("root")
    root.groups.add(Group.objects.get(name="interns"))
    assert entitlements_for(root).models is None


# -- model access --------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)  # /ai/models reads in a database thread of its own
def test_an_intern_sees_only_the_interns_models_on_the_page_and_in_ai_models(
        intern: Any, fake: FakeProvider) -> None:
    client = Client()
    assert [m["alias"] for m in client.get("/ai/models").json()["models"]] == [BIG, SMALL]  # anonymous probe
    client.force_login(intern)
    listing = client.get("/ai/models").json()
    assert listing["default"] == SMALL
    assert listing["models"] == [{"alias": SMALL, "label": "Small", "context_window": 1000, "supports_tools": True,
                                  "input": ["text", "image"],
                                  "default": True}]
    token = ApiToken.issue(user=intern, name="t")[1]
    assert Client().get("/ai/models", headers={"Authorization": f"Bearer {token}"}).json() == listing
    page = client.get("/").context["initial"]  # what json_script hands chat.js
    assert page["models"] == listing["models"] and page["defaultModel"] == SMALL


@pytest.mark.django_db(transaction=True)
async def test_another_model_is_refused_on_every_way_in_before_the_provider(
        user: Any, fake: FakeProvider, hub: Any) -> None:
    # Before alice joins "interns": a conversation on big, question and answer saved.
    fake.add(text_script(["Hello."]))
    tab = await Tab(user).open()
    await tab.send(type="send", conversationId=None, text="Hi", model=BIG)
    await tab.until(lambda f: f["type"] == "conversation" and f["conversation"]["status"] == "idle", timeout=15)
    cid = tab.frames[0]["conversation"]["id"]
    question, answer = [m.pk async for m in Message.objects.filter(conversation_id=cid).order_by("position")]
    assert len(fake.requests) == 1

    await sync_to_async(lambda: user.groups.add(entitle("interns", model_aliases=[SMALL])))()
    saved = await Message.objects.filter(conversation_id=cid).acount()
    frames = [
        {"type": "send", "conversationId": None, "text": "New chat on big", "model": BIG},
        {"type": "send", "conversationId": cid, "text": "Keep the conversation's big"},
        {"type": "edit", "conversationId": cid, "messageId": question, "text": "Hi again", "model": BIG},
        {"type": "regenerate", "conversationId": cid, "messageId": answer},
        {"type": "regenerate", "conversationId": cid, "messageId": answer, "model": BIG},
    ]
    for frame in frames:
        await tab.send(**frame)
        refusal = await tab.until(lambda f: f["type"] == "error")
        assert refusal["code"] == "forbidden" and refusal["problem"]["status"] == 403, (frame, refusal)
        assert "may not use the model 'big'" in refusal["message"] and SMALL in refusal["message"]
    assert await Conversation.objects.filter(owner=user).acount() == 1  # nothing saved
    assert await Message.objects.filter(conversation_id=cid).acount() == saved

    token = await sync_to_async(lambda: ApiToken.issue(user=user, name="t")[1])()
    session = AsyncClient()
    await session.aforce_login(user)
    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "model": BIG})
    for client, headers in ((session, {}), (AsyncClient(), {"Authorization": f"Bearer {token}"})):
        for url in ("/ai/chat", "/ai/chat?conversation=new"):
            response = await client.post(url, data=body, content_type="application/json", headers=headers)
            assert response.status_code == 403 and response["Content-Type"] == "application/problem+json", url
            assert "may not use the model 'big'" in json.loads(response.content)["detail"]
    assert len(fake.requests) == 1  # none of them reached the provider

    # The allowed model works, on the socket and over HTTP with no model named (the intern's default).
    fake.add(text_script(["Small answer."]), text_script(["Over HTTP."]))
    await tab.send(type="send", conversationId=cid, text="On small, then", model=SMALL)
    assert (await tab.until_event("turn_end"))["event"]["outcome"] == "complete"
    response = await session.post("/ai/chat", data=json.dumps({"messages": [{"role": "user", "content": "Hi"}]}),
                                  content_type="application/json")
    assert response.status_code == 200
    assert b"Over HTTP." in b"".join([chunk async for chunk in response.streaming_content])
    assert [r.json["model"] for r in fake.requests] == ["m-big", "m-small", "m-small"]
    await tab.close()


@pytest.mark.django_db
def test_continue_in_my_chat_takes_the_viewers_default_when_their_groups_may_not_use_the_shared_model(
        intern: Any, other_user: Any, django_user_model: Any, fake: FakeProvider) -> None:
    """A conversation on ``big`` is shared; the intern alice (only ``small``) gets ``small``,
    bob, without a group list, keeps ``big`` (docs/data.md "Share links")."""
    owner = django_user_model.objects.create_user("owner")
    conversation = Conversation.objects.create(owner=owner, model=BIG, title="on big")
    Message.objects.create(conversation=conversation, position=0, role="user", content="Hi")
    _, token = share_create(user=owner, conversation_id=conversation.pk)
    for viewer, expected in ((intern, SMALL), (other_user, BIG)):
        client = Client()
        client.force_login(viewer)
        answer = client.post(f"/s/{token}/continue")
        assert answer.status_code == 302, answer.content
        copy = Conversation.objects.get(owner=viewer)
        assert answer["Location"] == f"/c/{copy.pk}" and copy.model == expected, viewer


@pytest.mark.django_db(transaction=True)
async def test_an_unknown_model_refusal_names_only_the_models_the_caller_may_use(
        intern: Any, fake: FakeProvider, hub: Any) -> None:
    tab = await Tab(intern).open()
    await tab.send(type="send", conversationId=None, text="Hi", model="nope")
    refusal = await tab.until(lambda f: f["type"] == "error")
    assert refusal["code"] == "invalid-request" and refusal["message"] == "Unknown model 'nope'; models you may use: small."
    await tab.close()
    session = AsyncClient()
    await session.aforce_login(intern)
    response = await session.post("/ai/chat", data=json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                                                                "model": "nope"}), content_type="application/json")
    assert response.status_code == 400
    assert json.loads(response.content)["detail"] == "Unknown model 'nope'; models you may use: small."
    assert fake.requests == []


# -- admin and the command -----------------------------------------------------------------
@pytest.mark.django_db
def test_admin_edits_a_groups_entitlements_inline_and_shows_a_users_effective_ones(
        admin_client: Client, user: Any, django_user_model: Any, fake: FakeProvider) -> None:
    group = Group.objects.create(name="interns")
    user.groups.add(group)
    page = admin_client.get(f"/admin/auth/group/{group.pk}/change/")
    assert page.status_code == 200 and b'name="jxai_entitlements-0-model_aliases"' in page.content
    response = admin_client.post(f"/admin/auth/group/{group.pk}/change/", {
        "name": "interns", "permissions": [],
        "jxai_entitlements-TOTAL_FORMS": "1", "jxai_entitlements-INITIAL_FORMS": "0",
        "jxai_entitlements-MIN_NUM_FORMS": "0", "jxai_entitlements-MAX_NUM_FORMS": "1",
        "jxai_entitlements-0-model_aliases": [SMALL], "jxai_entitlements-0-turns_per_minute": "5",
        "jxai_entitlements-0-tokens_per_day": "0", "jxai_entitlements-0-cost_per_day": "",
        "jxai_entitlements-0-storage_bytes_per_user": "",
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    row = GroupEntitlements.objects.get(group=group)
    assert (row.model_aliases, row.turns_per_minute, row.tokens_per_day, row.cost_per_day) == ([SMALL], 5, 0, None)

    page = admin_client.get(f"/admin/auth/user/{user.pk}/entitlements/")
    html = page.content.decode()
    assert f'data-alias="{SMALL}"' in html and f'data-alias="{BIG}"' not in html
    assert [m["alias"] for m in page.context["models"]] == [SMALL]
    limits = {row["name"]: (row["value"], row["source"]) for row in page.context["limits"]}
    assert limits["turns_per_minute"] == ("5", "group interns")
    assert limits["tokens_per_day"] == ("unlimited", "group interns")
    assert limits["cost_per_day"][1] == "setting JXAI_COST_PER_DAY"
    assert '<tr data-limit="tokens_per_day"><td>Tokens per day (UTC)</td><td>unlimited</td><td>group interns</td>' in html
    assert page.context["tools"] and 'data-tool="' in html  # the built-in tools, by the tool policies
    user_page = admin_client.get(f"/admin/auth/user/{user.pk}/change/").content.decode()
    assert f"/admin/auth/user/{user.pk}/entitlements/" in user_page

    staff = Client()
    staff.force_login(django_user_model.objects.create_user("bob", is_staff=True))  # no permission on users
    assert staff.get(f"/admin/auth/user/{user.pk}/entitlements/").status_code == 403
    assert staff.get("/admin/auth/user/999999/entitlements/").status_code == 403  # the same for a missing one
    assert admin_client.get("/admin/auth/user/999999/entitlements/").status_code == 404


@pytest.mark.django_db
def test_the_command_sets_a_groups_entitlements_and_prints_them(fake: FakeProvider, settings: Any) -> None:
    settings.JXAI_TOKENS_PER_DAY = 2_000_000
    out = io.StringIO()
    call_command("group_entitlements", "interns", "--models", f"{SMALL}, {SMALL}", "--turns-per-minute", "5",
                 "--cost-per-day", "1.25", stdout=out)
    assert out.getvalue().splitlines() == [
        "group interns", f"models: {SMALL}", "Turns per minute: 5 (group interns)",
        "Tokens per day (UTC): 2,000,000 (setting JXAI_TOKENS_PER_DAY)", "Cost per day (USD, UTC): $1.2500 (group interns)",
        "Stored files (bytes): 524,288,000 (setting JXAI_STORAGE_PER_USER_BYTES)"]
    out = io.StringIO()
    call_command("group_entitlements", "interns", "--models", "", "--turns-per-minute", "", stdout=out)
    assert out.getvalue().splitlines()[1:3] == ["models: every configured model",
                                                "Turns per minute: 20 (setting JXAI_TURNS_PER_MINUTE)"]
    row = GroupEntitlements.objects.get(group__name="interns")
    assert (row.model_aliases, row.turns_per_minute, row.cost_per_day) == ([], None, Decimal("1.25"))
    with pytest.raises(CommandError, match="Unknown model alias"):
        call_command("group_entitlements", "interns", "--models", "huge")
    with pytest.raises(CommandError, match="whole number"):
        call_command("group_entitlements", "interns", "--tokens-per-day", "-3")
    with pytest.raises(CommandError, match="No group named"):
        call_command("group_entitlements", "nobody")
