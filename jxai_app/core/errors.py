"""One error tree for the core (docs/architecture.md "Errors").

::

    JxaiError                      base of everything the core raises on purpose
    ├── InvalidEventError          a dict is not a valid normalised event (events.event_from_dict)
    ├── ConfigurationError         a provider, model alias or role is missing or malformed
    │   └── UnknownModelError      an alias or role that the model registry does not know
    ├── ToolError                  tool registry misuse (bad definition, bad schema)
    └── ProblemError               carries an RFC 9457 problem; raised by services, answered
                                   by views/consumers as application/problem+json or an
                                   ``error`` event (jxai_app.core.problems)

Streaming clients never raise these at their callers: every provider failure becomes an
``error`` event at one boundary per client (docs/streaming.md "The client interface").
"""

from __future__ import annotations

from typing import Any, Mapping


class JxaiError(Exception):
    """Base class of every error the jxai core raises on purpose."""


class InvalidEventError(JxaiError, ValueError):
    """A value is not a valid normalised event (docs/streaming.md "Events")."""


class ConfigurationError(JxaiError):
    """Providers, models or roles are missing or malformed."""


class UnknownModelError(ConfigurationError, KeyError):
    """A model alias or role that the model registry does not know."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it a plain sentence
        return str(self.args[0]) if self.args else "unknown model"


class ToolError(JxaiError):
    """A tool definition or registry call is malformed (never raised by ``execute``)."""


class ProblemError(JxaiError):
    """An error that carries an RFC 9457 problem document.

    Attributes:
        problem: the problem document ``{type, title, status, detail, …}``.
        status: the HTTP status to answer with (the problem's own ``status``).
    """

    def __init__(self, problem: Mapping[str, Any]) -> None:
        self.problem: dict[str, Any] = dict(problem)
        self.status: int = int(self.problem.get("status", 500))
        super().__init__(str(self.problem.get("detail") or self.problem.get("title") or "error"))

    @property
    def slug(self) -> str:
        """The problem type's slug (the last path segment of ``type``)."""
        return str(self.problem.get("type", "")).rstrip("/").rsplit("/", 1)[-1]
