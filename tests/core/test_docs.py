"""The docs and the code say the same thing.

- The README: the two-command quick start; only the shared settings, and a link to each
  component's settings.
- Every setting of every component (derived from the settings classes, by the naming
  convention) is in its component's README table, its tuning in the tuning table beside it, and
  every name in those tables is such a setting; the agent's own table has at most 40 rows.
- docs/protocol.md: the event types and their metadata fields (derived from the event dicts
  the agent's code builds), the error codes (`ErrorCode`, with `ERROR_TABLE`'s HTTP status and
  retryability) and the REST routes (the agent app's routes, from `create_app` without starting
  it) are exactly what the code has, both ways.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from agentchat.agent.settings import AgentSettings
from agentchat.errors import ERROR_TABLE, ErrorCode
from agentchat.operator.settings import OperatorSettings
from agentchat.policy.settings import PolicySettings
from agentchat.sandbox.settings import SandboxSettings
from agentchat.settings import TUNING, SharedSettings, component_of, env_names
from testkit.support import ROOT

README = (ROOT / "README.md").read_text()
PROTOCOL = (ROOT / "docs" / "protocol.md").read_text()

# Where each class's own settings are listed: (class, file, heading of the table's section;
# None for the whole file). "<component> tuning" is the component's nested tuning.
SETTINGS_TABLES: dict[str, tuple[type[BaseSettings], Path, str | None]] = {
    "shared": (SharedSettings, ROOT / "README.md", "## Settings"),
    "agent": (AgentSettings, ROOT / "agent" / "README_settings.md", "## Settings"),
    "agent tuning": (AgentSettings, ROOT / "agent" / "README_settings.md", "## Tuning"),
    "policy": (PolicySettings, ROOT / "policy" / "README.md", "## Settings"),
    "policy tuning": (PolicySettings, ROOT / "policy" / "README.md", "## Tuning"),
    "operator": (OperatorSettings, ROOT / "operator" / "README.md", "## Settings"),
    "operator tuning": (OperatorSettings, ROOT / "operator" / "README.md", "## Tuning"),
    "sandbox": (SandboxSettings, ROOT / "sandbox" / "README.md", "## Settings"),
}
AGENT_TABLE_MAX_ROWS = 40
NAME = re.compile(r"`((?:AGENTCHAT_[A-Z0-9_]+)|DATABASE_URL)`")


# -- helpers -------------------------------------------------------------------------------

def section(text: str, heading: str) -> str:
    """From `heading` to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n") if heading + "\n" in text else text.index(heading)
    rest = text[start + len(heading):]
    m = re.search(rf"\n#{{1,{len(level)}}} ", rest)
    return rest[: m.start()] if m else rest


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row (header and separator rows dropped)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|") or re.fullmatch(r"\|[\s:|-]+\|", line):
            continue
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return [r for r in rows if r and r[0] not in ("variable", "#", "code", "method",
                                                  "`metadata.type`")]


def documented_settings(path: Path, heading: str | None) -> set[str]:
    text = path.read_text()
    if heading is not None:
        text = section(text, heading)
    return {n for row in table_rows(text) for n in NAME.findall(row[0])}


def own_settings(key: str, cls: type[BaseSettings]) -> set[str]:
    names = env_names(cls)
    if key == "shared":
        return set(names.values())
    component, _, part = key.partition(" ")
    if part == "tuning":
        return {n for f, n in names.items() if f.startswith(TUNING + ".")}
    return {n for f, n in names.items() if "." not in f and component_of(cls, f) == component}


# -- README --------------------------------------------------------------------------------

def test_quick_start_is_exactly_two_commands() -> None:
    quick = section(README, "## Quick start")
    block = re.search(r"```sh\n(.*?)```", quick, re.S)
    assert block and block.group(1).split("\n")[:-1] == ["make demo", "make test"]


@pytest.mark.parametrize("key", sorted(SETTINGS_TABLES))
def test_every_setting_is_in_its_components_table_and_nothing_else(key: str) -> None:
    cls, path, heading = SETTINGS_TABLES[key]
    code, docs = own_settings(key, cls), documented_settings(path, heading)
    where = path.relative_to(ROOT)
    assert not code - docs, f"{where} lacks {sorted(code - docs)}"
    assert not docs - code, f"{where} lists {sorted(docs - code)}, which {cls.__name__} lacks"


def test_the_agents_own_table_has_at_most_40_rows() -> None:
    rows = table_rows(section((ROOT / "agent" / "README_settings.md").read_text(), "## Settings"))
    assert 0 < len(rows) <= AGENT_TABLE_MAX_ROWS, len(rows)


def test_the_readme_links_every_components_settings() -> None:
    settings = section(README, "## Settings")
    for key, (_, path, _) in SETTINGS_TABLES.items():
        if key != "shared" and " " not in key:
            assert f"({path.relative_to(ROOT)}" in settings, f"no link to {path}"


