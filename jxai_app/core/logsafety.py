"""A logging filter that keeps credentials out of log output (docs/security.md, threat 7 "Secret leakage").

jxai itself never logs a key: clients hold them only in request headers, and error events
are scrubbed of the request's credentials at the streaming boundary
(:func:`jxai_app.core.streaming.fault.redact`). This filter is the second line for everything
else that logs at ``DEBUG`` — ``httpcore`` prints response headers, a third-party library
may print a request, an exception message may quote a header. Installed on the console
handler by ``project/settings.py`` (``LOGGING``), it rewrites each record's message,
exception text and stack text, replacing:

- the value after a credential header name (``Authorization``, ``Proxy-Authorization``,
  ``X-Api-Key``, ``Api-Key``, ``X-Provider-Api-Key``, ``Cookie``, ``Set-Cookie``) in the
  shapes headers are printed in: ``Name: value``, ``'name': 'value'``, ``(b'Name', b'value')``,
  ``name=value``;
- ``Bearer <credentials>`` anywhere;
- tokens shaped like provider keys (``sk-…``, ``sk-ant-…``) and jxai API tokens (``jxai_…``);
- the exact value of every environment variable whose name ends in ``_KEY``, ``_TOKEN``,
  ``_SECRET`` or ``_PASSWORD`` (``OPENAI_API_KEY``, ``DJANGO_SECRET_KEY``, …), at least
  8 characters long.

Framework-free (used while Django configures logging, before apps load).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Final, Mapping

__all__ = ["REDACTED", "RedactSecretsFilter", "environment_secrets", "redact_text"]

REDACTED: Final[str] = "[redacted]"

_SEP: Final[str] = r"""(?P<sep>["']?\s*[:=]\s*(?-i:b)?["']?|["']\s*,\s*(?-i:b)?["'])"""
"""Between a header name and its value: ``: ``, ``=``, ``': '``, ``', b'``."""
_HEADER_VALUE: Final[re.Pattern[str]] = re.compile(
    r"(?i)(?P<name>\b(?:proxy-)?authorization|\b(?:x-provider-|x-)?api-key)" + _SEP + r"""(?P<value>[^"'\r\n,;&)}\]]+)""")
_COOKIE_VALUE: Final[re.Pattern[str]] = re.compile(
    r"(?i)(?P<name>\b(?:set-)?cookie)" + _SEP + r"""(?P<value>[^"'\r\n]+)""")  # a cookie header runs to its end
_BEARER: Final[re.Pattern[str]] = re.compile(r"(?i)\b(Bearer)\s+[A-Za-z0-9._~+/=:-]{8,}")
_KEY_SHAPED: Final[re.Pattern[str]] = re.compile(r"\b(?:sk-(?:ant-)?[A-Za-z0-9_-]{16,}|jxai_[A-Za-z0-9_-]{20,})")
_SECRET_ENV_SUFFIXES: Final[tuple[str, ...]] = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
_MIN_SECRET: Final[int] = 8


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of ``environ``'s (``None``: ``os.environ``) variables named ``…_KEY``,
    ``…_TOKEN``, ``…_SECRET`` or ``…_PASSWORD`` that are at least 8 characters long, longest first."""
    source = os.environ if environ is None else environ
    values = {value for name, value in source.items()
              if name.upper().endswith(_SECRET_ENV_SUFFIXES) and len(value) >= _MIN_SECRET}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with credentials replaced by ``[redacted]`` (rules in the module docstring).

    Args:
        text: a formatted log message, exception text or anything else.
        environ: where secret-looking variables are read; ``None`` for ``os.environ``.
    """
    for secret in environment_secrets(environ):
        if secret in text:
            text = text.replace(secret, REDACTED)
    for pattern in (_HEADER_VALUE, _COOKIE_VALUE):
        text = pattern.sub(lambda m: f"{m.group('name')}{m.group('sep')}{REDACTED}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _KEY_SHAPED.sub(REDACTED, text)


class RedactSecretsFilter(logging.Filter):
    """Rewrites each record so that no credential reaches the handler's output; never drops
    a record. Attach it to handlers (a logger's filters do not see propagated records)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler's error path
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True
