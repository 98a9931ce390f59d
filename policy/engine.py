"""Decisions: a snapshot's verdict plus the catalog's risk, confirmation and alternatives.

One answer per tool call, shaped one to one like the `confirm_required` card (docs/protocol.md §3):
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
from agentchat.digest import args_digest
from agentchat.tool_request import InvalidArguments, validate_arguments

from .approvals import SELF_ANSWER
from .rules import SOURCE_OBJECT, TRUSTED, UNTRUSTED
from .snapshot import ANY_DOMAIN, Roles, Snapshot

log = logging.getLogger("agentchat.policy")

ALLOW, CONFIRM, DENY = "allow", "allow_with_confirmation", "deny"
# Reason codes: stable strings the agent maps (user_token_invalid:<cause> is built in app.py).
ALLOWED = "allowed"
CONFIRMATION_REQUIRED = "confirmation_required"  # the catalog: destructive, or confirm_in
# Permitted, and no catalog card, but a p2 line asks for one in the request's context.
CONFIRMATION_REQUIRED_UNTRUSTED = "confirmation_required_untrusted"
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
    untrusted: bool = False  # `context: {untrusted: true}`: ss-tools output is in the context

    @property
    def context(self) -> str:
        return UNTRUSTED if self.untrusted else TRUSTED


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
    # Why the call cannot be checked as sent, for the model (invalid_arguments,
    # unknown_environment, unknown_tool); null otherwise.
    detail: str | None = None
    # On a card, who answers it (`approval`: mode, approver roles, quorum, times;
    # docs/protocol.md §11), whether this token's holder is one of those approvers, and the
    # digest of the arguments an approval is bound to.
    approval: dict[str, Any] | None = None
    may_approve: bool = False
    args_digest: str | None = None

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
           alternatives: list[dict[str, str]] | None = None,
           detail: str | None = None) -> Decision:
    risk = tool_risk(tool)
    return Decision(
        request_id=req.request_id, decision_id=uuid.uuid4().hex, decision=DENY, allow=False,
        reason_code=reason, tool=req.tool, risk=risk, risk_level=RISK_LEVEL[risk],
        dangerous=risk == "destructive", confirmation_required=False,
        env_context=env, permission_granted=False, required_role=required_role,
        alternatives=alternatives if alternatives is not None else [],
        policy_revision=revision, detail=detail,
    )


def _check_environments(snapshot: Snapshot, tool: Tool,
                        req: CheckRequest) -> tuple[str, str] | None:
    """(reason, detail) when the request's environments are unknown or do not fit the call.

    The environment comes from the arguments; the request's `environment` must say the same:
    the target argument's value for a tool that has one, null for a tool without.
    """
    known = snapshot.environments
    named = [req.environment] if req.environment is not None else []
    for arg in tool.environment_arguments():
        value = req.arguments.get(arg)
        if isinstance(value, str):
            named.append(value)
    for env in named:
        if env not in known:
            return UNKNOWN_ENVIRONMENT, (f"unknown environment {env[:100]!r} "
                                         f"(known: {', '.join(known)})")
    return None


def _check_request_environment(tool: Tool, req: CheckRequest) -> str | None:
    """Why `environment` does not match the validated arguments, or None."""
    if tool.environment is None:
        if req.environment is not None:
            return (f"{tool.name} takes no environment, but the request names "
                    f"{req.environment!r}")
        return None
    target = req.arguments.get(tool.environment.argument)
    if target is None:
        return f"{tool.name} needs its environment argument {tool.environment.argument!r}"
    if req.environment is None:
        return (f"the request's environment is missing ({tool.environment.argument} "
                f"is {target!r})")
    if req.environment != target:
        return (f"the request's environment {req.environment!r} differs from "
                f"{tool.environment.argument}={target!r}")
    return None


def decide(snapshot: Snapshot, roles: Roles, req: CheckRequest, *,
           check_schema: bool = True) -> Decision:
    """Decide one call; any exception becomes an `internal_error` deny (fail closed).

    `check_schema=False` (policy tests and `policy explain`, which check the policy, not a
    call) skips the arguments' JSON Schema; the environment checks still apply.
    """
    try:
        return _decide(snapshot, roles, req, check_schema)
    except Exception:
        log.exception("policy decision failed", extra={"request_id": req.request_id})
        return denial(req, INTERNAL_ERROR, tool=snapshot.tools.get(req.tool),
                      env=req.environment, revision=snapshot.revision)


def _decide(snapshot: Snapshot, roles: Roles, req: CheckRequest, check_schema: bool) -> Decision:
    rev = snapshot.revision
    tool = snapshot.tools.get(req.tool)
    if tool is None:
        return denial(req, UNKNOWN_TOOL, env=req.environment, revision=rev,
                      detail=f"unknown tool {req.tool[:100]!r}")
    unknown = _check_environments(snapshot, tool, req)
    if unknown is not None:
        return denial(req, unknown[0], tool=tool, env=req.environment, revision=rev,
                      detail=unknown[1])
    # Defence in depth: the agent validated these arguments; what is checked here is what runs.
    try:
        if check_schema:
            validate_arguments(tool, req.arguments)
        mismatch = _check_request_environment(tool, req)
        if mismatch is not None:
            raise InvalidArguments(mismatch)
        source = None
        if tool.environment is not None and tool.environment.source_argument is not None:
            source = req.arguments.get(tool.environment.source_argument)
            if not isinstance(source, str):
                raise InvalidArguments(f"{tool.name} needs its environment argument "
                                       f"{tool.environment.source_argument!r}")
    except InvalidArguments as e:
        return denial(req, INVALID_ARGUMENTS, tool=tool, env=req.environment, revision=rev,
                      detail=str(e))
    # A tool with environment arguments has them all, as known strings equal to `environment`.
    target = req.environment
    domain = target or ANY_DOMAIN
    verdict = snapshot.check(roles, domain, tool.name)
    if verdict.allowed and source is not None:
        # Two environments (a migration): read on the source, the tool's permission on the target.
        verdict = snapshot.check(roles, source, SOURCE_OBJECT)
    risk = tool_risk(tool)
    rule = snapshot.approval_rule(tool.name, target)
    may = (rule is not None and rule.mode == "other"
           and snapshot.may_approve(roles, target, rule))
    if not verdict.allowed:
        denied = denial(
            req, DENIED_BY_RULE if verdict.denied_by_rule else ROLE_MISSING, tool=tool,
            env=target, revision=rev,
            required_role=snapshot.required_role(domain, tool.name, source),
            alternatives=alternatives(snapshot, roles, tool, domain),
        )
        # An approver who may not run the call may still deny someone else's (docs/protocol.md §11).
        denied.may_approve = may
        return denied
    if needs_card(tool, risk, target):
        reason = CONFIRMATION_REQUIRED
    elif snapshot.context_rule(roles, domain, tool.name, req.context):
        reason = CONFIRMATION_REQUIRED_UNTRUSTED
    else:
        reason = ALLOWED
    card = reason != ALLOWED
    approval: dict[str, Any] | None = None
    if card:
        approval = rule.answer() if rule is not None else dict(SELF_ANSWER)
    else:
        may = False
    return Decision(
        request_id=req.request_id, decision_id=uuid.uuid4().hex,
        decision=CONFIRM if card else ALLOW, allow=True,
        reason_code=reason, tool=tool.name, risk=risk,
        risk_level=RISK_LEVEL[risk], dangerous=risk == "destructive",
        confirmation_required=card, env_context=target, permission_granted=True,
        required_role=None, alternatives=None, policy_revision=rev,
        approval=approval, may_approve=may, args_digest=args_digest(req.arguments),
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
    """Every catalog tool with what this user may do with it in one environment.

    Each tool is checked as its call would be: an env-less tool in domain `*` whatever the
    environment, a tool that takes one in `environment` (in `*` when it is null, where only
    roles held everywhere and explicit env-less lines count). Context rules are not applied:
    this is the trusted-context view.
    """
    out = []
    for tool in snapshot.catalog.tools:
        env = environment if tool.environment is not None else None
        allowed = snapshot.check(roles, env or ANY_DOMAIN, tool.name).allowed
        risk = tool_risk(tool)
        card = allowed and needs_card(tool, risk, env)
        out.append({
            "tool": tool.name, "allow": allowed,
            "decision": (CONFIRM if card else ALLOW) if allowed else DENY,
            "risk": risk, "risk_level": RISK_LEVEL[risk], "dangerous": risk == "destructive",
            "confirmation_required": card,
        })
    return out
