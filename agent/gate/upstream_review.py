"""A platform engineer's side of the pins: `agentchat mcp pin SERVER` drafts catalog entries
from what a server serves now, `agentchat mcp check` shows how what it serves differs from
what the catalog pinned (agent/cli.py runs them; docs/upstreams.md shows the workflow).

A draft is ours to finish: its name is namespaced (`server__tool`), its schema the server's
`inputSchema` less its words (descriptions, titles, examples: the model reads a schema; we
validate calls against it before sending), its risk read unless the
server's own hints say otherwise (hints only: the entry's risk is ours), and our words are
left empty, so the catalog refuses the entry until someone writes them. The server's
description is a YAML comment for that person: the model never reads it.

A check reads every URL of every upstream the catalog's tools name, as the agent does
(agent/gate/upstream_served.py), and prints each drift as a unified diff of the pinned
definition (the entry's `definition`, else only its pin) and the served one. Exit codes, as
`agentchat policy diff`'s: 0 nothing drifted, 1 a drift, 2 an upstream could not be read
(the drifts found elsewhere are printed all the same).
"""

from __future__ import annotations

import asyncio
import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from agentchat.agent.gate.upstream_served import (
    Drift,
    Opener,
    Unreachable,
    drifts,
    list_served,
    upstream_tools,
)
from agentchat.catalog import Catalog
from agentchat.catalog_upstreams import SEPARATOR, definition_pin
from agentchat.words import clean_text

ENV_ARGUMENTS = ("environment", "env", "target_environment")
OURS = {"ru": "", "en": ""}  # our words: empty, so the catalog refuses the entry until written


def draft_risk(definition: dict[str, Any]) -> str:
    """Read, unless the server's hints mark the tool destructive or not read-only."""
    hints = definition.get("annotations") or {}
    if hints.get("destructiveHint") is True:
        return "destructive"
    if hints.get("readOnlyHint") is False:
        return "write"
    return "read"


def catalog_name(server: str, tool: str) -> str:
    """`server__tool`, within the catalog's name pattern (lower case, `[a-z0-9_]`, ≤ 64)."""
    rest = re.sub(r"[^a-z0-9_]", "_", tool.lower()).strip("_") or "tool"
    return (server + SEPARATOR + rest)[:64]


def draft_entry(catalog: Catalog, server: str, definition: dict[str, Any]) -> dict[str, Any]:
    """One catalog entry for a served tool: the schema, risk and pin filled, our words empty."""
    # dict(), not a literal with "type": the event docs' test reads those as stream events.
    args = words_out(json.loads(json.dumps(definition.get("inputSchema") or
                                           dict(type="object"))))
    args.setdefault("type", "object")
    risk = draft_risk(definition)
    entry: dict[str, Any] = {
        "name": catalog_name(server, definition["name"]),
        "title": dict(OURS), "description": dict(OURS), "prompt": dict(OURS),
        "keywords": {"ru": [], "en": []}, "args": args}
    if risk != "read" or len(catalog.upstreams[server].url) > 1:
        # Our argument, never sent: it picks the upstream's URL (and a write's environment).
        props = args.setdefault("properties", {})
        arg = next((a for a in ENV_ARGUMENTS if a not in props), "agentchat_environment")
        props[arg] = dict(type="string", enum=list(catalog.environments))
        args["required"] = [*args.get("required", []), arg]
        entry["environment"] = {"argument": arg}
    entry["risk"] = risk
    entry["upstream"] = {"server": server, "tool": definition["name"],
                         "pin": definition_pin(definition), "definition": definition}
    return entry


# JSON Schema keywords that hold text for a reader: the model reads an entry's `args`, so a
# draft keeps none of the server's (its words could carry instructions); ours may be added.
WORDS = frozenset({"description", "title", "examples", "$comment"})
# Keywords whose value maps names (of properties, definitions) to schemas: a property called
# `description` is an argument, not words.
NAMED = frozenset({"properties", "patternProperties", "$defs", "definitions",
                   "dependentSchemas"})