def test_readmes_and_comments_cite_the_contract_inside_the_repository() -> None:
    """No `../shared/PROTOCOL.md` nor bare `PROTOCOL §N`: a clone has docs/protocol.md."""
    bad = re.compile(r"shared/PROTOCOL|(?<!protocol\.md )\bPROTOCOL(?:\.md)? ?§")
    found = []
    for path in [*ROOT.glob("*.md"), *ROOT.glob("*/README*.md"), *ROOT.glob("*/*/README*.md"),
                 *ROOT.glob("docs/*.md"), *ROOT.glob("agentchat/**/*.py"),
                 *ROOT.glob("agent/**/*.py"), *ROOT.glob("policy/**/*.py"),
                 *ROOT.glob("operator/**/*.py"), *ROOT.glob("sandbox/**/*.py"),
                 *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py")]:
        if ".venv" in path.parts or "node_modules" in path.parts or path == Path(__file__):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if bad.search(line):
                found.append(f"{path.relative_to(ROOT)}:{i}")
    assert not found, found



# Product code and the Markdown docs name what they rely on by the repository's docs
# (docs/protocol.md §11), never by a tracker's number ("issue 34") that a clone cannot open.
# bench/HISTORY.md is a dated journal: its entries keep the words of their day.
PRODUCT = ("agent", "agentchat", "policy", "operator", "sandbox", "web/src", "charts")
CODE_SUFFIXES = {".py", ".ts", ".svelte", ".mjs", ".js", ".yaml", ".yml", ".tpl", ".json", ".toml"}
TRACKER = re.compile(r"\bissues?\s+(?:#\s*)?\d+|\bissues?\s*#\d+", re.I)


def tracker_references(text: str) -> list[str]:
    return [m.group(0) for m in TRACKER.finditer(text)]


def test_product_code_cites_docs_not_issue_numbers() -> None:
    found = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*")):
            if (path.suffix not in CODE_SUFFIXES or not path.is_file()
                    or {"node_modules", "__pycache__", "build"} & set(path.parts)):
                continue
            for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if tracker_references(line):
                    found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:80]}")
    assert not found, "say what it means or cite docs/ instead:\n" + "\n".join(found)


def markdown_docs() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.md")
                  if not any(part.startswith(".") or part == "node_modules"
                             for part in p.relative_to(ROOT).parts)
                  and p != ROOT / "bench" / "HISTORY.md")


def test_markdown_docs_cite_sections_not_issue_numbers() -> None:
    docs = markdown_docs()
    assert ROOT / "docs" / "protocol.md" in docs and ROOT / "agent" / "README.md" in docs
    found = [f"{path.relative_to(ROOT)}:{i}: {line.strip()[:80]}"
             for path in docs for i, line in enumerate(path.read_text().splitlines(), 1)
             if tracker_references(line)]
    assert not found, "point at the docs section meant, or drop it:\n" + "\n".join(found)


@pytest.mark.parametrize(("text", "expected"), [
    ("a grant (issue 34) and Issue 35's fork", ["issue 34", "Issue 35"]),
    ("issues 21 and 32; see issue #7", ["issues 21", "issue #7"]),
    ("the cursor this list issued 3 times; docs/protocol.md §11", []),
])
def test_the_tracker_check_finds_issue_numbers(text: str, expected: list[str]) -> None:
    assert tracker_references(text) == expected


# -- protocol: events ----------------------------------------------------------------------

# Dicts with a "type" key in the agent's code that are not events.
NOT_EVENTS = {"__end__", "tool_call", "tool_call_chunk", "function", "http.request"}
EVENT_MODULES = [*sorted((ROOT / "agent" / "chat").glob("*.py")),
                 *sorted((ROOT / "agent" / "graph").glob("*.py")),
                 *sorted((ROOT / "agent" / "gate").glob("*.py"))]


def events_in_code() -> dict[str, set[str]]:
    """metadata.type -> fields, from every dict literal with a constant "type" the chat and
    graph modules and the gate build, plus what `to_message` adds to all of them."""
    found: dict[str, set[str]] = {}
    common: set[str] = set()
    for path in EVENT_MODULES:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys
                        if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                kind = next((v.value for k, v in zip(node.keys, node.values, strict=True)
                             if isinstance(k, ast.Constant) and k.value == "type"
                             and isinstance(v, ast.Constant)), None)
                if isinstance(kind, str) and kind not in NOT_EVENTS:
                    found.setdefault(kind, set()).update(keys - {"type", "content"})
            # events.to_message: meta.update(seq=..., conversation_id=..., run_id=...)
            if (path.name == "events.py" and isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "meta"):
                common |= {k.arg for k in node.keywords if k.arg}
    assert common == {"seq", "conversation_id", "run_id"}, common
    return found


