"""Reading a policy folder: the Casbin model, the policy lines and the shipped policy tests.

A folder holds `model.conf`, `policy.csv` and `tests/*.yaml` (a ConfigMap in a cluster, so the
files are symlinks into a `..data` folder that kubelet swaps atomically). The tests may come
from a folder of their own instead (a second ConfigMap: adding a test leaves the pod as it is).
Lines are parsed with pycasbin's own parser, so the snapshot and the `enforce()` reference read
the same rules.

The snapshot implements exactly one model (`SUPPORTED_MODEL`); any other matcher or effect is
refused at load, because the compiled snapshot would silently disagree with Casbin.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from casbin.model import Model
from casbin.persist.adapter import load_policy_line

from agentchat.catalog import Catalog
from agentchat.errors import LocalError

from .approvals import (
    APPROVALS_FILE,
    ApprovalRule,
    ApprovalRuleError,
    parse_approvals,
    validate_approvals,
)

MODEL_FILE = "model.conf"
POLICY_FILE = "policy.csv"
TESTS_DIR = "tests"
# The groups every catalog tool belongs to, by its risk (g2 lines injected from the catalog).
RISK_GROUPS = ("read", "write", "destructive")
# The object a migration's source environment is checked against: read access there.
SOURCE_OBJECT = "read"
# pycasbin's role manager follows at most 10 levels from the request subject; the reference
# spends one on user -> role, so deeper hierarchies would make the two disagree.
MAX_HIERARCHY_DEPTH = 8

# Request contexts (`r2.ctx`): "untrusted" once ss-tools output has entered the turn's context
# (the agent sends `context: {untrusted: true}`), else "trusted". `p2` lines name "untrusted".
TRUSTED, UNTRUSTED = "trusted", "untrusted"
CONTEXT_RULE_CONTEXTS = (UNTRUSTED,)

# The request (sub, dom, obj) against `p` lines decides allow/deny. The second set (r2, p2, e2,
# m2, evaluated with pycasbin's EnforceContext("2")) asks whether a permitted call needs a card
# in the request's context: any matching `p2` line says it does. p2 lines have no effect field,
# so a match counts as an allow under e2 (and under e, which pycasbin 2.x applies to every
# context: `CoreEnforcer.eft` is built from `e` alone); both read "some p2 line matches".
SUPPORTED_MODEL = """
[request_definition]
r = sub, dom, obj
r2 = sub, dom, obj, ctx

[policy_definition]
p = sub, dom, obj, eft
p2 = sub, dom, obj, ctx

[role_definition]
g = _, _
g2 = _, _

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))
e2 = some(where (p.eft == allow))

[matchers]
m = g(r.sub, p.sub) && (p.dom == "*" || r.dom == p.dom) && \
(p.obj == "*" || r.obj == p.obj || g2(r.obj, p.obj))
m2 = g(r2.sub, p2.sub) && (p2.dom == "*" || r2.dom == p2.dom) && \
(p2.obj == "*" || r2.obj == p2.obj || g2(r2.obj, p2.obj)) && r2.ctx == p2.ctx
"""

# The model before request contexts: still loaded (a policy folder from before keeps serving),
# with no context rules; p2 lines need SUPPORTED_MODEL.
LEGACY_MODEL = """
[request_definition]
r = sub, dom, obj

[policy_definition]
p = sub, dom, obj, eft

[role_definition]
g = _, _
g2 = _, _

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = g(r.sub, p.sub) && (p.dom == "*" || r.dom == p.dom) && \
(p.obj == "*" || r.obj == p.obj || g2(r.obj, p.obj))
"""


T = TypeVar("T")


class PolicyError(LocalError):
    """A policy folder cannot become a snapshot; the message names the file and line."""


@dataclass(frozen=True)
class Rule:
    """One `p` line: who (role), where (environment or *), what (tool, group or *), effect."""

    line_no: int
    sub: str
    dom: str
    obj: str
    eft: str

    def text(self) -> str:
        return f"p, {self.sub}, {self.dom}, {self.obj}, {self.eft}"


@dataclass(frozen=True)
class ContextRule:
    """One `p2` line: a permitted call by this role, in this environment (or *), of this tool
    or group (or *) needs a card when the request's context is `ctx` (`untrusted`)."""

    line_no: int
    sub: str
    dom: str
    obj: str
    ctx: str

    def text(self) -> str:
        return f"p2, {self.sub}, {self.dom}, {self.obj}, {self.ctx}"


