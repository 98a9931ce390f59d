"""`agentchat policy diff`: which decisions a policy change changes, for code review and CI.

Both sides' matrices are built over the same principals and calls (the union of the roles
and catalog entries the two sides name: a role or tool only one side knows is denied on the
other), and every cell whose answer differs is reported, grouped:
- wider: deny → card or allow, card → allow;
- narrower: the reverse;
- required role: still denied, but another role is now the least that would allow it;
- reason: the same decision for another reason (e.g. a card now asked for by a context rule).
Then the shipped policy tests (both folders' `tests/*.yaml`) whose outcome differs between
the two policies. Exit codes: 0 nothing changes, 1 something does, 2 a side does not load.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentchat.errors import LocalError

from .cases import Outcome, TestReport, case_outcomes, run_policy_tests
from .matrix import RANK, Cell, Principal, Slot, policy_roles, principal_cells, principals, slots
from .snapshot import Snapshot

GROUPS = ("wider", "narrower", "required_role", "approval", "reason")
GROUP_TITLES = {"wider": "Wider (more is allowed)", "narrower": "Narrower (less is allowed)",
                "required_role": "Changed required role (still denied)",
                "approval": "Same card, another approval mode (self / other)",
                "reason": "Same decision, another reason"}


class GitError(LocalError):
    """A --git revision or path cannot be read."""


@dataclass(frozen=True)
class Change:
    kind: str  # one of GROUPS
    old: Cell
    new: Cell

    def to_dict(self) -> dict[str, Any]:
        c = self.new
        return {"kind": self.kind, "principal": c.principal, "roles": list(c.roles),
                "tool": c.tool, "env": c.env, "source": c.source,
                "context": "untrusted" if c.untrusted else "trusted",
                "old": {"decision": self.old.decision, "reason": self.old.reason,
                        "required_role": self.old.required_role,
                        "approval": self.old.approval},
                "new": {"decision": c.decision, "reason": c.reason,
                        "required_role": c.required_role, "approval": c.approval}}


@dataclass(frozen=True)
class TestChange:
    outcome_old: Outcome
    outcome_new: Outcome

    def to_dict(self) -> dict[str, Any]:
        o = self.outcome_new
        return {"file": o.file, "case": o.label, "roles": list(o.roles), "env": o.env,
                "tool": o.tool, "untrusted": o.untrusted,
                "old": "pass" if self.outcome_old.passed else "fail",
                "new": "pass" if o.passed else "fail",
                "old_failure": list(self.outcome_old.rows), "new_failure": list(o.rows)}


@dataclass
class PolicyDiff:
    old: Snapshot
    new: Snapshot
    cells: int = 0
    changes: list[Change] = field(default_factory=list)
    tests: list[TestChange] = field(default_factory=list)
    old_report: TestReport = field(default_factory=TestReport)
    new_report: TestReport = field(default_factory=TestReport)
    # What to call each side in the output (a folder, or `REV:path` for --git).
    old_label: str = ""
    new_label: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.changes or self.tests)

    def group(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]


def classify(old: Cell, new: Cell) -> str | None:
    if RANK[new.decision] > RANK[old.decision]:
        return "wider"
    if RANK[new.decision] < RANK[old.decision]:
        return "narrower"
    if old.decision == "deny" and old.required_role != new.required_role:
        return "required_role"
    if old.approval != new.approval:
        return "approval"
    if old.reason != new.reason:
        return "reason"
    return None


def _union(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    return list(dict.fromkeys([*a, *b]))


def _test_files(old: Snapshot, new: Snapshot) -> list[tuple[str, str]]:
    """Both folders' test files; a file both ship with other contents is run in both
    versions, named `(old)` and `(new)`."""
    olds, news = dict(old.source.tests), dict(new.source.tests)
    out = []
    for name in _union(list(olds), list(news)):
        if name in olds and name in news and olds[name] != news[name]:
            out += [(f"tests/{name} (old)", olds[name]), (f"tests/{name} (new)", news[name])]
        else:
            out.append((f"tests/{name}", news.get(name, olds.get(name, ""))))
    return out


def diff_policies(old: Snapshot, new: Snapshot, extra: Sequence[Sequence[str]] = (),
                  labels: tuple[str, str] | None = None) -> PolicyDiff:
    who: list[Principal] = principals(
        _union(policy_roles(old), policy_roles(new)),
        _union(old.environments, new.environments), extra)
    where: list[Slot] = _union(slots(old.catalog), slots(new.catalog))
    old_label, new_label = labels or (str(old.source.folder), str(new.source.folder))
    result = PolicyDiff(old, new, old_label=old_label, new_label=new_label)
    # Row by row, keeping only the changes: a large policy's matrix (150 roles: ~1.3 million
    # cells) need not be held twice.
    for principal in who:
        before = principal_cells(old, principal, where)
        after = principal_cells(new, principal, where)
        result.cells += len(after)
        for a, b in zip(before, after, strict=True):
            kind = classify(a, b)
            if kind is not None:
                result.changes.append(Change(kind, a, b))
    for name, text in _test_files(old, new):
        outcomes_old, _ = case_outcomes(old, name, text)
        outcomes_new, _ = case_outcomes(new, name, text)
        by_key = {o.key: o for o in outcomes_old}
        for o in outcomes_new:
            prior = by_key.get(o.key)
            if prior is not None and prior.passed != o.passed:
                result.tests.append(TestChange(prior, o))
    result.old_report, result.new_report = run_policy_tests(old), run_policy_tests(new)
    return result


# -- output -------------------------------------------------------------------------------

def _cell_line(change: Change) -> str:
    c = change.new
    ctx = " (untrusted)" if c.untrusted else ""
    return (f"| {c.principal} | {c.tool} | {Slot(c.tool, c.env, c.source).where}{ctx} | "
            f"{change.old.short()} | {c.short()} |")


def to_markdown(d: PolicyDiff) -> str:
    lines = [f"# Policy diff: {d.old_label} ({d.old.revision}) → "
             f"{d.new_label} ({d.new.revision})", ""]
    if not d.changed:
        lines += [f"No decision changes in {d.cells} cells, and no policy test changes its "
                  "outcome.", ""]
    counts = ", ".join(f"{len(d.group(k))} {k.replace('_', ' ')}" for k in GROUPS)
    if d.changes:
        lines += [f"{len(d.changes)} of {d.cells} cells change: {counts}.", ""]
    for kind in GROUPS:
        group = d.group(kind)
        if not group:
            continue
        lines += [f"## {GROUP_TITLES[kind]}: {len(group)}", "",
                  "| principal | tool | environment | old | new |", "|---|---|---|---|---|",
                  *map(_cell_line, group), ""]
    if d.tests:
        lines += [f"## Policy tests whose outcome changes: {len(d.tests)}", ""]
        for t in d.tests:
            old = "passes" if t.outcome_old.passed else "fails"
            new = "passes" if t.outcome_new.passed else "fails"
            lines.append(f"- {t.outcome_new.title()}: {old} on the old policy, {new} on the new")
            for row in t.outcome_new.rows or t.outcome_old.rows:
                lines.append(f"  - {'new' if t.outcome_new.rows else 'old'}: {row.strip()}")
        lines.append("")
    lines.append(f"Old policy's own tests: {d.old_report.summary().splitlines()[-1]}. "
                 f"New policy's own tests: {d.new_report.summary().splitlines()[-1]}"
                 + ("" if d.new_report.ok else
                    " (the sidecar refuses a policy whose tests fail: it would keep the old one)")
                 + ".")
    return "\n".join(lines) + "\n"


def to_json(d: PolicyDiff) -> str:
    return orjson.dumps({
        "old": {"policy": d.old_label, "revision": d.old.revision,
                "tests": {"passed": d.old_report.passed, "failed": len(d.old_report.failures)}},
        "new": {"policy": d.new_label, "revision": d.new.revision,
                "tests": {"passed": d.new_report.passed, "failed": len(d.new_report.failures)}},
        "cells": d.cells, "changed": d.changed,
        "counts": {k: len(d.group(k)) for k in GROUPS},
        "changes": [c.to_dict() for c in d.changes],
        "tests": [t.to_dict() for t in d.tests],
    }, option=orjson.OPT_INDENT_2).decode()


# -- two git revisions --------------------------------------------------------------------

def parse_range(text: str) -> tuple[str, str]:
    """`REV1..REV2` (an empty side is HEAD, as in git)."""
    if text.count("..") != 1 or "..." in text:
        raise GitError(f"--git wants REV1..REV2, not {text!r}")
    a, _, b = text.partition("..")
    return a or "HEAD", b or "HEAD"


def _git(cwd: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GitError(f"git {' '.join(args)}: {e}") from None
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _repo_path(path: Path, cwd: Path) -> tuple[Path, str]:
    """The repository's top folder and `path` inside it (the path need not exist now)."""
    top = Path(_git(cwd, "rev-parse", "--show-toplevel").decode().strip())
    absolute = Path(os.path.abspath(cwd / path))
    try:
        rel = absolute.relative_to(top)
    except ValueError:
        raise GitError(f"{path} is not inside the repository {top}") from None
    return top, rel.as_posix() or "."


