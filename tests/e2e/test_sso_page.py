"""Sign-in through the identity provider in Chromium (docs/sso.md): the login page's
"Sign in with Test IdP", the provider's own form, back to the chat with its socket open; the
account and its groups made from the claims; logout on to the provider and back to the
login page; a group removed at the provider is gone after the next sign-in; the audit rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from jxai_app.models import SignInEvent
from tests.e2e.steps import assert_clean, wait_connected
from tests.support.oidc_provider import OidcProvider

pytestmark = pytest.mark.browser


def sign_in_through_idp(tab: Any, username: str) -> None:
    page = tab.page
    page.goto("/accounts/login/")
    page.get_by_test_id("sso-login").click()
    page.locator("#idp-username").fill(username)
    page.locator("#idp-submit").click()
    page.get_by_test_id("composer").wait_for()
    wait_connected(tab)


def test_sign_in_through_the_provider_and_group_sync(open_page: Any, oidc_idp: OidcProvider, live_db: None) -> None:
    oidc_idp.add_user("ivy", email="ivy@example.org", groups=["idp-interns", "idp-research", "finance"])
    tab = open_page()
    sign_in_through_idp(tab, "ivy")
    ivy = User.objects.get(username="ivy")
    assert sorted(ivy.groups.values_list("name", flat=True)) == ["idp-interns", "idp-research"]
    assert not ivy.is_staff and not ivy.has_usable_password()

    tab.page.get_by_test_id("logout").click()
    tab.page.wait_for_url("**/accounts/login/**")
    assert oidc_idp.logouts[-1]["id_token_hint"]
    tab.page.goto("/")
    assert "/accounts/login/" in tab.page.url

    oidc_idp.users["ivy"]["groups"] = ["idp-interns", "finance"]
    sign_in_through_idp(tab, "ivy")
    assert sorted(ivy.groups.values_list("name", flat=True)) == ["idp-interns"]
    kinds = list(SignInEvent.objects.filter(user=ivy).order_by("id").values_list("kind", "detail"))
    assert kinds == [("sso-sign-in", "account created"),
                     ("groups-changed", "added: idp-interns, idp-research; removed: -"),
                     ("sso-sign-in", ""), ("groups-changed", "added: -; removed: idp-research")]
    assert_clean(tab)