def words_out(schema: Any) -> Any:
    """A schema without the server's words, its structure (types, bounds, enums) intact."""
    if isinstance(schema, list):
        return [words_out(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in WORDS:
            continue
        if key in NAMED and isinstance(value, dict):
            out[key] = {name: words_out(sub) for name, sub in value.items()}
        else:
            out[key] = words_out(value)
    return out


def _comment(text: str, width: int = 96) -> list[str]:
    """The server's words as comment lines: control characters out, each line `#`-led."""
    out = []
    for line in clean_text(text).splitlines() or [""]:
        while len(line) > width:
            out.append("#   " + line[:width])
            line = line[width:]
        out.append("#   " + line)
    return out


def draft_yaml(catalog: Catalog, server: str, served: dict[str, dict[str, Any]]) -> str:
    """The draft entries, one YAML list, each with its server's description as a comment."""
    lines = [f"# Draft catalog entries for upstream {server!r}: write our words (title,",
             "# description, keywords, prompt; examples if you like), decide the risk (the",
             "# server's hints only suggest it) and keep only the tools you want offered.",
             "tools:"]
    for name in sorted(served):
        definition = served[name]
        lines.append(f"  # {server} serves {name!r}; its own description (never shown to "
                     "the model):")
        lines += ["  " + c for c in _comment(str(definition.get("description") or "(none)"))]
        text = yaml.safe_dump([draft_entry(catalog, server, definition)], allow_unicode=True,
                              sort_keys=False, width=100)
        lines += ["  " + line for line in text.splitlines()]
    return "\n".join(lines) + "\n"


async def pin_drafts(catalog: Catalog, opener: Opener, server: str,
                     env: str | None) -> tuple[int, str]:
    """`agentchat mcp pin`: (exit code, what to print: the YAML, or why not)."""
    upstream = catalog.upstreams.get(server)
    if upstream is None:
        return 2, f"the catalog has no upstream {server!r} (it has: " \
                  f"{', '.join(sorted(catalog.upstreams)) or 'none'})"
    if env is None and len(upstream.url) > 1:
        return 2, f"upstream {server!r} has a URL per environment: give --env " \
                  f"({', '.join(sorted(upstream.url))})"
    env = env or next(iter(upstream.url))
    if env not in upstream.url:
        return 2, f"upstream {server!r} has no URL for {env!r}"
    try:
        served = await list_served(opener, server, env, upstream.timeout_s)
    except Unreachable as e:
        return 2, f"{server} ({env}): {e}"
    return 0, draft_yaml(catalog, server, served)


@dataclass
class CheckReport:
    drifts: list[Drift] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)  # "server (env): why"
    checked: int = 0  # catalog tools compared

    @property
    def exit_code(self) -> int:
        return 2 if self.unreachable else 1 if self.drifts else 0


async def check_pins(catalog: Catalog, opener: Opener) -> CheckReport:
    """Every URL of every upstream the catalog's tools name, read and compared."""
    report = CheckReport()
    by_server = upstream_tools(catalog)
    jobs = [(server, env) for server in by_server for env in sorted(catalog.upstreams[server].url)]
    lists = await asyncio.gather(*(list_served(opener, s, e, catalog.upstreams[s].timeout_s)
                                   for s, e in jobs), return_exceptions=True)
    for (server, env), served in zip(jobs, lists, strict=True):
        if isinstance(served, Unreachable):
            report.unreachable.append(f"{server} ({env}): {served}")
        elif isinstance(served, BaseException):
            raise served
        else:
            report.checked += len(by_server[server])
            report.drifts += drifts(by_server[server], env, served)
    return report


def _pretty(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def drift_diff(catalog: Catalog, drift: Drift, envs: list[str]) -> str:
    """The pinned definition (or just its pin) against the served one (or its absence)."""
    tool = catalog.get(drift.name)
    pinned = tool.upstream.definition if tool is not None and tool.upstream else None
    old = _pretty(pinned) if pinned is not None else [
        f"(the entry keeps no definition, only its pin {drift.pin})"]
    new = _pretty(drift.definition) if drift.definition is not None else [
        f"(the server lists no tool named {drift.tool!r})"]
    where = ", ".join(envs)
    lines = difflib.unified_diff(
        old, new, fromfile=f"{drift.name} pinned {drift.pin}",
        tofile=f"{drift.name} served in {where} {drift.observed or '(gone)'}", lineterm="")
    return "\n".join(lines) + "\n"


def check_text(catalog: Catalog, report: CheckReport) -> str:
    """The diffs, one per drifted tool and served definition, then a summary line."""
    grouped: dict[tuple[str, str | None], list[Drift]] = {}
    for d in report.drifts:
        grouped.setdefault((d.name, d.observed), []).append(d)
    parts = [drift_diff(catalog, ds[0], [d.env for d in ds]) for ds in grouped.values()]
    parts += [f"unreachable: {u}\n" for u in report.unreachable]
    names = sorted({d.name for d in report.drifts})
    parts.append(f"{report.checked} pinned tool checks, {len(names)} drifted"
                 + (f" ({', '.join(names)})" if names else "")
                 + (f", {len(report.unreachable)} URL(s) unreachable" if report.unreachable
                    else "") + "\n")
    return "".join(parts)
