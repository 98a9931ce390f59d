"""Decisions: a snapshot's verdict plus the catalog's risk, confirmation and alternatives.

One answer per tool call, shaped one to one like the `confirm_required` card (003, PROTOCOL §3):
`allow` runs, `allow_with_confirmation` needs a card, `deny` is a permission-denied card (or,
for a user-token reason, UNAUTHORIZED). Everything fails closed: an unknown tool or environment
is denied, a tool without risk counts as destructive, and any error while deciding is a deny.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from agentchat.catalog import RISK_LEVEL, Tool

from .rules import SOURCE_OBJECT
from .snapshot import ANY_DOMAIN, Roles, Snapshot

log = logging.getLogger("agentchat.policy")

ALLOW, CONFIRM, DENY = "allow", "allow_with_confirmation", "deny"
# Reason codes: stable strings the agent maps (user_token_invalid:<cause> is built in app.py).
ALLOWED = "allowed"
CONFIRMATION_REQUIRED = "confirmation_required"
ROLE_MISSING = "role_missing"
DENIED_BY_RULE = "denied_by_rule"
UNKNOWN_TOOL = "unknown_tool"
UNKNOWN_ENVIRONMENT = "unknown_environment"
INVALID_ARGUMENTS = "invalid_arguments"
INTERNAL_ERROR = "internal_error"
USER_TOKEN_INVALID = "user_token_invalid"


@dataclass(frozen=True)
class CheckRequest:
    request_id: str
    environment: str | None
    tool: str
    arguments: dict[str, Any]


@dataclass
class Decision:
    request_id: str
    decision_id: str
    decision: str
    allow: bool
    reason_code: str
    tool: str
    risk: str
    risk_level: str
    dangerous: bool
    confirmation_required: bool
    env_context: str | None
    permission_granted: bool
    required_role: str | None
    alternatives: list[dict[str, str]] | None
    policy_revision: str | None

    def to_dict(self) -> dict[str, Any]:
        # A shallow copy: dataclasses.asdict deep-copies and costs more than the decision.
        return dict(self.__dict__)


def tool_risk(tool: Tool | None) -> str:
    """The tool's risk; unknown tools and tools without risk metadata count as destructive."""
    risk = getattr(tool, "risk", None) if tool is not None else None
    return risk if risk in RISK_LEVEL else "destructive"


def needs_card(tool: Tool, risk: str, env: str | None) -> bool:
    if risk == "destructive":
        return True
    if risk == "write":
        return env is not None and env in tool.confirm_in
    return False


def denial(req: CheckRequest, reason: str, *, tool: Tool | None = None,
           env: str | None = None, revision: str | None = None,
           required_role: str | None = None,
           alternatives: list[dict[str, str]] | None = None) -> Decision:
    risk = tool_risk(tool)
    return Decision(
        request_id=req.request_id, decision_id=uuid.uuid4().hex, decision=DENY, allow=False,
        reason_code=reason, tool=req.tool, risk=risk, risk_level=RISK_LEVEL[risk],
        dangerous=risk == "destructive", confirmation_required=False,
        env_context=env, permission_granted=False, required_role=required_role,
        alternatives=alternatives if alternatives is not None else [],
        policy_revision=revision,
    )


def _env_args(tool: Tool, req: CheckRequest) -> tuple[str | None, str | None] | None:
    """(target, source) from the arguments; None when they are malformed or disagree."""
    if tool.environment is None:
        return None, None
    out: list[str | None] = []
    for name in (tool.environment.argument, tool.environment.source_argument):
        value = req.arguments.get(name) if name else None
        if value is not None and not isinstance(value, str):
            return None
        out.append(value)
    target, source = out
    # The request's environment is a cross-check of the arguments, never a substitute.
    if req.environment is not None and target is not None and req.environment != target:
        return None
    return target, source


def decide(snapshot: Snapshot, roles: Roles, req: CheckRequest) -> Decision:
    """Decide one call; any exception becomes an `internal_error` deny (fail closed)."""
    try:
        return _decide(snapshot, roles, req)
    except Exception:
        log.exception("policy decision failed", extra={"request_id": req.request_id})
        return denial(req, INTERNAL_ERROR, tool=snapshot.tools.get(req.tool),
                      env=req.environment, revision=snapshot.revision)


def _decide(snapshot: Snapshot, roles: Roles, req: CheckRequest) -> Decision:
    rev = snapshot.revision
    tool = snapshot.tools.get(req.tool)
    if tool is None:
        return denial(req, UNKNOWN_TOOL, env=req.environment, revision=rev)
    envs = _env_args(tool, req)
    if envs is None:
        return denial(req, INVALID_ARGUMENTS, tool=tool, env=req.environment, revision=rev)
    target, source = envs
    for env in (target, source):
        if env is not None and env not in snapshot.environments:
            return denial(req, UNKNOWN_ENVIRONMENT, tool=tool, env=target, revision=rev)
    domain = target or ANY_DOMAIN
    verdict = snapshot.check(roles, domain, tool.name)
    if verdict.allowed and tool.environment and tool.environment.source_argument:
        # Two environments (a migration): read on the source, the tool's permission on the target.
        verdict = snapshot.check(roles, source or ANY_DOMAIN, SOURCE_OBJECT)
    risk = tool_risk(tool)
    if not verdict.allowed:
        return denial(
            req, DENIED_BY_RULE if verdict.denied_by_rule else ROLE_MISSING, tool=tool,
            env=target, revision=rev,
            required_role=snapshot.required_role(
                domain, tool.name,
                (source or ANY_DOMAIN) if tool.environment and tool.environment.source_argument
                else None),
            alternatives=alternatives(snapshot, roles, tool, domain),
        )
    card = needs_card(tool, risk, target)
    return Decision(
        request_id=req.request_id, decision_id=uuid.uuid4().hex,
        decision=CONFIRM if card else ALLOW, allow=True,
        reason_code=CONFIRMATION_REQUIRED if card else ALLOWED, tool=tool.name, risk=risk,
        risk_level=RISK_LEVEL[risk], dangerous=risk == "destructive",
        confirmation_required=card, env_context=target, permission_granted=True,
        required_role=None, alternatives=None, policy_revision=rev,
    )


def alternatives(snapshot: Snapshot, roles: Roles, tool: Tool,
                 domain: str) -> list[dict[str, str]]:
    """The catalog's safer alternatives that this user may run in the same environment."""
    out = []
    for alt in tool.alternatives:
        if snapshot.check(roles, domain, alt.action).allowed:
            out.append({"action": alt.action, "prompt": alt.prompt.ru})
    return out


def permissions(snapshot: Snapshot, roles: Roles, environment: str | None) -> list[dict[str, Any]]:
    """Every catalog tool with what this user may do with it in one environment."""
    domain = environment or ANY_DOMAIN
    out = []
    for tool in snapshot.catalog.tools:
        allowed = snapshot.check(roles, domain, tool.name).allowed
        risk = tool_risk(tool)
        card = allowed and needs_card(tool, risk, environment)
        out.append({
            "tool": tool.name, "allow": allowed,
            "decision": (CONFIRM if card else ALLOW) if allowed else DENY,
            "risk": risk, "risk_level": RISK_LEVEL[risk], "dangerous": risk == "destructive",
            "confirmation_required": card,
        })
    return out
