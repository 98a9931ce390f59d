"""The decision matrix: what a compiled policy and its catalog decide for every principal, tool,
environment and request context (`agentchat policy matrix`; `policy diff` compares two).

Principals are what a user JWT's roles claim can hold: each role alone (every environment),
each `role@env`, and every pair of roles (deny lines override allows, so a pair can decide
differently from either role alone: `editor` + `oncall` in prod). Slots are the catalog's
calls: an env-less tool once, a tool that takes an environment once per environment, and a
two-environment tool (a migration) once per (source, target). Each slot is decided in both
request contexts (trusted, untrusted), with the same `decide()` the sidecar answers with.
"""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from agentchat.catalog import Catalog, Tool
from agentchat.identity import parse_roles

from .engine import ALLOW, CONFIRM, DENIED_BY_RULE, CheckRequest, Decision, decide
from .snapshot import Snapshot

FORMATS = ("md", "csv", "json")
# How wide a decision is, for `policy diff`: deny < card < allow.
RANK = {"deny": 0, CONFIRM: 1, ALLOW: 2}
SHORT = {ALLOW: "allow", CONFIRM: "card", "deny": "deny"}
CONTEXTS = (False, True)  # untrusted?


@dataclass(frozen=True, order=True)
class Principal:
    name: str  # "editor", "editor@prod", "editor+oncall"
    claim: tuple[str, ...]  # the roles claim a token would carry


@dataclass(frozen=True, order=True)
class Slot:
    """One call shape: a tool, its target environment and a migration's source (or None)."""

    tool: str
    env: str | None
    source: str | None = None

    @property
    def where(self) -> str:
        if self.env is None:
            return "-"
        return f"{self.source}→{self.env}" if self.source is not None else self.env


@dataclass(frozen=True)
class Cell:
    principal: str
    roles: tuple[str, ...]
    tool: str
    env: str | None
    source: str | None
    untrusted: bool
    decision: str
    reason: str
    required_role: str | None
    approval: str | None = None  # a card's approval mode (docs/protocol.md §11): self or other

    @property
    def key(self) -> tuple[str, Slot, bool]:
        return (self.principal, Slot(self.tool, self.env, self.source), self.untrusted)

    def short(self) -> str:
        """allow | card | deny → <the role needed> (`deny by rule` when a deny line matched)."""
        if self.decision != "deny":
            text = SHORT.get(self.decision, self.decision)
            return f"{text} ({self.approval})" if self.approval == "other" else text
        head = "deny by rule" if self.reason == DENIED_BY_RULE else "deny"
        if self.reason not in ("role_missing", DENIED_BY_RULE):
            head = f"deny ({self.reason})"
        return f"{head} → {self.required_role or 'no role'}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["roles"] = list(self.roles)
        out["context"] = "untrusted" if self.untrusted else "trusted"
        del out["untrusted"]
        return out


def policy_roles(snapshot: Snapshot) -> list[str]:
    """The roles a policy names, in the order the file first names them."""
    order = list(snapshot.source.role_order)
    return order + sorted(set(snapshot.roles) - set(order))


def principals(roles: Sequence[str], environments: Sequence[str],
               extra: Iterable[Sequence[str]] = ()) -> list[Principal]:
    """Each role, each role@env, every pair of roles, then any extra role sets given."""
    roles = list(dict.fromkeys(roles))
    out = [Principal(r, (r,)) for r in roles]
    out += [Principal(f"{r}@{e}", (f"{r}@{e}",)) for r in roles for e in environments]
    out += [Principal(f"{a}+{b}", (a, b)) for a, b in itertools.combinations(roles, 2)]
    seen = {p.name for p in out}
    for claim in extra:
        name = "+".join(claim)
        if name not in seen:
            seen.add(name)
            out.append(Principal(name, tuple(claim)))
    return out


def tool_slots(tool: Tool, environments: Sequence[str]) -> list[Slot]:
    if tool.environment is None:
        return [Slot(tool.name, None)]
    if tool.environment.source_argument is not None:
        return [Slot(tool.name, t, s) for s in environments for t in environments]
    return [Slot(tool.name, e) for e in environments]


def slots(catalog: Catalog) -> list[Slot]:
    envs = list(catalog.environments)
    return [s for tool in catalog.tools for s in tool_slots(tool, envs)]


