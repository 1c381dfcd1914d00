"""Provider keys never reach a browser or a log (docs/security.md, threat 7).

The key is a sentinel configured the ordinary way (``OPENAI_API_KEY`` + ``OPENAI_BASE_URL``,
or ``JXAI_MODELS_JSON`` naming the variable), and the provider is a real server on
127.0.0.1 that misbehaves as badly as it can: it answers 401 and echoes the request's
``Authorization`` / ``x-api-key`` value in its error body *and* in response headers (which
``httpcore`` prints at DEBUG). Every log record of every logger is captured at DEBUG.
"""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import AsyncClient

from jxai_app import conf
from jxai_app.core.logsafety import REDACTED, RedactSecretsFilter, redact_text
from jxai_app.models import ApiToken
from tests.support.fake_provider import FakeProvider, Request, Script, json_response, sse_json

SENTINEL = "sk-SENTINEL-7d41c0ffee93b2a8-do-not-leak"
ANTHROPIC_SENTINEL = "sk-ant-SENTINEL-5e2b9a71c4d3-do-not-leak"
NOISY_LOGGERS = ("", "httpx", "httpcore", "django", "daphne", "jxai_app", "asyncio")


def _echo(request: Request) -> Script:
    """401 with every credential the request carried, in the body and in headers."""
    sent = request.headers.get("authorization") or request.headers.get("x-api-key") or ""
    return json_response(401, {"error": {"message": f"Incorrect API key provided: {sent}",
                                         "type": "invalid_request_error", "code": "invalid_api_key"}},
                         headers={"WWW-Authenticate": f'Bearer error="invalid_token", error_description="{sent}"',
                                  "X-Echo-Key": sent})


def _echo_in_stream(request: Request) -> Script:
    """200, then an error object inside the stream quoting the key."""
    sent = request.headers.get("authorization", "")
    return Script(writes=[sse_json({"error": {"message": f"key {sent} has no quota", "code": "insufficient_quota"}})])