@dataclass(frozen=True)
class PolicySource:
    """A policy folder as read from disk, before compiling."""

    folder: Path
    model_text: str
    rules: tuple[Rule, ...]
    roles: tuple[tuple[str, str], ...]  # g: (role, inherited role)
    groups: tuple[tuple[str, str], ...]  # g2 from the file: (tool or group, group)
    tests: tuple[tuple[str, str], ...]  # (file name, YAML text)
    revision: str
    role_order: tuple[str, ...] = ()  # roles in order of first appearance in the file
    context_rules: tuple[ContextRule, ...] = ()  # p2 lines
    has_contexts: bool = True  # the model has the r2/p2/e2/m2 set (False: LEGACY_MODEL)
    # What was read: (path in the folder, sha256 of its text), and the ConfigMap version
    # folder `..data` pointed at (None for a plain folder). `GET /v1/policy` shows both.
    files: tuple[tuple[str, str], ...] = ()
    version: str | None = None
    # The tests' own folder when they come from a second ConfigMap (None: `folder/tests`),
    # and the version its `..data` pointed at.
    tests_folder: Path | None = None
    tests_version: str | None = None
    # approvals.yaml (docs/protocol.md §11): who answers a carded call; () without the file (all
    # `self`).
    approvals: tuple[ApprovalRule, ...] = ()


def _model_sections(text: str) -> dict[str, str]:
    model = Model()
    model.load_model_from_text(text)
    return {f"{sec}.{key}": model.model[sec][key].value
            for sec in ("r", "p", "g", "e", "m") if sec in model.model
            for key in model.model[sec]}


_SUPPORTED = _model_sections(SUPPORTED_MODEL)
_LEGACY = _model_sections(LEGACY_MODEL)


def check_model(text: str, where: str = MODEL_FILE) -> bool:
    """Refuse any model but the compiled one; True when it has the context set (r2...m2)."""
    try:
        sections = _model_sections(text)
    except Exception as e:  # pycasbin raises bare errors on broken configs
        raise PolicyError(f"{where}: not a Casbin model: {e}") from None
    if sections == _LEGACY:
        return False
    if sections != _SUPPORTED:
        diff = sorted(k for k in set(sections) | set(_SUPPORTED)
                      if sections.get(k) != _SUPPORTED.get(k))
        raise PolicyError(f"{where}: unsupported model (differs in {', '.join(diff)}); "
                          "the sidecar compiles only the shipped model")
    return True


@dataclass(frozen=True)
class ParsedLines:
    rules: tuple[Rule, ...]
    roles: tuple[tuple[str, str], ...]
    groups: tuple[tuple[str, str], ...]
    order: tuple[str, ...]
    context_rules: tuple[ContextRule, ...]


def parse_lines(text: str, where: str = POLICY_FILE, *, contexts: bool = True) -> ParsedLines:
    """p, p2, g and g2 lines, parsed by pycasbin; `contexts=False` (the legacy model) refuses p2."""
    model = Model()
    model.load_model_from_text(SUPPORTED_MODEL)
    rules: list[Rule] = []
    context_rules: list[ContextRule] = []
    roles: list[tuple[str, str]] = []
    groups: list[tuple[str, str]] = []
    order: dict[str, None] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        before = {k: len(model.model[s][k].policy) for s in ("p", "g") for k in model.model[s]}
        load_policy_line(line, model)
        added = [(s, k) for s in ("p", "g") for k in model.model[s]
                 if len(model.model[s][k].policy) != before[k]]
        if not added:
            raise PolicyError(f"{where}:{no}: not a policy line (p, p2, g or g2): {line!r}")
        sec, key = added[0]
        fields = model.model[sec][key].policy[-1]
        if any(not f for f in fields):
            raise PolicyError(f"{where}:{no}: empty field in {line!r}")
        if key == "p":
            if len(fields) != 4:
                raise PolicyError(f"{where}:{no}: p needs 4 fields (role, env, tool, effect)")
            if fields[3] not in ("allow", "deny"):
                raise PolicyError(f"{where}:{no}: effect must be allow or deny, not {fields[3]!r}")
            rules.append(Rule(no, *fields))
            order.setdefault(fields[0])
        elif key == "p2":
            if not contexts:
                raise PolicyError(f"{where}:{no}: p2 lines need the model's r2/p2/e2/m2 "
                                  "sections (the shipped model.conf)")
            if len(fields) != 4:
                raise PolicyError(f"{where}:{no}: p2 needs 4 fields (role, env, tool, context)")
            if fields[3] not in CONTEXT_RULE_CONTEXTS:
                raise PolicyError(f"{where}:{no}: p2 context must be "
                                  f"{' or '.join(CONTEXT_RULE_CONTEXTS)}, not {fields[3]!r}")
            context_rules.append(ContextRule(no, *fields))
            order.setdefault(fields[0])
        else:
            if len(fields) != 2:
                raise PolicyError(f"{where}:{no}: {key} needs 2 fields")
            (roles if key == "g" else groups).append((fields[0], fields[1]))
            if key == "g":
                order.setdefault(fields[0])
                order.setdefault(fields[1])
    return ParsedLines(tuple(rules), tuple(roles), tuple(groups), tuple(order),
                       tuple(context_rules))