def slot_request(snapshot: Snapshot, slot: Slot, untrusted: bool) -> CheckRequest:
    """The call a slot stands for: the environment arguments filled in, nothing else (the
    matrix checks the policy, not a call's schema, as the policy tests do)."""
    args: dict[str, Any] = {}
    tool = snapshot.tools.get(slot.tool)
    if tool is not None and tool.environment is not None:
        if slot.env is not None:
            args[tool.environment.argument] = slot.env
        if tool.environment.source_argument is not None and slot.source is not None:
            args[tool.environment.source_argument] = slot.source
    return CheckRequest("matrix", slot.env, slot.tool, args, untrusted=untrusted)


def principal_cells(snapshot: Snapshot, principal: Principal,
                    where: Sequence[Slot]) -> list[Cell]:
    """One principal's row of the matrix: every slot in both contexts."""
    # Read as a token's claim would be: a role@env the catalog does not know is ignored.
    roles = parse_roles(list(principal.claim), snapshot.environment_set, quiet=True)
    out = []
    for slot in where:
        for untrusted in CONTEXTS:
            got: Decision = decide(snapshot, roles, slot_request(snapshot, slot, untrusted),
                                   check_schema=False)
            out.append(Cell(principal.name, principal.claim, slot.tool, slot.env, slot.source,
                            untrusted, got.decision, got.reason_code, got.required_role,
                            (got.approval or {}).get("mode")))
    return out


def build_matrix(snapshot: Snapshot, who: Sequence[Principal] | None = None,
                 where: Sequence[Slot] | None = None) -> list[Cell]:
    who = who if who is not None else principals(policy_roles(snapshot),
                                                 snapshot.environments)
    where = where if where is not None else slots(snapshot.catalog)
    return [cell for p in who for cell in principal_cells(snapshot, p, where)]


# -- output -------------------------------------------------------------------------------

CSV_FIELDS = ("principal", "roles", "tool", "env", "source", "context", "decision", "reason",
              "required_role", "approval")


def to_json(snapshot: Snapshot, cells: Sequence[Cell]) -> str:
    names = list(dict.fromkeys(c.principal for c in cells))
    claims = {c.principal: list(c.roles) for c in cells}
    return orjson.dumps({
        "policy_dir": str(snapshot.source.folder), "revision": snapshot.revision,
        "environments": list(snapshot.environments),
        "principals": [{"name": n, "roles": claims[n]} for n in names],
        "cells": [c.to_dict() for c in cells],
    }, option=orjson.OPT_INDENT_2).decode()


def to_csv(cells: Sequence[Cell]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for c in cells:
        row = c.to_dict()
        row["roles"] = " ".join(c.roles)
        writer.writerow({k: "" if row[k] is None else row[k] for k in CSV_FIELDS})
    return out.getvalue()


def cell_text(trusted: Cell, untrusted: Cell | None) -> str:
    """One table cell: the trusted decision, and the untrusted one when it differs."""
    text = trusted.short()
    if untrusted is not None and untrusted.short() != text:
        text += f"; untrusted: {untrusted.short()}"
    return text


def to_markdown(snapshot: Snapshot, cells: Sequence[Cell]) -> str:
    """One table per principal: a row per tool (a migration: per source), a column per
    environment (`-` for env-less tools)."""
    by_key = {c.key: c for c in cells}
    columns = ["-", *snapshot.environments]
    lines = [f"# Policy matrix: {snapshot.source.folder} (revision {snapshot.revision})", "",
             "`allow` runs, `card` asks first (`card (other)`: someone else approves, "
             "approvals.yaml), `deny → R` names the least role that would "
             "allow it (`deny by rule`: a deny line matched). `untrusted:` is the answer once "
             "ss-tools output is in the turn, where it differs.", ""]
    order = list(dict.fromkeys(c.principal for c in cells))
    for name in order:
        lines += [f"## {name}", "", "| tool | " + " | ".join(columns) + " |",
                  "|---" * (len(columns) + 1) + "|"]
        rows: dict[tuple[str, str | None], dict[str, str]] = {}
        for c in cells:
            if c.principal != name or c.untrusted:
                continue
            row = rows.setdefault((c.tool, c.source), {})
            other = by_key.get((name, Slot(c.tool, c.env, c.source), True))
            row[c.env or "-"] = cell_text(c, other)
        for (tool, source), row in rows.items():
            label = f"{tool} from {source}" if source is not None else tool
            lines.append(f"| {label} | " + " | ".join(row.get(col, "") for col in columns)
                         + " |")
        lines.append("")
    return "\n".join(lines)


def render(snapshot: Snapshot, cells: Sequence[Cell], fmt: str) -> str:
    if fmt == "json":
        return to_json(snapshot, cells)
    if fmt == "csv":
        return to_csv(cells)
    return to_markdown(snapshot, cells)