@pytest.fixture
def capture(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    for name in NOISY_LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def _assert_no_key_in_logs(caplog: pytest.LogCaptureFixture, *keys: str) -> None:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    lines = [formatter.format(record) for record in caplog.records]
    assert lines, "nothing was logged at all: the capture is not working"
    for key in keys:
        leaked = [line for line in lines if key in line]
        assert not leaked, leaked


@pytest.fixture
def openai_env(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[FakeProvider]:
    """The common case, from the environment only: OPENAI_API_KEY + OPENAI_BASE_URL."""
    with FakeProvider(handler=_echo) as fake:
        settings.JXAI_MODELS = None
        settings.JXAI_UPSTREAM_RETRIES = 0
        for name in ("JXAI_MODELS_JSON", "JXAI_MODELS_FILE", "ANTHROPIC_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("JXAI_MODEL", "gpt-sentinel")
        conf.reset_caches()
        yield fake
    conf.reset_caches()


async def _stream(alias: str | None = None) -> list[Any]:
    client = conf.build_client(alias)
    return [event async for event in client.stream_chat([{"role": "user", "content": "hi"}], None, None)]


async def test_a_401_echoing_the_key_through_stream_chat(openai_env: FakeProvider,
                                                         capture: pytest.LogCaptureFixture) -> None:
    events = await _stream()
    assert openai_env.requests[0].headers["authorization"] == f"Bearer {SENTINEL}", "the key was really sent"
    assert [e.type for e in events] == ["error"]
    error = events[0]
    wire = json.dumps(error.to_dict())
    assert SENTINEL not in wire
    assert error.message == f"Incorrect API key provided: Bearer {REDACTED}" and error.code == "401"
    assert error.problem is not None and error.problem["detail"] == error.message
    _assert_no_key_in_logs(capture, SENTINEL)
    # httpcore really printed the echoing response headers, redacted.
    header_lines = [r.getMessage() for r in capture.records if r.name.startswith("httpcore")
                    and "receive_response_headers.complete" in r.getMessage()]
    assert header_lines and all(REDACTED in line for line in header_lines)


async def test_an_error_inside_a_200_stream_quoting_the_key(openai_env: FakeProvider,
                                                            capture: pytest.LogCaptureFixture) -> None:
    openai_env.handler = _echo_in_stream
    events = await _stream()
    assert [e.type for e in events] == ["error"]
    assert events[0].message == f"key Bearer {REDACTED} has no quota" and events[0].code == "insufficient_quota"
    _assert_no_key_in_logs(capture, SENTINEL)


async def test_anthropic_x_api_key_from_jxai_models_json(monkeypatch: pytest.MonkeyPatch, settings: Any,
                                                         capture: pytest.LogCaptureFixture) -> None:
    with FakeProvider(handler=_echo) as fake:
        settings.JXAI_MODELS = None
        monkeypatch.setenv("JXAI_TEST_ANTHROPIC_KEY", ANTHROPIC_SENTINEL)
        monkeypatch.setenv("JXAI_MODELS_JSON", json.dumps({
            "providers": {"a": {"kind": "anthropic", "base_url": fake.url, "api_key_env": "JXAI_TEST_ANTHROPIC_KEY"}},
            "models": {"claude": {"provider": "a", "model_id": "claude-x"}}, "roles": {"default": "claude"}}))
        conf.reset_caches()
        try:
            events = await _stream()
        finally:
            conf.reset_caches()
    assert fake.requests[0].headers["x-api-key"] == ANTHROPIC_SENTINEL
    assert events[0].type == "error" and ANTHROPIC_SENTINEL not in json.dumps(events[0].to_dict())
    assert REDACTED in events[0].message
    _assert_no_key_in_logs(capture, ANTHROPIC_SENTINEL)


@pytest.mark.django_db(transaction=True)
async def test_the_sse_endpoint_never_returns_or_logs_the_key(openai_env: FakeProvider, user: Any,
                                                              capture: pytest.LogCaptureFixture) -> None:
    from asgiref.sync import sync_to_async

    token = (await sync_to_async(ApiToken.issue)(user=user, name="ci"))[1]
    client = AsyncClient()
    response = await client.post("/ai/chat", data=json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
                                 content_type="application/json", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    body = b"".join([chunk async for chunk in response.streaming_content])
    assert openai_env.requests, "the provider was called"
    assert SENTINEL.encode() not in body
    frames = [json.loads(block[len("data: "):]) for block in body.decode().strip().split("\n\n")]
    assert frames[-1]["type"] == "error" and frames[-1]["message"] == f"Incorrect API key provided: Bearer {REDACTED}"
    assert SENTINEL not in "".join(f"{k}: {v}" for k, v in response.items())
    models = await client.get("/ai/models")
    assert models.status_code == 200 and SENTINEL.encode() not in models.content
    _assert_no_key_in_logs(capture, SENTINEL, token)


# -- the logging filter itself ---------------------------------------------------------------
def test_every_configured_handler_redacts() -> None:
    handlers = [h for h in logging.getLogger().handlers if type(h).__module__.startswith("logging")]
    assert handlers, "settings.LOGGING configured no root handler"
    for handler in handlers:
        assert any(isinstance(f, RedactSecretsFilter) for f in handler.filters), handler


def test_the_settings_console_handler_writes_redacted_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-0123456789abcdef")
    config = json.loads(json.dumps(django_settings.LOGGING))  # a copy; the live config stays
    config["disable_existing_loggers"] = False
    config["root"] = {"handlers": [], "level": "DEBUG"}
    config["loggers"] = {"jxai.test.redaction": {"handlers": ["console"], "level": "DEBUG", "propagate": False}}
    logging.config.dictConfig(config)
    logger = logging.getLogger("jxai.test.redaction")
    stream = io.StringIO()
    logger.handlers[0].setStream(stream)  # type: ignore[attr-defined]
    try:
        logger.debug("send_request_headers.started request=%r", [(b"Authorization", b"Bearer " + SENTINEL.encode())])
        logger.debug("headers %s", {"x-api-key": ANTHROPIC_SENTINEL, "accept": "text/event-stream"})
        logger.info("a key in plain text: %s, and a token %s", SENTINEL, "tok-0123456789abcdef")
        try:
            raise RuntimeError(f"upstream said Authorization: Bearer {SENTINEL}")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logging.config.dictConfig(django_settings.LOGGING)
    out = stream.getvalue()
    assert SENTINEL not in out and ANTHROPIC_SENTINEL not in out and "tok-0123456789abcdef" not in out
    assert out.count(REDACTED) >= 5 and "text/event-stream" in out and "RuntimeError" in out


@pytest.mark.parametrize(("text", "expected"), [
    ("Authorization: Bearer abc.def-123456", f"Authorization: {REDACTED}"),
    ("{'authorization': 'Bearer abcdefgh12', 'accept': '*/*'}", f"{{'authorization': '{REDACTED}', 'accept': '*/*'}}"),
    ("[(b'X-Api-Key', b'abcdefghijk'), (b'Host', b'h')]", f"[(b'X-Api-Key', b'{REDACTED}'), (b'Host', b'h')]"),
    ("x-provider-api-key=abcdefghijk&b=1", f"x-provider-api-key={REDACTED}&b=1"),
    ("Cookie: sessionid=abc123def456; csrftoken=zzz", f"Cookie: {REDACTED}"),
    ("[(b'set-cookie', b'sessionid=abc; HttpOnly'), (b'a', b'b')]", f"[(b'set-cookie', b'{REDACTED}'), (b'a', b'b')]"),
    ("token jxai_" + "A" * 43 + " used", f"token {REDACTED} used"),
    ("curl -H 'Bearer zzzzzzzzzzzz'", f"curl -H 'Bearer {REDACTED}'"),
    ("missing authorization, use a token", "missing authorization, use a token"),
    ("POST https://api.openai.com/v1/chat/completions 200", "POST https://api.openai.com/v1/chat/completions 200"),
])
def test_redact_text(text: str, expected: str) -> None:
    assert redact_text(text, environ={}) == expected


def test_values_of_secret_variables_are_redacted_wherever_they_appear() -> None:
    environ = {"OPENAI_API_KEY": "plainvalue-1234", "DJANGO_SECRET_KEY": "s" * 50, "PATH": "/usr/bin:/bin",
               "SHORT_TOKEN": "abc"}
    text = "k=plainvalue-1234 s=" + "s" * 50 + " path=/usr/bin:/bin short=abc"
    assert redact_text(text, environ=environ) == f"k={REDACTED} s={REDACTED} path=/usr/bin:/bin short=abc"