def _version_root(folder: Path) -> Path:
    """Where to read from: a ConfigMap's current `..data` version, resolved once, so every
    file comes from the same version even if kubelet swaps and deletes it meanwhile."""
    data = folder / "..data"
    return Path(os.path.realpath(data)) if data.is_symlink() else folder


def _read_tests(test_dir: Path) -> tuple[tuple[str, str], ...]:
    return tuple((p.name, p.read_text(encoding="utf-8"))
                 for p in sorted(test_dir.glob("*.yaml"))) if test_dir.is_dir() else ()


def _read_texts(root: Path, own_tests: bool
                ) -> tuple[str, str, tuple[tuple[str, str], ...], str | None]:
    model_text = (root / MODEL_FILE).read_text(encoding="utf-8")
    policy_text = (root / POLICY_FILE).read_text(encoding="utf-8")
    approvals = root / APPROVALS_FILE
    approvals_text = approvals.read_text(encoding="utf-8") if approvals.is_file() else None
    return (model_text, policy_text, _read_tests(root / TESTS_DIR) if own_tests else (),
            approvals_text)


def _consistent(folder: Path, read: Callable[[Path], T], attempts: int,
                what: str) -> tuple[T, Path]:
    """`read(root)` from one version of a ConfigMap folder, read again when kubelet swapped
    `..data` meanwhile: what was read, and the version root it came from."""
    for attempt in range(attempts):
        root = _version_root(folder)
        try:
            texts = read(root)
        except OSError as e:
            if _version_root(folder) != root and attempt + 1 < attempts:
                continue  # swapped (and the old version deleted) while reading: read again
            raise PolicyError(f"{folder}: cannot read the {what}: {e.strerror}: "
                              f"{e.filename}") from None
        except UnicodeDecodeError as e:
            raise PolicyError(f"{folder}: not UTF-8 text: {e.reason}") from None
        if _version_root(folder) == root:
            return texts, root  # nothing swapped while reading: one consistent version
    raise PolicyError(f"{folder}: kept changing while being read")


def _read_tests_folder(root: Path) -> tuple[tuple[str, str], ...]:
    if not root.is_dir():  # named on purpose: its absence is an error, never "no tests"
        raise FileNotFoundError(2, "No such folder", str(root))
    return _read_tests(root)


