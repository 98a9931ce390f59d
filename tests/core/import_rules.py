"""The one table of allowed imports between the product's layers and components, as data.

`tests/core/test_layers.py` checks every import of the product against it, and
`agent/README.md` ("Module map") shows it rendered: the test fails when the README's copy
differs; `python tests/core/import_rules.py` prints the text to paste, `--write` pastes it.

A row names a unit: a folder (everything in it that no deeper row claims) or one file. Its
`may_import` entries name units the same way, or one file of a unit (the chat domain's door,
`agent/chat/__init__.py`, is a file of `agent/chat/`). A module may always import its own
unit; cycles inside a unit are caught separately (test_layers.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Unit:
    path: str          # "agent/chat/" (a folder) or "agent/main.py" (a file)
    floor: str         # where it stands: entry, adapter, wiring, domain, below, storage, shared
    holds: str         # what it holds, in a line
    may_import: tuple[str, ...]


# What every agent layer may use.
AGENT_SHARED = ("agent/settings.py", "agent/metrics.py", "agent/csp.py", "agentchat/")

UNITS: tuple[Unit, ...] = (
    Unit("agent/cli.py", "entry",
         "`agentchat serve`, `agentchat audit` (export, verify, prune) and `agentchat mcp` "
         "(config; pin and check, the gate's upstream pins)",
         ("agent/main.py", "agent/audit/", "agent/gate/", *AGENT_SHARED)),
    Unit("agent/main.py", "entry",
         "`create_app`: FastAPI, the REST router, the Gradio adapter and the MCP endpoint "
         "mounted, the error handlers (storage outages among them), the body limit",
         ("agent/api/", "agent/gradio/", "agent/mcp/", "agent/wiring.py", "agent/storage/",
          *AGENT_SHARED)),
    Unit("agent/api/", "adapter",
         "the REST adapter: routes, their narrow dependencies, bodies, cursors, error docs; "
         "of the domain, only its door",
         ("agent/chat/__init__.py", "agent/wiring.py", *AGENT_SHARED)),
    Unit("agent/gradio/", "adapter",
         "the Gradio adapter: the Blocks (`/chat`, the built-in page), the seven inputs "
         "parsed, the `/chat` stream, the guards on Gradio's own routes (uploads and their "
         "quotas, sessions, the page's headers); of the domain, only its door",
         ("agent/wiring.py", "agent/chat/__init__.py", *AGENT_SHARED)),
    Unit("agent/mcp/", "adapter",
         "the MCP adapter: `/api/agent/mcp` on the SDK's stateless transport, its guard "
         "(Origin, the bearer for this resource only, calls a minute, the token exchange), "
         "the RFC 9728 metadata, tools/list and tools/call; of the domain, only its door",
         ("agent/wiring.py", "agent/chat/__init__.py", *AGENT_SHARED)),
    Unit("agent/wiring.py", "wiring",
         "`build_services`: the pool, checkpointer, graph, clients, the gate, the chat domain "
         "and its approvals, built once",
         ("agent/chat/", "agent/graph/", "agent/gate/", "agent/selection/", "agent/audit/",
          "agent/storage/", *AGENT_SHARED)),
    Unit("agent/chat/", "domain",
         "the chat domain behind its doors, which its `__init__.py` exports: `Chat` "
         "(`chat/facade.py`: submit, join, stop), `Approvals` (`chat/approvals.py` decides "
         "an approver's answer) and `GatedCalls` (`chat/gated_calls.py`: MCP calls through "
         "the gate); admission, attachments, the kinds of submit, the lease, the "
         "turn as a task, its run, takeover, the sweeper, the approvals' notices",
         ("agent/graph/", "agent/gate/", "agent/selection/", "agent/audit/", "agent/storage/",
          *AGENT_SHARED)),
    Unit("agent/graph/", "below",
         "the LangGraph graph: state, nodes, verdicts and cards, the prompt, the checkpointer, "
         "the model, the durable plans, taint; `offline/` the offline planner",
         ("agent/gate/", "agent/audit/", "agent/storage/", *AGENT_SHARED)),
    Unit("agent/gate/", "below",
         "the gate every call goes through, whoever asks: the checks (schema, the sidecar, "
         "our own card rules, grants), the execution (the tool runtime, fenced; other teams' "
         "MCP tools: their calls, sessions and our credentials for them; the policy client; "
         "the service token), the audit rows with their channel",
         ("agent/audit/", "agent/storage/", *AGENT_SHARED)),
    Unit("agent/audit/", "below",
         "the audit trail of risky calls: rows hash-chained at insert, the joined records, "
         "export and verify, retention",
         ("agent/storage/", *AGENT_SHARED)),
    Unit("agent/selection/", "below",
         "which tools a message gets (`get_tools_for_query`), and the turn's prefetch",
         AGENT_SHARED),
    Unit("agent/storage/", "storage",
         "our tables: conversations, turns, messages, calls, cards, leases, runs and events, "
         "fencing, sealed tokens, approvals, grants, the outbox; a submit's rows in one "
         "transaction",
         AGENT_SHARED),
    Unit("agent/settings.py", "shared",
         "`AgentSettings` and `SelectionSettings`", ("agentchat/",)),
    Unit("agent/metrics.py", "shared", "the Prometheus metrics (one catalogue)", ("agentchat/",)),
    Unit("agent/csp.py", "shared", "the Content-Security-Policy both pages use", ("agentchat/",)),
    Unit("agent/", "component", "the agent service: the rows above", ("agentchat/",)),
    Unit("policy/", "component", "the policy sidecar (policy/README.md)", ("agentchat/",)),
    Unit("operator/", "component", "the kopf operator (operator/README.md)", ("agentchat/",)),
    Unit("sandbox/", "component", "the stand-in ss-tools API (sandbox/README.md)",
         ("agentchat/",)),
    Unit("agentchat/cli.py", "entry",
         "the `agentchat` command: loads each component's `cli.py` by name",
         ("agentchat/", "agent/cli.py", "policy/cli.py", "operator/cli.py", "sandbox/cli.py")),
    Unit("agentchat/", "shared",
         "what every component shares: settings base, database and migrations, identity, keys, "
         "the catalog, the request builder, errors, the demo",
         ("agentchat/",)),
)

# Edges the table does not allow yet: (a file, an entry as in `may_import`) -> what removes
# it. Tests only: product code never names these. None today.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def unit_of(path: str) -> Unit | None:
    """The row that claims a file (a path from the repository's root): the file's own row,
    else the deepest folder row above it."""
    best: Unit | None = None
    for u in UNITS:
        if u.path == path:
            return u
        if u.path.endswith("/") and path.startswith(u.path) and (
                best is None or len(u.path) > len(best.path)):
            best = u
    return best


def allowed(source: str, target: str) -> bool:
    """May the file `source` import the file `target` (both paths from the root)?"""
    here, there = unit_of(source), unit_of(target)
    if here is None or there is None:
        return False
    if here is there:
        return True
    entries = (*here.may_import, *(e for s, e in EXCEPTIONS if s == source))
    return any(e == target or e == there.path for e in entries)


def render() -> str:
    """The table as agent/README.md shows it."""
    lines = ["| where | floor | what it holds | may import |", "|---|---|---|---|"]
    for u in UNITS:
        names = ", ".join(f"`{e}`" for e in u.may_import)
        lines.append(f"| `{u.path}` | {u.floor} | {u.holds} | {names} |")
    return "\n".join(lines) + "\n"


README = Path(__file__).resolve().parents[2] / "agent" / "README.md"
START, END = "<!-- module map: -->\n", "<!-- end of module map -->"


def shown() -> str:
    """The table as agent/README.md shows it now."""
    return README.read_text().split(START, 1)[-1].split(END, 1)[0]


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        README.write_text(README.read_text().replace(START + shown() + END,
                                                     START + render() + END))
    else:
        print(render(), end="")
