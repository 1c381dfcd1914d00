"""A per-turn view of a registry: only the tools a predicate accepts, with call caps (docs/agent.md "Gated views").

The view never mutates the registry. The predicate is re-evaluated every time the view is
read (the loop re-reads the tool list each round, docs/agent.md "Rounds"), so a permission revoked
mid-turn takes effect at the next round. A model that names a tool it was not offered gets
a failed result, even when the tool exists. A predicate that raises hides the tool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping

from jxai_app.core.errors import ToolError
from jxai_app.core.tools.definition import ToolDefinition
from jxai_app.core.tools.registry import ToolRegistry, ToolView

__all__ = ["GatedToolRegistry"]

logger = logging.getLogger("jxai_app.core.tools")


class GatedToolRegistry(ToolView):
    """The tools of ``base`` that ``predicate`` accepts, each callable at most its cap per view.

    Make one view per turn: the call counts live in the view.

    Args:
        base: a ``ToolRegistry`` or another view (views compose; both filters and all caps apply).
        predicate: ``predicate(defn) -> bool``; ``None`` offers every tool of ``base``.
            Typically checks the user's permissions, or the model's tool support.
        call_caps: tool name → the most calls of that tool this view runs (≥ 0); a call
            over the cap gets a failed result. Every admitted call counts, whatever its
            outcome (bad arguments included).
        approval: names of the tools whose calls wait for a person's approval (docs/approval.md
            "Policy"); the loop asks :meth:`requires_approval` before it runs a call.
        prior_calls: tool name → calls of it the turn already ran before this view was made
            (a turn resumed after an approval counts its earlier calls against the caps).

    Raises:
        ToolError: a cap that is not a non-negative integer.
    """

    def __init__(
        self,
        base: ToolView,
        predicate: Callable[[ToolDefinition], bool] | None = None,
        *,
        call_caps: Mapping[str, int] | None = None,
        approval: Collection[str] = (),
        prior_calls: Mapping[str, int] | None = None,
    ) -> None:
        caps = dict(call_caps or {})
        for name, cap in caps.items():
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
                raise ToolError(f"call cap for tool {name!r} must be a non-negative integer, got {cap!r}")
        self._base = base
        self._predicate = predicate
        self._caps = caps
        self._calls: dict[str, int] = dict(prior_calls or {})
        self._approval = frozenset(approval)

    @property
    def root(self) -> ToolRegistry:
        return self._base.root

    def _offers(self, defn: ToolDefinition) -> bool:
        if self._predicate is None:
            return True
        try:
            return bool(self._predicate(defn))
        except Exception:
            logger.exception("tool predicate failed for %s; hiding the tool", defn.name)
            return False

    def list(self) -> list[ToolDefinition]:
        return [defn for defn in self._base.list() if self._offers(defn)]

    def get_definition(self, name: str) -> ToolDefinition | None:
        defn = self._base.get_definition(name)
        return defn if defn is not None and self._offers(defn) else None

    def _admit(self, defn: ToolDefinition) -> str | None:
        refusal = self._base._admit(defn)
        if refusal is not None:
            return refusal
        cap = self._caps.get(defn.name)
        count = self._calls.get(defn.name, 0)
        if cap is not None and count >= cap:
            return f'Tool "{defn.name}" may be called at most {cap} time{"" if cap == 1 else "s"} per turn; do not call it again'
        self._calls[defn.name] = count + 1
        return None

    def requires_approval(self, name: str) -> bool:
        """True when a call of ``name`` waits for the user's approval in this view: its policy
        says so for this user, or the underlying source does (docs/approval.md "Policy")."""
        return name in self._approval or self._base.requires_approval(name)

    def calls(self, name: str) -> int:
        """How many calls of ``name`` this view has admitted so far (refused ones not counted)."""
        return self._calls.get(name, 0)
