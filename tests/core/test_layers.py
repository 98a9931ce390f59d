"""Imports point down the agent's layers (docs/architecture.md, "One
turn, through the modules"; agent/README.md, "Module map"):

    main, cli                   the entry points
    api, gradio                 the adapters (REST; Gradio's /chat, page and uploads), never
                                each other
    wiring                      builds everything once
    chat                        the chat domain (its door: chat/facade.py)
    graph                       the LangGraph agent (it writes the audit trail)
    audit, selection            the audit trail; which tools a message gets
    storage                     our tables
    settings, metrics,          what every layer may use (settings extends the selection's
    csp, agentchat.*            settings class, its one import upward)

Read from the source with `ast` (no import runs), so a new module is checked the moment it
exists; an import inside a function counts like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "agent"

RANK = {"storage": 1, "audit": 2, "selection": 2, "graph": 3, "chat": 4, "wiring": 5,
        "api": 6, "gradio": 6, "main": 7, "cli": 8}
BASE = {"settings", "metrics", "csp", "__init__"}
# The one sanctioned upward import: AgentSettings extends SelectionSettings.
ALLOWED = {("settings", "selection")}


def layer_of_module(name: str) -> str | None:
    """`agentchat.agent.chat.facade` -> `chat`; None outside the agent."""
    parts = name.split(".")
    if parts[:2] != ["agentchat", "agent"] or len(parts) < 3:
        return None
    return parts[2]


def layer_of_file(path: Path) -> str:
    rel = path.relative_to(AGENT).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            # `from agentchat.agent import heap`: the names are modules
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                    if node.module == "agentchat.agent"]
    return out


def violations_in(path: Path, here: str) -> list[str]:
    found = []
    for line, module in imports(path):
        there = layer_of_module(module)
        if there is None or there == here or there in BASE or (here, there) in ALLOWED:
            continue
        if here in BASE:
            found.append(f"{path.name}:{line} {here} (shared) imports {there}")
        elif RANK.get(there, 0) >= RANK.get(here, 0):
            found.append(f"{path.name}:{line} {here} imports {there}")
    return found


def violations() -> list[str]:
    return [f"{p.parent.relative_to(ROOT)}/{v}" for p in sorted(AGENT.rglob("*.py"))
            for v in violations_in(p, layer_of_file(p))]


def test_every_agent_import_points_down_the_layers() -> None:
    assert violations() == []


def test_every_agent_package_has_a_layer() -> None:
    packages = {p.name for p in AGENT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in AGENT.glob("*.py")}
    assert packages | modules <= set(RANK) | BASE


@pytest.mark.parametrize(("source", "expected"), [
    ("from agentchat.agent.gradio.chat_api import run_chat\n", ["chat imports gradio"]),
    ("from agentchat.agent import wiring\n", ["chat imports wiring"]),
    ("import agentchat.agent.storage.db\n", []),
])
def test_the_check_sees_an_upward_import(tmp_path: Path, source: str,
                                         expected: list[str]) -> None:
    """The rule itself, on a chat module with one import (control: a downward one passes)."""
    module = tmp_path / "probe.py"
    module.write_text(source)
    assert [v.split(" ", 1)[1] for v in violations_in(module, "chat")] == expected
