"""JSON log lines (``DJANGO_LOG_FORMAT=json``) carrying the turn's ids (docs/operations.md "Logs").

:class:`JsonFormatter` writes one JSON object per line::

    {"time": "2026-12-01T14:03:07.123Z", "level": "WARNING", "logger": "jxai_app.turns",
     "message": "…", "turn_id": "…", "conversation_id": "…", "exception": "Traceback …"}

``turn_id`` and ``conversation_id`` come from context variables a turn's task binds when it
starts (:func:`bind_turn`); asyncio tasks and the database threads a task calls copy its
context, so every line logged on a turn's behalf carries them, and other lines do not.
Credentials are removed before formatting by the handler's
:class:`~jxai_app.core.logsafety.RedactSecretsFilter` (message and traceback alike), as for
the text format.
"""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import datetime, timezone

__all__ = ["JsonFormatter", "bind_turn"]

_turn_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("jxai_turn_id", default=None)
_conversation_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("jxai_conversation_id", default=None)


def bind_turn(*, turn_id: str, conversation_id: str) -> None:
    """Tag every later log line of the current context (a turn's task) with these ids."""
    _turn_id.set(turn_id)
    _conversation_id.set(conversation_id)


class JsonFormatter(logging.Formatter):
    """One JSON object per record (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a single line of JSON (no newline inside: tracebacks are escaped)."""
        doc: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, var in (("turn_id", _turn_id), ("conversation_id", _conversation_id)):
            value = var.get()
            if value is not None:
                doc[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exception"] = record.exc_text
        if record.stack_info:
            doc["stack"] = record.stack_info
        return json.dumps(doc, ensure_ascii=False, default=str)