def export_tree(rev: str, path: Path, dest: Path, cwd: Path | None = None) -> Path:
    """Write the folder `path` as it is at `rev` to `dest`; returns `dest`."""
    top, rel = _repo_path(path, cwd or Path.cwd())
    tree = _git(top, "archive", "--format=tar", f"{rev}:{rel}" if rel != "." else rev)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(tree)) as tar:
        tar.extractall(dest, filter="data")  # only plain files and folders inside dest
    return dest


def export_file(rev: str, path: Path, dest: Path, cwd: Path | None = None) -> Path:
    top, rel = _repo_path(path, cwd or Path.cwd())
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(_git(top, "show", f"{rev}:{rel}"))
    return dest


def git_sides(spec: str, path: Path, catalog: Path | None,
              work: Path | None = None) -> tuple[Path, Path, Path | None, Path | None]:
    """(old folder, new folder, old catalog, new catalog) exported from two revisions into a
    temporary folder (`work`, made when None); the catalogs only when `catalog` names one
    inside the repository."""
    old_rev, new_rev = parse_range(spec)
    work = work or Path(tempfile.mkdtemp(prefix="agentchat-policy-diff-"))
    old_dir = export_tree(old_rev, path, work / "old" / "policy")
    new_dir = export_tree(new_rev, path, work / "new" / "policy")
    if catalog is None:
        return old_dir, new_dir, None, None
    return (old_dir, new_dir, export_file(old_rev, catalog, work / "old" / "catalog.yaml"),
            export_file(new_rev, catalog, work / "new" / "catalog.yaml"))
