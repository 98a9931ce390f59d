"""Who must approve a carded call (docs/protocol.md §11): the policy folder's optional
`approvals.yaml`.

The Casbin model decides whether a call may run and whether it needs a card; this file decides
who answers the card. The first rule whose tools and environments match a carded call gives its
approval mode:

    self    the requester confirms in the chat (the default: no rule matches, no file)
    other   someone else holding one of `approvers` for the call's environment must approve;
            `quorum` distinct approvers (1 or 2)

A separate file, not a `p3` line: the sidecar compiles exactly one Casbin model (rules.py), and
an approval rule is not an allow or a deny. Approver roles are ordinary roles: `role` counts in
every environment, `role@env` in that one, and the policy's `g` lines are followed (a role that
inherits an approver role is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from agentchat.catalog import Catalog
from agentchat.errors import LocalError

APPROVALS_FILE = "approvals.yaml"
MODES = ("self", "other")
DEFAULT_EXPIRES_MIN = 240  # 4 h
MAX_EXPIRES_MIN = 7 * 24 * 60  # 7 days
DEFAULT_ESCALATE_MIN = 30
_KEYS = {"tools", "environments", "mode", "approvers", "quorum", "expires_after_minutes",
         "escalate_after_minutes", "grant_max_minutes"}


class ApprovalRuleError(LocalError, ValueError):
    """`approvals.yaml` cannot be read; the message names the rule."""


@dataclass(frozen=True)
class ApprovalRule:
    index: int  # 1-based position in the file (explain names it)
    tools: tuple[str, ...]  # tool names or groups (read, write, destructive, g2), or "*"
    environments: tuple[str, ...]  # environment names, or "*"
    mode: str
    approvers: tuple[str, ...] = ()
    quorum: int = 1
    expires_after_minutes: float = DEFAULT_EXPIRES_MIN
    escalate_after_minutes: float = DEFAULT_ESCALATE_MIN
    grant_max_minutes: float = 0  # 0: no time-boxed grants under this rule

    def text(self) -> str:
        who = f" by {'/'.join(self.approvers)} x{self.quorum}" if self.mode == "other" else ""
        return (f"rule {self.index}: {','.join(self.tools)} in {','.join(self.environments)}"
                f" -> {self.mode}{who}")

    def answer(self) -> dict[str, Any]:
        """The sidecar answer's `approval` object (docs/protocol.md §11)."""
        return {"mode": self.mode, "approvers": list(self.approvers), "quorum": self.quorum,
                "expires_after_s": round(self.expires_after_minutes * 60, 3),
                "escalate_after_s": round(self.escalate_after_minutes * 60, 3),
                "grant_max_minutes": self.grant_max_minutes, "rule": self.index}


SELF_ANSWER: dict[str, Any] = {"mode": "self", "approvers": [], "quorum": 0,
                               "expires_after_s": None, "escalate_after_s": None,
                               "grant_max_minutes": 0, "rule": None}


def _names(value: Any, what: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(
            isinstance(v, str) and v for v in value):
        raise ApprovalRuleError(f"{where}: {what} must be a name or a list of names")
    return tuple(value)


def _minutes(raw: dict[str, Any], key: str, default: float, top: int, where: str) -> float:
    """Minutes, fractions allowed (a test's 0.05 is 3 s)."""
    value = raw.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= top:
        raise ApprovalRuleError(f"{where}: {key} must be a number of minutes 0..{top}")
    return value


def parse_approvals(text: str | None, where: str = APPROVALS_FILE) -> tuple[ApprovalRule, ...]:
    if text is None:
        return ()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ApprovalRuleError(f"{where}: not YAML: {e}") from None
    rules_raw = (data or {}).get("rules", []) if isinstance(data, dict) else None
    if not isinstance(rules_raw, list):
        raise ApprovalRuleError(f"{where}: expected `rules:` as a list")
    out = []
    for i, raw in enumerate(rules_raw, 1):
        at = f"{where}: rule {i}"
        if not isinstance(raw, dict):
            raise ApprovalRuleError(f"{at}: expected a mapping")
        unknown = set(raw) - _KEYS
        if unknown:
            raise ApprovalRuleError(f"{at}: unknown keys {sorted(unknown)}")
        mode = raw.get("mode")
        if mode not in MODES:
            raise ApprovalRuleError(f"{at}: mode must be one of {', '.join(MODES)}")
        approvers: tuple[str, ...] = ()
        quorum = 0
        if mode == "other":
            approvers = _names(raw.get("approvers"), "approvers", at)
            quorum = raw.get("quorum", 1)
            if quorum not in (1, 2):
                raise ApprovalRuleError(f"{at}: quorum must be 1 or 2")
        out.append(ApprovalRule(
            i, _names(raw.get("tools", "*"), "tools", at),
            _names(raw.get("environments", "*"), "environments", at), mode, approvers, quorum,
            _minutes(raw, "expires_after_minutes", DEFAULT_EXPIRES_MIN, MAX_EXPIRES_MIN, at)
            or DEFAULT_EXPIRES_MIN,
            _minutes(raw, "escalate_after_minutes", DEFAULT_ESCALATE_MIN, MAX_EXPIRES_MIN, at),
            _minutes(raw, "grant_max_minutes", 0, 24 * 60, at)))
    return tuple(out)


def validate_approvals(rules: tuple[ApprovalRule, ...], catalog: Catalog,
                       groups: set[str]) -> None:
    tools, envs = set(catalog.names), set(catalog.environments)
    for r in rules:
        for t in r.tools:
            if t != "*" and t not in tools and t not in groups:
                raise ApprovalRuleError(f"{APPROVALS_FILE}: rule {r.index}: unknown tool or "
                                        f"group {t!r}")
        for e in r.environments:
            if e != "*" and e not in envs:
                raise ApprovalRuleError(f"{APPROVALS_FILE}: rule {r.index}: unknown "
                                        f"environment {e!r}")
