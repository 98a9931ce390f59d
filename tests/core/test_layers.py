"""Every import of the product follows the table of allowed imports (tests/core/import_rules.py,
shown in agent/README.md, "Module map"), and no modules import each other in a cycle.

The graph is read from the source with `ast` (no import runs), over every module of
`agentchat/` and of each component (the packages pyproject.toml maps), so a new module is
checked the moment it exists. An edge is any `import` or `from … import` (relative ones
resolved, those inside a function or under `if TYPE_CHECKING:` included), a name imported
from a package that is one of its modules, and a string literal naming a product module (how
`importlib.import_module` is called: `agentchat/cli.py` loads each component's `cli.py` so).
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from import_rules import UNITS, allowed, render, shown, unit_of

ROOT = Path(__file__).resolve().parents[2]


def product_modules() -> dict[str, Path]:
    """`agentchat.agent.chat.facade` -> agent/chat/facade.py, for every packaged module."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    out = {}
    for package, folder in config["tool"]["setuptools"]["package-dir"].items():
        for path in (ROOT / folder).glob("*.py"):
            out[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return out


@dataclass(frozen=True)
class Edge:
    source: str  # module names
    target: str
    line: int


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest product module a dotted name is, or is inside of."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in modules else None


def _targets(node: ast.AST, here: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = here.split(".") if is_package else here.split(".")[:-1]
            parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join([*parts, *([node.module] if node.module else [])])
        # `from agentchat.agent.chat import facade`: the name is a module
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                for a in node.names]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        # A string naming a module (not a package: tracer and logger names are package-like).
        path = modules.get(node.value)
        if path is not None and path.stem != "__init__":
            return [node.value]
    return []


def edges_of(module: str, path: Path, modules: dict[str, Path]) -> Iterable[Edge]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        for name in _targets(node, module, path.stem == "__init__", modules):
            target = _owner(name, modules)
            if target is not None and target != module:
                yield Edge(module, target, getattr(node, "lineno", 0))


@cache
def product_edges() -> tuple[Edge, ...]:
    modules = product_modules()
    return tuple(sorted({e for m, p in modules.items() for e in edges_of(m, p, modules)},
                        key=lambda e: (e.source, e.line, e.target)))


def places(modules: dict[str, Path]) -> dict[str, str]:
    """module -> its file, from the repository's root."""
    return {m: p.relative_to(ROOT).as_posix() for m, p in modules.items()}


def disallowed(edges: Iterable[Edge], place: dict[str, str]) -> list[str]:
    return [f"{place[e.source]}:{e.line} imports {e.target}" for e in edges
            if not allowed(place[e.source], place[e.target])]


def cycles(edges: Iterable[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_every_import_is_allowed_by_the_table() -> None:
    assert disallowed(product_edges(), places(product_modules())) == []


def test_no_modules_import_each_other_in_a_cycle() -> None:
    assert cycles(product_edges()) == []


def test_every_module_has_a_row() -> None:
    assert [p for p in places(product_modules()).values() if unit_of(p) is None] == []


def test_every_entry_of_the_table_names_something_that_exists() -> None:
    names = {u.path for u in UNITS} | {e for u in UNITS for e in u.may_import}
    assert sorted(n for n in names if not (ROOT / n).exists()) == []


def test_the_readme_shows_the_table() -> None:
    assert shown() == render(), (
        "agent/README.md's module map differs from tests/core/import_rules.py: run "
        "`python tests/core/import_rules.py --write`")


# The checks themselves, on a probe module planted beside the real ones.
def _plant(tmp_path: Path, folder: str, source: str) -> tuple[str, list[Edge], dict[str, str]]:
    """The product's edges and one more module, `probe` in `folder` (written under tmp_path)."""
    modules = product_modules()
    place = folder + "probe.py"
    name = "agentchat." + place.removesuffix(".py").replace("/", ".")
    name = name.replace("agentchat.agentchat.", "agentchat.")
    path = tmp_path / "probe.py"
    path.write_text(source)
    edges = [*product_edges(), *edges_of(name, path, modules | {name: path})]
    return name, edges, places(modules) | {name: place}


@pytest.mark.parametrize(("folder", "source", "expected"), [
    ("agent/graph/", "from agentchat.agent.gradio.chat_api import run_chat\n",
     ["agentchat.agent.gradio.chat_api"]),
    ("agent/graph/", "from .. import wiring\n", ["agentchat.agent.wiring"]),
    ("agent/storage/", "from ..audit import trail\n", ["agentchat.agent.audit.trail"]),
    ("agent/graph/", "import importlib\nimportlib.import_module('agentchat.agent.main')\n",
     ["agentchat.agent.main"]),
    ("agent/graph/", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from agentchat.agent.chat.facade import Chat\n", ["agentchat.agent.chat.facade"]),
    ("agentchat/", "def f() -> None:\n    from agentchat.agent.audit import store\n",
     ["agentchat.agent.audit.store"]),
    ("agent/api/", "from agentchat.agent.chat.facade import Chat\n",
     ["agentchat.agent.chat.facade"]),
    # controls: downward, the unit's own modules, the chat domain's door
    ("agent/chat/", "from agentchat.agent.storage import db\nfrom . import events\n",
     []),
    ("agent/api/", "from agentchat.agent import chat, wiring\n", []),
])
def test_the_check_sees_an_upward_import(tmp_path: Path, folder: str, source: str,
                                         expected: list[str]) -> None:
    name, edges, place_of = _plant(tmp_path, folder, source)
    found = disallowed([e for e in edges if e.source == name], place_of)
    assert [f.rsplit(" ", 1)[1] for f in found] == expected


def test_the_check_sees_a_cycle(tmp_path: Path) -> None:
    """A planted storage module that imports runs.py, which (planted too) imports it back."""
    name, edges, _ = _plant(tmp_path, "agent/storage/",
                            "from agentchat.agent.storage import runs\n")
    assert cycles(edges) == []
    edges.append(Edge("agentchat.agent.storage.runs", name, 1))
    assert cycles(edges) == [["agentchat.agent.storage.probe", "agentchat.agent.storage.runs"]]


def test_the_check_sees_a_component_reaching_into_another() -> None:
    assert not allowed("policy/engine.py", "agent/settings.py")
    assert not allowed("agentchat/db.py", "agent/storage/db.py")
    assert not allowed("agent/api/routes/health.py", "agent/chat/facade.py")
    assert allowed("agent/api/routes/health.py", "agent/chat/__init__.py")
    assert allowed("agentchat/cli.py", "policy/cli.py")
    assert not allowed("agentchat/cli.py", "policy/engine.py")