def read_folder(folder: Path | str, attempts: int = 5, *,
                tests_dir: Path | str | None = None) -> PolicySource:
    """Read a policy folder; the revision is a digest of every file it holds.

    The tests come from the folder's `tests/`, or from `tests_dir` when given (a second
    ConfigMap, AGENTCHAT_POLICY_TESTS_DIR). Each folder is read from one version of its own.
    The tests keep their names `tests/NAME.yaml` either way, so the same files give the same
    revision wherever they are mounted."""
    folder = Path(folder)
    tests_folder = Path(tests_dir) if tests_dir is not None else None
    if tests_folder == folder / TESTS_DIR:
        tests_folder = None  # the default, read with the policy from the same version
    (model_text, policy_text, tests, approvals_text), root = _consistent(
        folder, lambda r: _read_texts(r, tests_folder is None), attempts, "policy")
    tests_version: str | None = None
    if tests_folder is not None:
        tests, tests_root = _consistent(tests_folder, _read_tests_folder, attempts,
                                        "policy tests")
        tests_version = tests_root.name if tests_root != tests_folder else None
    contexts = check_model(model_text, str(folder / MODEL_FILE))
    lines = parse_lines(policy_text, str(folder / POLICY_FILE), contexts=contexts)
    try:
        approvals = parse_approvals(approvals_text, str(folder / APPROVALS_FILE))
    except ApprovalRuleError as e:
        raise PolicyError(str(e)) from None
    # The approvals file counts only when present: a folder without one keeps its revision.
    extra = ((APPROVALS_FILE, approvals_text),) if approvals_text is not None else ()
    digest = hashlib.sha256()
    for name, text in (("model", model_text), ("policy", policy_text), *tests, *extra):
        digest.update(f"{name}\0{len(text)}\0{text}".encode())
    files = tuple((name, hashlib.sha256(text.encode()).hexdigest()) for name, text in (
        (MODEL_FILE, model_text), (POLICY_FILE, policy_text), *extra,
        *((f"{TESTS_DIR}/{n}", t) for n, t in tests)))
    return PolicySource(folder, model_text, lines.rules, lines.roles, lines.groups, tests,
                        digest.hexdigest()[:16], lines.order, lines.context_rules, contexts,
                        files, root.name if root != folder else None, tests_folder,
                        tests_version, approvals)


def catalog_groups(catalog: Catalog) -> tuple[tuple[str, str], ...]:
    """g2 lines from the catalog: each tool is in its risk group; no risk counts as destructive."""
    return tuple((t.name, getattr(t, "risk", None) or "destructive") for t in catalog.tools)


def validate(source: PolicySource, catalog: Catalog) -> None:
    """Refuse names the catalog does not know and hierarchies Casbin would not follow."""
    where = source.folder / POLICY_FILE
    tools = set(catalog.names)
    clash = tools & set(RISK_GROUPS)
    if clash:
        raise PolicyError(f"catalog: tool names clash with risk groups: {sorted(clash)}")
    groups = set(RISK_GROUPS) | {g for _, g in source.groups}
    envs = set(catalog.environments)
    lines: tuple[Rule | ContextRule, ...] = (*source.rules, *source.context_rules)
    for r in lines:
        if r.dom != "*" and r.dom not in envs:
            raise PolicyError(f"{where}:{r.line_no}: unknown environment {r.dom!r} "
                              f"(catalog: {', '.join(sorted(envs))})")
        if r.obj != "*" and r.obj not in tools and r.obj not in groups:
            raise PolicyError(f"{where}:{r.line_no}: unknown tool or group {r.obj!r}")
    for member, group in source.groups:
        if member not in tools and member not in groups:
            raise PolicyError(f"{where}: g2 names unknown tool or group {member!r}")
        # A line naming a tool must mean that tool alone: an explicit env-less line
        # (`p, role, *, get_dashboard, allow`) admits scoped roles for exactly that tool.
        if group in tools:
            raise PolicyError(f"{where}: g2 makes tool {group!r} a group; groups need names "
                              "of their own")
    _check_depth(source.roles, "g", where)
    _check_depth((*catalog_groups(catalog), *source.groups), "g2", where)
    try:
        validate_approvals(source.approvals, catalog, groups)
    except ApprovalRuleError as e:
        raise PolicyError(f"{source.folder}/{e}") from None


def _check_depth(edges: tuple[tuple[str, str], ...], kind: str, where: Path) -> None:
    parents: dict[str, set[str]] = {}
    for child, parent in edges:
        if child != parent:
            parents.setdefault(child, set()).add(parent)

    known: dict[str, int] = {}

    def depth(node: str, path: tuple[str, ...]) -> int:
        if node in path:
            raise PolicyError(f"{where}: {kind} cycle: {' -> '.join((*path, node))}")
        if node not in known:
            known[node] = max((1 + depth(p, (*path, node)) for p in parents.get(node, ())),
                              default=0)
        return known[node]

    for node in parents:
        d = depth(node, ())
        if d > MAX_HIERARCHY_DEPTH:
            raise PolicyError(f"{where}: {kind} hierarchy under {node!r} is {d} levels deep "
                              f"(at most {MAX_HIERARCHY_DEPTH})")
