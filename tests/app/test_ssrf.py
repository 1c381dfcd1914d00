"""Caller-supplied provider URLs (``X-Api-Base-URL``): off by default, and when on, never to
private, loopback, link-local, multicast, reserved or metadata addresses — literal, IPv6,
IPv4-mapped, legacy IPv4 forms, or a DNS name resolving to one (docs/security.md, threat 5)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any, Sequence

import httpx
import pytest
from django.test import AsyncClient

from jxai_app import api

from jxai_app.core import ssrf
from tests.app.apisupport import SENTINEL_KEY, bearer, fake, frames, post_chat, problem_of, read_all, token  # noqa: F401
from tests.support.fake_provider import FakeProvider, Script, openai_text_stream

BLOCKED_LITERALS = [
    "127.0.0.1", "127.8.9.10", "10.0.0.5", "172.16.3.4", "192.168.1.1", "169.254.169.254", "169.254.170.2",
    "100.64.0.1", "100.100.100.200", "0.0.0.0", "224.0.0.251", "255.255.255.255", "240.0.0.1", "198.18.0.1",
    "::1", "::", "fe80::1", "fe80::1%eth0", "febf::1", "fd00::1", "fc00::1", "fd00:ec2::254", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "::ffff:a9fe:a9fe",
    "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "2002:7f00:1::1", "::127.0.0.1",
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2001:4860:4860::8888",
          "64:ff9b::808:808", "2002:808:808::1"]


@pytest.mark.parametrize("literal", BLOCKED_LITERALS)
def test_blocked_addresses(literal: str) -> None:
    address = ssrf.parse_ip_literal(literal)
    assert address is not None
    assert ssrf.is_blocked_address(address)


@pytest.mark.parametrize("literal", PUBLIC)
def test_public_addresses_pass(literal: str) -> None:
    assert not ssrf.is_blocked_address(ipaddress.ip_address(literal))


@pytest.mark.parametrize(("text", "address"), [
    ("2130706433", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"),
    ("127.1", "127.0.0.1"), ("0x7f.1", "127.0.0.1"), ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
    ("[::1]", "::1"), ("1.2.3.4", "1.2.3.4"),
])
def test_legacy_ipv4_forms_are_read_like_the_resolver_reads_them(text: str, address: str) -> None:
    assert ssrf.parse_ip_literal(text) == ipaddress.ip_address(address)


@pytest.mark.parametrize("name", ["example.com", "deadbeef", "1.2.3.4.example", "0x7g.1", ""])
def test_names_are_not_literals(name: str) -> None:
    assert ssrf.parse_ip_literal(name) is None


def resolver_for(table: dict[str, Sequence[str]]) -> ssrf.Resolver:
    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in table:
            raise OSError(f"{host} does not resolve")
        return table[host]

    return resolve


DNS = resolver_for({
    "public.example": ["93.184.216.34"],
    "rebind.example": ["127.0.0.1"],
    "mixed.example": ["93.184.216.34", "10.1.2.3"],
    "v6meta.example": ["2606:4700::1", "::ffff:169.254.169.254"],
    "garbage.example": ["not-an-address"],
    "empty.example": [],
})


async def test_a_public_name_passes_with_every_address() -> None:
    checked = await ssrf.check_base_url("https://public.example/v1/", resolver=DNS)
    assert checked.url == "https://public.example/v1" and checked.port == 443
    assert checked.address == ipaddress.ip_address("93.184.216.34")


@pytest.mark.parametrize(("url", "reason"), [
    ("http://rebind.example/v1", "resolves to a private"),
    ("http://mixed.example/v1", "resolves to a private"),
    ("http://v6meta.example/v1", "resolves to a private"),
    ("http://garbage.example/v1", "not an address"),
    ("http://empty.example/v1", "does not resolve"),
    ("http://unknown.example/v1", "does not resolve"),
    ("http://localhost:8080/v1", "local or metadata name"),
    ("http://api.localhost/v1", "local or metadata name"),
    ("http://metadata.google.internal/computeMetadata/v1", "local or metadata name"),
    ("http://METADATA.GOOGLE.INTERNAL./", "local or metadata name"),
    ("http://169.254.169.254/latest/meta-data", "resolves to a private"),
    ("http://[::ffff:169.254.169.254]/", "resolves to a private"),
    ("http://[fe80::1]/", "resolves to a private"),
    ("http://[fd00::1]/", "resolves to a private"),
    ("http://[::1]:11434/v1", "resolves to a private"),
    ("http://2130706433/v1", "resolves to a private"),
    ("http://0177.0.0.1/v1", "resolves to a private"),
    ("http://0x7f.1/v1", "resolves to a private"),
    ("ftp://public.example/", "Only http and https"),
    ("file:///etc/passwd", "Only http and https"),
    ("public.example/v1", "Only http and https"),
    ("http://user:pw@public.example/v1", "must not carry credentials"),
    ("http://public.example/v1#x", "must not carry a fragment"),
    ("http://[::1/v1", "cannot be parsed"),
    ("http://public.example:99999/", "cannot be parsed"),
])
async def test_refused_urls_say_why(url: str, reason: str) -> None:
    with pytest.raises(ssrf.BlockedURLError) as caught:
        await ssrf.check_base_url(url, resolver=DNS)
    assert str(caught.value).startswith("Base URL host is not permitted. ")
    assert reason in str(caught.value)


async def test_the_pinned_transport_connects_to_the_checked_address_and_nowhere_else() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    checked = await ssrf.check_base_url("https://public.example/v1", resolver=DNS)
    transport = ssrf.PinnedTransport(checked, inner=httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get("https://public.example/v1/models")
        assert response.status_code == 200
        with pytest.raises(httpx.ConnectError):
            await client.get("https://elsewhere.example/v1/models")
        with pytest.raises(httpx.ConnectError):
            await client.get("https://public.example:8443/v1/models")
    [request] = seen
    assert request.url.host == "93.184.216.34" and request.url.path == "/v1/models"
    assert request.headers["host"] == "public.example"
    assert request.extensions["sni_hostname"] == "public.example"


# -- through the endpoint ----------------------------------------------------------------------
@pytest.fixture
def caller_urls_on(settings: Any, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    settings.JXAI_ALLOW_CLIENT_PROVIDER = True
    monkeypatch.setattr(api, "resolver", resolver_for({"rebind.example": ["127.0.0.1"],
                                                       "llm.test": ["127.0.0.1"]}))
    return fake


def _caller(url: str, key: str | None = "sk-caller-own-key") -> dict[str, str]:
    headers = {"X-Api-Base-URL": url}
    if key is not None:
        headers["X-Provider-Api-Key"] = key
    return headers


HELLO = {"messages": [{"role": "user", "content": "hi"}], "model": "gpt-x"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("url", [
    "http://127.0.0.1:{port}/v1", "http://10.0.0.1/v1", "http://192.168.0.10:8080/v1", "http://172.20.0.2/v1",
    "http://169.254.169.254/latest", "http://[::1]:{port}/v1", "http://[fe80::1]/v1", "http://[fd00::1]/v1",
    "http://[::ffff:169.254.169.254]/", "http://[::ffff:127.0.0.1]:{port}/v1", "http://2130706433:{port}/v1",
    "http://0177.0.0.1:{port}/v1", "http://rebind.example:{port}/v1", "http://localhost:{port}/v1",
    "http://metadata.google.internal/", "gopher://public.example/",
])
async def test_the_endpoint_refuses_private_targets_before_reading_the_body(
    caller_urls_on: FakeProvider, token: str, url: str,
) -> None:
    target = url.format(port=caller_urls_on.port)
    response = await post_chat(AsyncClient(), b"not even json", {**bearer(token), **_caller(target)})
    assert response.status_code == 403
    doc = problem_of(response)
    assert doc["type"].endswith("/forbidden") and doc["detail"].startswith("Base URL host is not permitted.")
    assert caller_urls_on.requests == []


@pytest.mark.django_db(transaction=True)
async def test_authentication_comes_before_the_url_check(caller_urls_on: FakeProvider) -> None:
    response = await post_chat(AsyncClient(), HELLO, _caller("http://169.254.169.254/"))
    assert response.status_code == 401


@pytest.mark.django_db(transaction=True)
async def test_the_url_check_comes_before_the_body_size(settings: Any, caller_urls_on: FakeProvider,
                                                        token: str) -> None:
    settings.JXAI_MAX_BODY_BYTES = 10
    response = await post_chat(AsyncClient(), b"x" * 100, {**bearer(token), **_caller("http://10.0.0.1/v1")})
    assert response.status_code == 403


@pytest.mark.django_db(transaction=True)
async def test_caller_urls_are_refused_when_the_setting_is_off(fake: FakeProvider, token: str) -> None:
    response = await post_chat(AsyncClient(), HELLO, {**bearer(token), **_caller("https://api.openai.com/v1")})
    assert response.status_code == 403
    assert "does not accept caller-supplied provider URLs" in problem_of(response)["detail"]


@pytest.mark.django_db(transaction=True)
async def test_a_caller_url_needs_the_callers_own_key(caller_urls_on: FakeProvider, token: str) -> None:
    response = await post_chat(AsyncClient(), HELLO, {**bearer(token), **_caller("https://api.openai.com/v1", None)})
    assert response.status_code == 401
    assert "requires an explicit provider key" in problem_of(response)["detail"]


@pytest.fixture
def loopback_allowed(caller_urls_on: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    """Pretend 127.0.0.1 is public (only so the fake can play a remote provider)."""
    monkeypatch.setattr(api, "address_blocked", lambda a: a != ipaddress.ip_address("127.0.0.1"))
    return caller_urls_on


@pytest.mark.django_db(transaction=True)
async def test_an_allowed_caller_url_is_pinned_and_gets_only_the_callers_key(
    loopback_allowed: FakeProvider, token: str,
) -> None:
    fake = loopback_allowed
    fake.add(Script(writes=openai_text_stream(["from ", "yours"])))
    url = f"http://llm.test:{fake.port}/v1"  # no DNS knows llm.test: only the pinned address reaches the fake
    response = await post_chat(AsyncClient(), HELLO, {**bearer(token), **_caller(url)})
    contents = [e.get("content") for e in frames(await read_all(response))]
    # The text arrives whole; where it is cut may differ: a tail that could begin the caller's
    # key ("s…" of "sk-…") waits for the next delta (docs/security.md "Secret leakage in streamed text").
    assert "".join(contents[:-1]) == "from yours" and contents[-1] is None
    [sent] = fake.requests
    assert sent.headers["host"] == f"llm.test:{fake.port}"
    assert sent.headers["authorization"] == "Bearer sk-caller-own-key"
    assert sent.json["model"] == "gpt-x"
    everything = json.dumps(sent.headers) + sent.body.decode()
    assert token not in everything and SENTINEL_KEY not in everything


@pytest.mark.django_db(transaction=True)
async def test_a_caller_provider_needs_a_model(loopback_allowed: FakeProvider, token: str) -> None:
    response = await post_chat(AsyncClient(), {"messages": []},
                               {**bearer(token), **_caller(f"http://llm.test:{loopback_allowed.port}/v1")})
    assert response.status_code == 400
    assert problem_of(response)["detail"] == "model is required with a caller-supplied provider URL."


@pytest.mark.django_db(transaction=True)
async def test_redirects_are_never_followed(loopback_allowed: FakeProvider, token: str) -> None:
    with FakeProvider([Script(writes=openai_text_stream(["leaked"]))]) as elsewhere:
        loopback_allowed.add(Script(status=302, content_type="text/plain", chunked=False,
                                    headers={"Location": f"{elsewhere.url}/chat/completions"}, writes=[b"moved"]))
        response = await post_chat(AsyncClient(), HELLO,
                                   {**bearer(token), **_caller(f"http://llm.test:{loopback_allowed.port}/v1")})
        [event] = frames(await read_all(response))
        assert event["type"] == "error" and event["code"] == "302"
        assert elsewhere.requests == []
    assert len(loopback_allowed.requests) == 1
