"""Sign-in through a real OpenID Connect provider on 127.0.0.1 (tests/support/oidc_provider.py),
driven through the real redirect flow with Django's test client: what a first and a later
sign-in do to the account and its groups, every refusal's page, the password form switched
off, RP-initiated logout, and the audit rows (docs/sso.md)."""

from __future__ import annotations

import socket
import time
import urllib.parse
from collections.abc import Iterator
from io import StringIO
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client

from jxai_app.models import SignInEvent, SsoIdentity
from jxai_app.web.login import still_signed_in
from tests.support.oidc_provider import CLIENT_ID, CLIENT_SECRET, OidcProvider

pytestmark = pytest.mark.django_db
CALLBACK = "http://testserver/accounts/oidc/callback/"


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with OidcProvider() as running:
        running.redirect_uris.add(CALLBACK)
        yield running


@pytest.fixture
def idp(provider: OidcProvider, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[OidcProvider]:
    """SSO on against the provider, groups starting with ``jxai-`` synced, ``example.org`` allowed."""
    settings.JXAI_OIDC_ISSUER = provider.issuer
    settings.JXAI_OIDC_CLIENT_ID = CLIENT_ID
    settings.JXAI_OIDC_NAME = "Example SSO"
    settings.JXAI_OIDC_GROUP_PREFIX = "jxai-"
    settings.JXAI_OIDC_ALLOWED_DOMAINS = ["example.org"]
    monkeypatch.setenv("JXAI_OIDC_CLIENT_SECRET", CLIENT_SECRET)
    provider.users.clear()
    provider.id_token_overrides.clear()
    yield provider
    provider.id_token_overrides.clear()


def to_provider(client: Client) -> dict[str, str]:
    """Start a sign-in at jxai; the authorization request's parameters it redirects to."""
    response = client.get("/accounts/oidc/login/")
    assert response.status_code == 302, response.content
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(response["Location"]).query))


def at_provider(provider: OidcProvider, params: dict[str, str], username: str) -> str:
    """Open the provider's sign-in form and submit it; the callback URL (path and query) it
    sends the browser back to."""
    assert httpx.get(f"{provider.issuer}/authorize", params=params).status_code == 200
    answer = httpx.post(f"{provider.issuer}/authorize", data={**params, "username": username})
    assert answer.status_code == 302, answer.text
    back = urllib.parse.urlsplit(answer.headers["location"])
    return f"{back.path}?{back.query}"


def sign_in(client: Client, provider: OidcProvider, username: str) -> Any:
    return client.get(at_provider(provider, to_provider(client), username))


def test_sign_ins_create_link_and_sync_groups(idp: OidcProvider, client: Client) -> None:
    idp.add_user("carol", email="carol@example.org", groups=["jxai-interns", "jxai-research", "payroll"])
    answer = sign_in(client, idp, "carol")
    assert answer.status_code == 302 and answer["Location"] == "/"
    request = idp.authorize_requests[-1]
    assert request["code_challenge_method"] == "S256" and request["nonce"] and request["state"]
    carol = User.objects.get(username="carol")
    assert not carol.has_usable_password() and not carol.is_staff and not carol.is_superuser
    assert sorted(carol.groups.values_list("name", flat=True)) == ["jxai-interns", "jxai-research"]
    assert SsoIdentity.objects.get(user=carol).issuer == idp.issuer
    assert client.get("/").status_code == 200  # signed in
    local = Group.objects.create(name="local-reviewers")
    carol.groups.add(local)

    idp.users["carol"]["groups"] = ["jxai-interns"]
    client.logout()
    assert sign_in(client, idp, "carol").status_code == 302
    assert sorted(carol.groups.values_list("name", flat=True)) == ["jxai-interns", "local-reviewers"]
    events = list(SignInEvent.objects.filter(user=carol).order_by("id").values_list("kind", "detail", "ip_address"))
    assert events == [
        ("sso-sign-in", "account created", "127.0.0.1"),
        ("groups-changed", "added: jxai-interns, jxai-research; removed: -", "127.0.0.1"),
        ("sso-sign-in", "", "127.0.0.1"),
        ("groups-changed", "added: -; removed: jxai-research", "127.0.0.1"),
    ]