def events_in_docs() -> dict[str, set[str]]:
    rows = table_rows(section(PROTOCOL, "## 2. Events"))
    out = {}
    for row in rows:
        kind = "final" if row[0].startswith("none") else row[0].strip("`")
        out[kind] = set(re.findall(r"`([a-z_]+)`", row[1]))
    return out


def test_the_common_event_fields_are_documented() -> None:
    intro = section(PROTOCOL, "## 2. Events").split("|", 1)[0]
    assert "`seq`" in intro and "`conversation_id`" in intro and "`run_id`" in intro


def test_every_event_type_and_field_is_documented_and_nothing_else() -> None:
    code, docs = events_in_code(), events_in_docs()
    assert set(code) >= {"stream_token", "tool_start", "tool_end", "tool_retry", "tool_error",
                         "tool_timeout", "confirm_required", "confirm_resolved", "error",
                         "final"}, sorted(code)
    assert set(code) == set(docs), (f"in code only: {sorted(set(code) - set(docs))}; "
                                    f"in docs only: {sorted(set(docs) - set(code))}")
    for kind in code:
        assert code[kind] == docs[kind], (
            f"{kind}: in code only {sorted(code[kind] - docs[kind])}, "
            f"in docs only {sorted(docs[kind] - code[kind])}")


# -- protocol: error codes -----------------------------------------------------------------

def test_every_error_code_is_documented_with_its_status_and_retryability() -> None:
    rows = {r[0].strip("`"): r for r in table_rows(section(PROTOCOL, "## 5. Error codes"))}
    assert set(rows) == {str(c) for c in ErrorCode}, (
        f"in code only: {sorted({str(c) for c in ErrorCode} - set(rows))}; "
        f"in docs only: {sorted(set(rows) - {str(c) for c in ErrorCode})}")
    for code, (status, retryable) in ERROR_TABLE.items():
        row = rows[str(code)]
        assert row[1] == (str(status) if status is not None else "—"), (code, row[1])
        if code is not ErrorCode.TOOL_FAILURE:  # "per call": each tool_error says
            assert row[2] == ("yes" if retryable else "no"), (code, row[2])


def test_the_run_codes_are_explained_where_runs_are() -> None:
    runs = section(PROTOCOL, "### Runs")
    for code in ("NO_RUN", "JOIN_EXPIRED", "RUN_LOST", "AGENT_SATURATED"):
        assert f"`{code}`" in runs and code in {str(c) for c in ErrorCode}


# -- protocol: REST ------------------------------------------------------------------------

def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def _router_routes(routes: list[Any]) -> set[tuple[str, str]]:
    """(method, path) of every API route under these routes, hidden ones included. FastAPI
    0.165 keeps an included router as one opaque entry that lists its routes, prefix applied,
    as `effective_route_contexts()`; older versions flattened them into APIRoutes."""
    from fastapi.routing import APIRoute

    found: set[tuple[str, str]] = set()
    for r in routes:
        if isinstance(r, APIRoute):
            found |= {(m, _shape(r.path)) for m in r.methods if m != "HEAD"}
        elif hasattr(r, "effective_route_contexts"):
            found |= {(m, _shape(c.path)) for c in r.effective_route_contexts()
                      for m in (c.methods or ()) if m != "HEAD"}
    return found


def rest_in_code() -> set[tuple[str, str]]:
    """The agent app's OpenAPI (built from `create_app`, never started), plus any route the
    routers hide from the schema."""
    from agentchat.agent.api.main import api_router
    from agentchat.agent.main import create_app

    app = create_app(AgentSettings(mode="dev"))  # routes only: the lifespan never runs
    schema = {(m.upper(), _shape(path)) for path, ops in app.openapi()["paths"].items()
              for m in ops}
    # The app's own routes too: the MCP adapter's metadata route is on the app (agent/mcp/).
    walked = _router_routes([*api_router.routes, *app.routes])
    # The walk must see at least what the schema shows, or it could not see a hidden route.
    assert schema and walked >= schema, (
        f"the router walk misses schema routes: {sorted(schema - walked)}")
    # Under the Gradio mount: /chat's queue routes in Gradio's wire (§1), not REST.
    gradio = AgentSettings(mode="dev").tuning.mount_path.rstrip("/") + "/"
    return {(m, p) for m, p in schema | walked if not p.startswith(gradio)}


def test_every_rest_route_is_documented_and_nothing_else() -> None:
    rows = table_rows(section(PROTOCOL, "## 9. REST (agent service)"))
    docs = {(r[0], _shape(r[1].strip("`"))) for r in rows}
    code = rest_in_code()
    assert code == docs, (f"in code only: {sorted(code - docs)}; "
                          f"in docs only: {sorted(docs - code)}")
