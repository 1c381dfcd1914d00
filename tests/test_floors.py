"""The floors of the code (docs/architecture.md "Floors"): every module of ``jxai_app`` imports
only from its own floor or below, ``store`` and ``policy`` never import each other, no two
modules import each other (directly or round a circle), and no module imports one of ours
inside a function (that is how circles hide).

Read from the source with ``ast``, like the core's guard (``tests/core/test_no_django.py``):
nothing is imported, so the test needs no settings and sees every import, also those a test
run would never execute.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jxai_app"

FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("jxai_app", "jxai_app.core")),
    ("conf", ("jxai_app.conf", "jxai_app.db", "jxai_app.models", "jxai_app.ops.metrics", "jxai_app.ops.jsonlog",
              "jxai_app.ops.tracing", "jxai_app.ops.memory", "jxai_app.ops.localmodel")),
    ("store | policy", ("jxai_app.store", "jxai_app.policy")),
    ("tools", ("jxai_app.tools",)),
    ("turns", ("jxai_app.turns",)),
    ("edges", ("jxai_app.consumers", "jxai_app.views", "jxai_app.share_views", "jxai_app.yourdata", "jxai_app.api",
               "jxai_app.uploads", "jxai_app.admin", "jxai_app.admin_site",
               "jxai_app.urls", "jxai_app.routing", "jxai_app.apps", "jxai_app.web", "jxai_app.ops",
               "jxai_app.management", "jxai_app.devtools", "jxai_app.streaming")),
)
"""Bottom up; a module belongs to the floor of the longest prefix naming it."""
READY_IMPORTS = {("jxai_app.apps", "jxai_app.web.signins")}
"""The one import inside a function allowed: ``AppConfig.ready`` loading the module that
connects signal receivers (Django's documented place for it; docs/architecture.md)."""
SIBLINGS = ("jxai_app.store", "jxai_app.policy")
"""One floor, two packages that must not know each other."""


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = ("jxai_app", *path.relative_to(PACKAGE).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _prefix(name: str, prefixes: tuple[str, ...]) -> str | None:
    matches = [p for p in prefixes if name == p or name.startswith(p + ".")]
    return max(matches, key=len) if matches else None


def floor_of(name: str) -> int:
    """The floor index of module ``name`` (its longest matching prefix decides)."""
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(FLOORS) for p in prefixes
                if name == p or name.startswith(p + ".")), default=None)
    assert best is not None, f"{name} belongs to no floor: add it to FLOORS and docs/architecture.md"
    return best[1]


def _ours(name: str) -> str | None:
    """The module of ours ``name`` (a module or a name inside one) refers to, if any."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str) -> Iterator[tuple[str, int, bool]]:
    """``(imported module, line, inside a function)`` for every import of ours in module ``name``."""
    path = MODULES[name]
    return imports_in(name, path.read_text(encoding="utf-8"), package=path.name == "__init__.py")


def imports_in(name: str, source: str, *, package: bool = False) -> Iterator[tuple[str, int, bool]]:
    """:func:`imports` of module ``name`` whose text is ``source``."""
    tree = ast.parse(source)
    package_name = name if package else name.rpartition(".")[0]
    in_function: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function.update(id(inner) for inner in ast.walk(node))
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package_name.split(".")[: len(package_name.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            module = _ours(target)
            if module is not None and module != name:
                yield module, node.lineno, id(node) in in_function


GRAPH = {name: {module for module, _, _ in imports(name)} for name in MODULES}


def test_every_module_is_on_a_floor() -> None:
    for name in MODULES:
        floor_of(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_module_imports_only_its_floor_and_below(name: str) -> None:
    mine = floor_of(name)
    upward = [f"{module} (line {line}, floor {FLOORS[floor_of(module)][0]})" for module, line, _ in imports(name)
              if floor_of(module) > mine]
    assert not upward, f"{name} (floor {FLOORS[mine][0]}) imports from above: {upward}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_import_of_ours_inside_a_function(name: str) -> None:
    inside = [f"{module} (line {line})" for module, line, nested in imports(name)
              if nested and (name, module) not in READY_IMPORTS]
    assert not inside, f"{name} imports inside a function: {inside}"


def test_store_and_policy_do_not_know_each_other() -> None:
    crossing = [(name, module) for name in MODULES for module in GRAPH[name]
                if {_prefix(name, SIBLINGS), _prefix(module, SIBLINGS)} == set(SIBLINGS)]
    assert not crossing, f"store and policy import each other: {crossing}"


def test_no_import_circle() -> None:
    """Tarjan's strongly connected components over the whole import graph, core included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in GRAPH[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in sorted(MODULES):
        if name not in index:
            visit(name)
    assert not circles, f"import circles: {circles}"


def test_the_guard_sees_a_broken_floor() -> None:
    """The walk itself: an import inside a function, from a floor above, is found as such."""
    found = list(imports_in("jxai_app.store.probe", "def f():\n    from jxai_app.turns.hub import TurnHub\n"))
    assert found == [("jxai_app.turns.hub", 2, True)]
    assert floor_of("jxai_app.store.probe") < floor_of("jxai_app.turns.hub")
