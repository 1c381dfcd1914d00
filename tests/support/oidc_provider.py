"""A real OpenID Connect provider on 127.0.0.1 for the sign-in tests (docs/sso.md).

It runs in a background thread (so the in-process Django test client, a daphne subprocess
and Chromium all reach it over TCP) and speaks the parts of the protocol jxai uses:

- discovery at ``/.well-known/openid-configuration`` (with ``end_session_endpoint``);
- ``/authorize``: checks the client and the registered redirect URI, requires a PKCE S256
  challenge, and shows a sign-in form (a username); its POST sends the browser back to the
  redirect URI with a one-time code and the ``state`` it was given;
- ``/token``: client authentication (HTTP Basic or form), the code once, the same redirect
  URI, and the PKCE verifier against the challenge; answers an access token and an ID
  token signed RS256 by a key generated at start (``kid`` ``test-key``) with
  ``iss``/``sub``/``aud``/``iat``/``exp``/``nonce`` and the user's claims;
- ``/jwks`` (the public key), ``/userinfo`` (Bearer), ``/logout`` (recorded, then back to
  ``post_logout_redirect_uri``).

The test decides who exists (``users``: username → claims, changed between sign-ins) and
can make the next ID tokens misbehave with ``id_token_overrides`` (e.g. another ``iss``,
an ``exp`` in the past, a ``nonce`` that is not the client's). ``authorize_requests`` and
``logouts`` keep what the client sent.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from joserfc import jwt
from joserfc.jwk import RSAKey

__all__ = ["OidcProvider", "CLIENT_ID", "CLIENT_SECRET"]

CLIENT_ID = "jxai-test"
CLIENT_SECRET = "test-client-secret-7731"


class OidcProvider:
    """The provider (module docstring); a context manager that starts and stops it."""

    def __init__(self) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig", "alg": "RS256"})
        self.users: dict[str, dict[str, Any]] = {}
        self.redirect_uris: set[str] = set()
        self.id_token_overrides: dict[str, Any] = {}
        self.authorize_requests: list[dict[str, str]] = []
        self.logouts: list[dict[str, str]] = []
        self._codes: dict[str, dict[str, str]] = {}
        self._access: dict[str, str] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.issuer = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OidcProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_user(self, username: str, *, email: str, groups: list[str]) -> dict[str, Any]:
        """Create an account at the provider; returns its claims (edit ``groups`` later)."""
        claims = {"sub": f"sub-{secrets.token_hex(6)}", "preferred_username": username, "email": email,
                  "email_verified": True, "given_name": username.title(), "groups": list(groups)}
        self.users[username] = claims
        return claims

    def discovery(self) -> dict[str, Any]:
        base = self.issuer
        return {"issuer": base, "authorization_endpoint": f"{base}/authorize", "token_endpoint": f"{base}/token",
                "userinfo_endpoint": f"{base}/userinfo", "jwks_uri": f"{base}/jwks",
                "end_session_endpoint": f"{base}/logout", "response_types_supported": ["code"],
                "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"]}

    def authorize_error(self, params: dict[str, str]) -> str | None:
        """Why an authorization request is refused, or ``None``."""
        if params.get("client_id") != CLIENT_ID:
            return "unknown client"
        if params.get("redirect_uri") not in self.redirect_uris:
            return f"redirect URI {params.get('redirect_uri')!r} is not registered"
        if params.get("response_type") != "code" or "openid" not in params.get("scope", "").split():
            return "only the code flow with the openid scope"
        if params.get("code_challenge_method") != "S256" or not params.get("code_challenge"):
            return "PKCE (S256) is required"
        return None

    def issue_code(self, params: dict[str, str], username: str) -> str:
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._codes[code] = {**params, "username": username}
        return code

    def redeem(self, form: dict[str, str], client: tuple[str, str]) -> tuple[int, dict[str, Any]]:
        """The token endpoint's answer: ``(status, JSON body)``."""
        if client != (CLIENT_ID, CLIENT_SECRET):
            return 401, {"error": "invalid_client"}
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)
        if grant is None or form.get("grant_type") != "authorization_code":
            return 400, {"error": "invalid_grant", "error_description": "unknown or used code"}
        if form.get("redirect_uri") != grant["redirect_uri"]:
            return 400, {"error": "invalid_grant", "error_description": "redirect_uri differs"}
        verifier = form.get("code_verifier", "").encode()
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=").decode()
        if not verifier or challenge != grant["code_challenge"]:
            return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
        user = self.users[grant["username"]]
        now = int(time.time())
        claims = {**user, "iss": self.issuer, "aud": CLIENT_ID, "iat": now, "exp": now + 300}
        if grant.get("nonce"):
            claims["nonce"] = grant["nonce"]
        claims.update(self.id_token_overrides)
        access = secrets.token_urlsafe(24)
        with self._lock:
            self._access[access] = grant["username"]
        id_token = jwt.encode({"alg": "RS256", "kid": "test-key"}, claims, self.key)
        return 200, {"access_token": access, "token_type": "Bearer", "expires_in": 300, "id_token": id_token,
                     "scope": grant.get("scope", "openid")}

    def userinfo(self, authorization: str) -> dict[str, Any] | None:
        username = self._access.get(authorization.removeprefix("Bearer ").strip())
        return None if username is None else dict(self.users[username])