def test_an_unlinked_local_account_is_not_taken_over_until_linked(idp: OidcProvider, client: Client) -> None:
    local = User.objects.create_user("Dave", password="local-pass-1234")
    claims = idp.add_user("dave", email="dave@example.org", groups=[])
    refused = sign_in(client, idp, "dave")
    assert refused.status_code == 403
    assert "An account named &#x27;dave&#x27; already exists here and is not linked" in refused.content.decode()
    assert client.get("/").status_code == 302  # not signed in
    SsoIdentity.objects.create(user=local, issuer=idp.issuer, subject=claims["sub"])
    assert sign_in(client, idp, "dave")["Location"] == "/"
    assert client.get("/").context["user"] == local
    assert SignInEvent.objects.filter(kind="sso-failure", actor="dave").count() == 1


def _tamper_state(client: Client, provider: OidcProvider) -> Any:
    back = at_provider(provider, to_provider(client), "erin")
    return client.get(back.replace("state=", "state=x"))


def _sign_in_erin(client: Client, provider: OidcProvider) -> Any:
    return sign_in(client, provider, "erin")


REFUSALS = {
    "tampered state": ({}, "erin@example.org", _tamper_state,
                       "could not be matched to one started in this browser", "state mismatch"),
    "tampered nonce": ({"nonce": "not-the-clients"}, "erin@example.org", _sign_in_erin,
                       "failed verification", "nonce"),
    "wrong issuer": ({"iss": "http://127.0.0.1:9/other"}, "erin@example.org", _sign_in_erin,
                     "failed verification", "iss"),
    "expired ID token": ({"iat": int(time.time()) - 7200, "exp": int(time.time()) - 3600}, "erin@example.org",
                         _sign_in_erin, "had expired", "expired ID token"),
    "email outside the allowed domains": ({}, "erin@elsewhere.net", _sign_in_erin,
                                          "not in an email domain allowed to sign in here", "email domain"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_have_a_clear_page_and_an_audit_row(case: str, idp: OidcProvider, client: Client) -> None:
    overrides, email, flow, sentence, logged = REFUSALS[case]
    idp.add_user("erin", email=email, groups=["jxai-interns"])
    idp.id_token_overrides.update(overrides)
    answer = flow(client, idp)
    assert answer.status_code == 403
    page = answer.content.decode()
    assert 'data-testid="sso-error"' in page and sentence in page, page
    assert not User.objects.filter(username="erin").exists()
    assert client.get("/").status_code == 302
    failure = SignInEvent.objects.get(kind="sso-failure")
    assert logged in failure.detail and failure.ip_address == "127.0.0.1"


def test_login_page_button_password_switch_and_rp_logout(idp: OidcProvider, client: Client, settings: Any) -> None:
    User.objects.create_user("frank", password="frank-pass-1234")
    page = client.get("/accounts/login/").content.decode()
    assert 'data-testid="sso-login"' in page and "Sign in with Example SSO" in page
    assert 'data-testid="login-password"' in page

    settings.JXAI_PASSWORD_LOGIN = False
    page = client.get("/accounts/login/").content.decode()
    assert 'data-testid="sso-login"' in page and 'data-testid="login-password"' not in page
    refused = client.post("/accounts/login/", {"username": "frank", "password": "frank-pass-1234"})
    assert refused.status_code == 403 and "Password sign-in is switched off" in refused.content.decode()
    assert client.get("/").status_code == 302

    idp.add_user("gina", email="gina@example.org", groups=[])
    sign_in(client, idp, "gina")
    gina, session_key = User.objects.get(username="gina"), client.session.session_key
    assert still_signed_in(gina.pk, session_key)  # what an open websocket re-checks
    out = client.post("/accounts/logout/")
    assert not still_signed_in(gina.pk, session_key)
    assert out.status_code == 302 and out["Location"].startswith(f"{idp.issuer}/logout?")
    logout = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(out["Location"]).query))
    assert logout["post_logout_redirect_uri"] == "http://testserver/accounts/login/" and logout["id_token_hint"]
    assert client.get("/").status_code == 302  # the jxai session is gone


