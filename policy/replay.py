"""`agentchat policy replay`: re-decide recorded decisions with another policy.

The sidecar's decision log carries what a decision depended on besides the arguments' schema:
the roles as read from the token, the environment (and a migration's source environment),
the tool and the request's context. Never a token, never an argument value: a replay checks
the policy, as the policy tests do, not a call's schema. Records the policy never decided
(an invalid user token, arguments that failed their schema, an internal error) are skipped,
as are lines that are not decision records (`kubectl logs` mixes in the sidecar's log).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from agentchat.errors import LocalError
from agentchat.identity import parse_roles

from .engine import INTERNAL_ERROR, INVALID_ARGUMENTS, USER_TOKEN_INVALID, CheckRequest, decide
from .matrix import RANK, SHORT
from .snapshot import Snapshot

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
# The policy never decided these: replaying them would say nothing about a policy change.
NOT_REPLAYED = (INVALID_ARGUMENTS, INTERNAL_ERROR)


class ReplayError(LocalError, ValueError):
    """A --since duration that cannot be read."""


def parse_duration(text: str) -> timedelta:
    """`90s`, `15m`, `24h`, `7d`, `1w`, `1h30m`, `250ms`: a positive span of time."""
    text = text.strip()
    pos, seconds = 0, 0.0
    for m in _PART.finditer(text):
        if m.start() != pos:
            break
        seconds += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not text or pos != len(text) or seconds <= 0:
        raise ReplayError(f"not a duration: {text!r} (say 90s, 15m, 24h, 7d or 1h30m)")
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class Flip:
    record: dict[str, Any]
    decision: str
    reason: str

    @property
    def old(self) -> str:
        return str(self.record["decision"])

    @property
    def wider(self) -> bool:
        return RANK[self.decision] > RANK[self.old]

    def summary_key(self) -> tuple[Any, ...]:
        r = self.record
        return (tuple(r.get("roles") or ()), r.get("env"), r.get("source_env"), r.get("tool"),
                bool((r.get("context") or {}).get("untrusted")), self.old, self.decision,
                self.reason)

    def to_dict(self) -> dict[str, Any]:
        r = self.record
        return {k: r.get(k) for k in ("ts", "decision_id", "request_id", "user.sub", "roles",
                                      "env", "source_env", "tool", "context",
                                      "policy_revision")} | {
            "old": {"decision": self.old, "reason": r.get("reason_code")},
            "new": {"decision": self.decision, "reason": self.reason}}


@dataclass
class ReplayReport:
    revision: str
    read: int = 0  # decision records read (after --since)
    replayed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # why, how many
    flips: list[Flip] = field(default_factory=list)
    reason_changes: int = 0  # same decision, another reason

    def to_dict(self) -> dict[str, Any]:
        return {"revision": self.revision, "read": self.read, "replayed": self.replayed,
                "skipped": dict(self.skipped), "flipped": len(self.flips),
                "wider": sum(f.wider for f in self.flips),
                "narrower": sum(not f.wider for f in self.flips),
                "reason_changes": self.reason_changes,
                "flips": [f.to_dict() for f in self.flips]}


def read_records(lines: Iterable[bytes | str], since: datetime | None,
                 report: ReplayReport) -> list[dict[str, Any]]:
    """The decision records among the lines, at or after `since`."""
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            report.skipped["not a decision record"] += 1
            continue
        if not isinstance(rec, dict) or "decision_id" not in rec or "tool" not in rec:
            report.skipped["not a decision record"] += 1
            continue
        if since is not None:
            try:
                ts = datetime.fromisoformat(str(rec.get("ts")))
            except ValueError:
                report.skipped["no readable ts"] += 1
                continue
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=UTC)
            if ts < since:
                continue
        out.append(rec)
    report.read = len(out)
    return out


def _request(snapshot: Snapshot, rec: dict[str, Any]) -> CheckRequest | str:
    """The call a record stands for, or why it cannot be replayed."""
    reason = str(rec.get("reason_code") or "")
    if reason.startswith(USER_TOKEN_INVALID):
        return "user token was invalid"
    if reason in NOT_REPLAYED:
        return reason
    env = rec.get("env")
    tool_name = str(rec["tool"])
    args: dict[str, Any] = {}
    tool = snapshot.tools.get(tool_name)
    if tool is not None and tool.environment is not None:
        if env is not None:
            args[tool.environment.argument] = env
        if tool.environment.source_argument is not None:
            source = rec.get("source_env")
            if not isinstance(source, str):
                return "no source environment recorded"
            args[tool.environment.source_argument] = source
    untrusted = bool((rec.get("context") or {}).get("untrusted"))
    return CheckRequest(str(rec.get("request_id") or "replay"), env, tool_name, args,
                        untrusted=untrusted)


def replay(snapshot: Snapshot, records: Iterable[dict[str, Any]],
           report: ReplayReport | None = None) -> ReplayReport:
    report = report or ReplayReport(snapshot.revision)
    for rec in records:
        req = _request(snapshot, rec)
        if isinstance(req, str):
            report.skipped[req] += 1
            continue
        roles_claim = rec.get("roles")
        if not isinstance(roles_claim, list) or rec.get("decision") not in RANK:
            report.skipped["not a decision record"] += 1
            continue
        # Logged roles are the ones the sidecar kept; reading them again keeps only those the
        # replayed catalog knows, as a token's would be.
        roles = parse_roles([str(r) for r in roles_claim], snapshot.environment_set,
                            quiet=True)
        got = decide(snapshot, roles, req, check_schema=False)
        report.replayed += 1
        if got.decision != rec["decision"]:
            report.flips.append(Flip(rec, got.decision, got.reason_code))
        elif got.reason_code != rec.get("reason_code"):
            report.reason_changes += 1
    return report


def to_markdown(report: ReplayReport, label: str) -> str:
    d = report.to_dict()
    lines = [f"# Policy replay: {label} (revision {report.revision})", "",
             f"{d['replayed']} of {d['read']} recorded decisions replayed; "
             f"**{d['flipped']} would flip** ({d['wider']} wider, {d['narrower']} narrower); "
             f"{d['reason_changes']} keep their decision with another reason."]
    if report.skipped:
        lines.append("Skipped: " + ", ".join(f"{n} ({why})"
                                             for why, n in sorted(report.skipped.items())) + ".")
    if report.flips:
        groups = Counter(f.summary_key() for f in report.flips)
        lines += ["", "| count | roles | environment | tool | context | recorded | now |",
                  "|---|---|---|---|---|---|---|"]
        for (roles, env, source, tool, untrusted, old, new, reason), n in groups.most_common():
            where = f"{source}→{env}" if source else (env or "-")
            lines.append(f"| {n} | {','.join(roles) or '-'} | {where} | {tool} | "
                         f"{'untrusted' if untrusted else 'trusted'} | {SHORT[old]} | "
                         f"{SHORT[new]} ({reason}) |")
    return "\n".join(lines) + "\n"