def _handler(provider: OidcProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, body: Any, *, content_type: str = "application/json",
                  headers: dict[str, str] | None = None) -> None:
            data = (json.dumps(body) if content_type == "application/json" else str(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _query(self) -> dict[str, str]:
            return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))

        def _form(self) -> dict[str, str]:
            length = int(self.headers.get("Content-Length") or 0)
            return dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))

        def do_GET(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            if path == "/.well-known/openid-configuration":
                self._send(200, provider.discovery())
            elif path == "/jwks":
                self._send(200, {"keys": [provider.key.as_dict(private=False)]})
            elif path == "/authorize":
                params = self._query()
                provider.authorize_requests.append(params)
                error = provider.authorize_error(params)
                if error:
                    self._send(400, f"<p>{html.escape(error)}</p>", content_type="text/html")
                    return
                hidden = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                                 for k, v in params.items())
                page = (f'<!doctype html><title>Test provider</title><form method="post" action="/authorize">'
                        f'{hidden}<label>Username <input name="username" id="idp-username"></label>'
                        f'<button type="submit" id="idp-submit">Sign in</button></form>')
                self._send(200, page, content_type="text/html")
            elif path == "/userinfo":
                info = provider.userinfo(self.headers.get("Authorization", ""))
                self._send(200 if info else 401, info or {"error": "invalid_token"})
            elif path == "/logout":
                params = self._query()
                provider.logouts.append(params)
                target = params.get("post_logout_redirect_uri")
                if target:
                    query = urllib.parse.urlencode({"state": params["state"]}) if params.get("state") else ""
                    self._send(302, "", content_type="text/plain", headers={"Location": f"{target}?{query}" if query else target})
                else:
                    self._send(200, "<p>signed out</p>", content_type="text/html")
            elif path == "/favicon.ico":  # the browser asks on the provider's form page
                self._send(204, "", content_type="text/plain")
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            form = self._form()
            if path == "/authorize":
                username = form.pop("username", "")
                if provider.authorize_error(form) or username not in provider.users:
                    self._send(400, "<p>no such user or bad request</p>", content_type="text/html")
                    return
                code = provider.issue_code(form, username)
                back = {"code": code, **({"state": form["state"]} if "state" in form else {})}
                self._send(302, "", content_type="text/plain",
                           headers={"Location": f"{form['redirect_uri']}?{urllib.parse.urlencode(back)}"})
            elif path == "/token":
                client = (form.get("client_id", ""), form.get("client_secret", ""))
                basic = self.headers.get("Authorization", "")
                if basic.startswith("Basic "):
                    user, _, password = base64.b64decode(basic[6:]).decode().partition(":")
                    client = (urllib.parse.unquote(user), urllib.parse.unquote(password))
                status, body = provider.redeem(form, client)
                self._send(status, body, headers={"Cache-Control": "no-store"})
            else:
                self._send(404, {"error": "not found"})

    return Handler
