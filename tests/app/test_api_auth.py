"""Who may call ``POST /ai/chat``: jxai API tokens (Bearer, X-Api-Key), sessions with CSRF,
and the ``create_api_token`` command (docs/api.md "Authentication")."""

from __future__ import annotations

import io
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.middleware.csrf import _get_new_csrf_string  # the secret Django itself puts in the cookie
from django.test import AsyncClient
from django.utils import timezone

from jxai_app.models import ApiToken
from tests.app.apisupport import bearer, fake, frames, post_chat, problem_of, read_all, token  # noqa: F401
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = {"messages": [{"role": "user", "content": "hi"}]}


def _answer(fake: FakeProvider, n: int = 1) -> None:
    for _ in range(n):
        fake.add(Script(writes=openai_text_stream(["ok"])))


async def _ok(response: Any) -> None:
    assert response.status_code == 200, response.content
    assert frames(await read_all(response)) == [{"type": "delta", "content": "ok"}, {"type": "done", "stopReason": "stop"}]


async def test_bearer_and_x_api_key_tokens_are_accepted_and_never_forwarded(fake: FakeProvider, token: str) -> None:
    _answer(fake, 3)
    await _ok(await post_chat(AsyncClient(), HELLO, bearer(token)))
    await _ok(await post_chat(AsyncClient(), HELLO, {"X-Api-Key": token}))
    await _ok(await post_chat(AsyncClient(), HELLO, {"Authorization": f"bearer   {token} "}))
    for sent in fake.requests:
        assert token not in sent.body.decode()
        assert all(token not in value for value in sent.headers.values())
        assert "x-api-key" not in sent.headers


async def test_x_api_key_wins_over_bearer(fake: FakeProvider, token: str) -> None:
    _answer(fake)
    await _ok(await post_chat(AsyncClient(), HELLO, {"X-Api-Key": token, "Authorization": "Bearer jxai_wrong"}))
    response = await post_chat(AsyncClient(), HELLO, {"X-Api-Key": "jxai_wrong", "Authorization": f"Bearer {token}"})
    assert response.status_code == 401


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer jxai_not-a-real-token"},
    {"X-Api-Key": "jxai_not-a-real-token"},
    {"X-Api-Key": ""},
    {"Authorization": "Bearer "},
    {"Authorization": "Basic YWxpY2U6YWxpY2UtcHctMTIz"},  # alice's password: not a token, no session
    {"X-Api-Key": "x" * 5000},
])
async def test_bad_credentials_are_401(fake: FakeProvider, token: str, headers: dict[str, str]) -> None:
    response = await post_chat(AsyncClient(), HELLO, headers)
    assert response.status_code == 401
    assert problem_of(response)["type"].endswith("/unauthorized")
    assert fake.requests == []


async def test_a_revoked_token_and_an_inactive_user_are_refused(fake: FakeProvider, token: str, user: Any) -> None:
    await ApiToken.objects.filter(user=user).aupdate(revoked_at=timezone.now())
    response = await post_chat(AsyncClient(), HELLO, bearer(token))
    assert response.status_code == 401
    assert "revoked" in problem_of(response)["detail"]
    _, fresh = await sync_to_async(ApiToken.issue)(user=user, name="second")
    user.is_active = False
    await user.asave()
    assert (await post_chat(AsyncClient(), HELLO, bearer(fresh))).status_code == 401
    assert fake.requests == []


async def test_a_bad_token_does_not_fall_back_to_the_session(fake: FakeProvider, user: Any) -> None:
    client = AsyncClient()
    await client.aforce_login(user)
    response = await post_chat(client, HELLO, {"X-Api-Key": "jxai_wrong"})
    assert response.status_code == 401


async def test_last_used_is_recorded_without_a_write_per_request(fake: FakeProvider, token: str) -> None:
    _answer(fake, 2)
    await _ok(await post_chat(AsyncClient(), HELLO, bearer(token)))
    first = (await ApiToken.objects.aget(name="tests")).last_used_at
    assert first is not None
    await _ok(await post_chat(AsyncClient(), HELLO, bearer(token)))
    assert (await ApiToken.objects.aget(name="tests")).last_used_at == first


async def test_a_session_needs_csrf_and_a_token_does_not(fake: FakeProvider, user: Any, token: str) -> None:
    _answer(fake, 2)
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(user)
    refused = await post_chat(client, HELLO)
    assert refused.status_code == 403
    doc = problem_of(refused)
    assert doc["type"].endswith("/forbidden") and doc["detail"].startswith("CSRF check failed: reload the page")
    secret = _get_new_csrf_string()
    client.cookies["csrftoken"] = secret
    await _ok(await post_chat(client, HELLO, {"X-CSRFToken": secret}))
    # A token-authenticated request from a client that enforces CSRF needs no CSRF token.
    await _ok(await post_chat(AsyncClient(enforce_csrf_checks=True), HELLO, bearer(token)))
    assert len(fake.requests) == 2


async def test_a_logged_out_session_is_401(fake: FakeProvider, user: Any) -> None:
    client = AsyncClient()
    await client.aforce_login(user)
    await client.alogout()
    assert (await post_chat(client, HELLO)).status_code == 401


# -- the management command -------------------------------------------------------------------
async def test_create_api_token_prints_a_working_token_once(fake: FakeProvider, user: Any) -> None:
    out, err = io.StringIO(), io.StringIO()
    await sync_to_async(call_command)("create_api_token", "alice", "--name", "laptop", stdout=out, stderr=err)
    plaintext = out.getvalue().strip()
    assert plaintext.startswith("jxai_") and "\n" not in plaintext
    stored = await ApiToken.objects.aget(name="laptop")
    assert stored.secret_hash == ApiToken.hash_secret(plaintext) and plaintext not in stored.secret_hash
    assert plaintext not in err.getvalue() and stored.prefix in err.getvalue()
    _answer(fake)
    await _ok(await post_chat(AsyncClient(), HELLO, bearer(plaintext)))


@pytest.mark.parametrize(("args", "message"), [
    (["nobody"], "No user named 'nobody'."),
    (["alice", "--name", ""], "--name must be 1 to 100 characters."),
])
def test_create_api_token_refuses_bad_input(user: Any, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("create_api_token", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert not ApiToken.objects.exists()