def test_an_unreachable_provider_is_a_clear_page(idp: OidcProvider, client: Client, settings: Any) -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.JXAI_OIDC_ISSUER = f"http://127.0.0.1:{port}"
    answer = client.get("/accounts/oidc/login/")
    assert answer.status_code == 403 and "Example SSO could not be reached" in answer.content.decode()
    assert SignInEvent.objects.get().kind == "sso-failure"


def test_without_an_issuer_nothing_changes(client: Client) -> None:
    page = client.get("/accounts/login/").content.decode()
    assert 'data-testid="sso-login"' not in page and 'data-testid="login-password"' in page
    assert client.get("/accounts/oidc/login/").status_code == 404
    out = StringIO()
    call_command("check", stdout=out, stderr=out)
    assert "no issues" in out.getvalue() and "jxai.I101" not in out.getvalue()


def test_check_prints_the_redirect_uri(idp: OidcProvider, settings: Any) -> None:
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.org"]
    out = StringIO()
    call_command("check", stdout=out, stderr=out)
    assert "https://chat.example.org/accounts/oidc/callback/" in out.getvalue()


def test_password_sign_ins_and_token_issue_are_audited(client: Client, settings: Any) -> None:
    settings.JXAI_LOGIN_FAILURE_LIMIT = 0
    hal = User.objects.create_user("hal", password="hal-pass-1234")
    client.post("/accounts/login/", {"username": "hal", "password": "wrong"})
    client.post("/accounts/login/", {"username": "hal", "password": "hal-pass-1234"})
    call_command("create_api_token", "hal", "--name", "laptop", stdout=StringIO(), stderr=StringIO())
    rows = list(SignInEvent.objects.order_by("id").values_list("kind", "actor", "user", "ip_address"))
    assert rows == [("password-failure", "hal", None, "127.0.0.1"), ("password-sign-in", "hal", hal.pk, "127.0.0.1"),
                    ("token-issued", "manage.py create_api_token", hal.pk, None)]

    User.objects.create_superuser("root", password="root-pass-1234")
    admin = Client()
    admin.post("/admin/login/?next=/admin/", {"username": "root", "password": "root-pass-1234"})
    admin.post("/admin/jxai_app/apitoken/add/", {"user": hal.pk, "name": "ci"})
    issued = SignInEvent.objects.filter(kind="token-issued").latest("id")
    assert (issued.actor, issued.user, issued.ip_address) == ("root", hal, "127.0.0.1")
    listing = admin.get("/admin/jxai_app/signinevent/")
    assert listing.status_code == 200 and "password sign-in refused" in listing.content.decode()
    assert admin.get("/admin/jxai_app/signinevent/add/").status_code == 403
    event = SignInEvent.objects.first()
    assert admin.post(f"/admin/jxai_app/signinevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403


def test_an_account_made_by_sign_in_deletes_itself_by_typing_its_username(idp: OidcProvider, client: Client) -> None:
    """It has no usable password to type (docs/data.md "Erasure"): the page asks for the username."""
    idp.add_user("olga", email="olga@example.org", groups=[])
    assert sign_in(client, idp, "olga").status_code == 302
    olga = User.objects.get(username="olga")
    page = client.get("/")
    assert page.context["initial"]["deleteConfirm"] == "username"
    assert b'name="username"' in page.content and b'type="password" id="delete-account-confirm"' not in page.content

    def delete(body: dict[str, str]) -> Any:
        return client.post("/account/delete", body, content_type="application/json")

    for wrong in ({"password": ""}, {"password": "anything"}, {"username": "OLGA"}, {"username": "someone"}):
        answer = delete(wrong)
        assert answer.status_code == 403 and "your username" in answer.json()["detail"], wrong
    assert User.objects.filter(pk=olga.pk).exists()
    answer = delete({"username": "olga"})
    assert answer.status_code == 200 and answer.json() == {"deleted": True}
    assert not User.objects.filter(pk=olga.pk).exists() and client.get("/").status_code == 302
