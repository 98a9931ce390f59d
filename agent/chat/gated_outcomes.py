"""What an MCP call is, as the domain sees it: who calls (`Caller`) and each outcome of
`GatedCalls.call` (agent/chat/gated_calls.py, where the rules are), each with the
`structured()` body an adapter sends as the result's `structuredContent`.

    Done       the call ran: ss-tools' JSON answer
    Refused    not run, before anything was sent: a protocol code (docs/protocol.md §5), and for
               a denial the role it needs and what the caller may do instead (an upstream
               tool in quarantine: TOOL_FAILURE, reason `tool_definition_changed`)
    Failed     sent, and ss-tools failed it (an error, a timeout): TOOL_FAILURE
    AskInline  the card the untrusted context alone requires, for the client to ask its user
               (elicitation): the retry carries `request_state` and the answer
    Denied     the user declined or cancelled (inline, or on the page): nothing ran
    Pending    a person answers on the page (`approve_url`): the requester's own confirmation,
               or someone else's approval; `GatedCalls.result` tells what became of it
    CallStatus what became of a stored call: pending, running, done, denied, expired, failed
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agentchat.agent.gate.upstream_pins import DEFINITION_CHANGED
from agentchat.errors import ErrorCode
from agentchat.words import Lang

Answer = Literal["accept", "decline", "cancel"]
Status = Literal["pending", "running", "done", "denied", "expired", "failed"]


@dataclass(frozen=True)
class Caller:
    """Who calls, as the adapter verified them. `user_jwt` is the ss-tools user token the
    adapter obtained for this caller by token exchange (RFC 8693), never the MCP bearer: the
    sidecar and ss-tools get it, as they get a chat turn's. `azp` is the MCP token's
    authorized party; `client_name` and `client_version` are what the client says of itself
    (unverified: recorded as such)."""

    sub: str
    user_jwt: str
    azp: str | None = None
    client_name: str | None = None
    client_version: str | None = None
    lang: Lang = "en"


@dataclass(frozen=True)
class Done:
    result: Any  # ss-tools' JSON answer
    call_id: str | None = None  # a stored call's id (a write); None for a read
    kind: Literal["done"] = "done"

    def structured(self) -> Any:
        return self.result


@dataclass(frozen=True)
class Refused:
    code: ErrorCode
    detail: str
    # A denial (code FORBIDDEN): the role it needs, and what this caller may do instead, in
    # the catalog's words and the caller's language (the chat's denial card's fields).
    required_role: str | None = None
    alternatives: list[dict[str, str]] | None = None
    retry_after: int | None = None  # RATE_LIMITED: seconds to wait
    call_id: str | None = None  # the stored call this is about, if any
    # Why, where a code alone does not say: `tool_definition_changed` (TOOL_FAILURE).
    reason: str | None = None
    kind: Literal["refused"] = "refused"

    @classmethod
    def by_gate(cls, d: dict[str, Any]) -> Refused:
        """A call the gate refused before the sidecar (agent/gate/checks.py): an upstream
        tool in quarantine is TOOL_FAILURE with its reason, as chat's `tool_error` says it;
        anything else is its arguments, INVALID_REQUEST."""
        if d.get("reason_code") == DEFINITION_CHANGED:
            return cls(ErrorCode.TOOL_FAILURE, str(d.get("detail")), reason=DEFINITION_CHANGED)
        return cls(ErrorCode.INVALID_REQUEST, str(d.get("detail")))

    def structured(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": str(self.code), "detail": self.detail}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.alternatives is not None or self.required_role is not None:
            out["required_role"] = self.required_role
            out["alternatives"] = self.alternatives or []
        if self.call_id is not None:
            out["call_id"] = self.call_id
        if self.retry_after is not None:
            out["retry_after"] = self.retry_after
        return out


@dataclass(frozen=True)
class Failed:
    call_id: str | None
    detail: str  # ss-tools' error, or the timeout
    code: ErrorCode = ErrorCode.TOOL_FAILURE
    kind: Literal["failed"] = "failed"
    # Chat's `tool_error` reason where the call had one (an upstream's `upstream_unavailable`,
    # `result_too_large`, …), or `unknown_outcome`: a write that timed out may have run.
    reason: str | None = None

    def structured(self) -> dict[str, Any]:
        out = {"code": str(self.code), "detail": self.detail, "call_id": self.call_id}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


def failure_reason(events: list[dict[str, Any]]) -> str | None:
    """The reason of a call's last failure event, as chat's stream would have shown it."""
    for event in reversed(events):
        if event.get("type") == "tool_timeout" and event.get("outcome") == "unknown":
            return "unknown_outcome"
        if event.get("type") == "tool_error" and event.get("reason"):
            return str(event["reason"])
    return None


@dataclass(frozen=True)
class AskInline:
    """Ask the client's user (elicitation: one boolean `confirm`), then call again with the
    same name and arguments, `request_state` and the answer."""

    call_id: str
    prompt: str  # what the person confirms, in the caller's language
    reason: str  # why they are asked (the call comes from an MCP client)
    title: str  # the tool's title
    risk: str
    environment: str | None
    request_state: str  # sealed, opaque: user, tool, args_digest, call id, expiry
    expires_at: str  # ISO 8601
    kind: Literal["ask_inline"] = "ask_inline"


@dataclass(frozen=True)
class Denied:
    call_id: str
    detail: str
    kind: Literal["denied"] = "denied"

    def structured(self) -> dict[str, Any]:
        return {"status": "denied", "call_id": self.call_id, "detail": self.detail}


@dataclass(frozen=True)
class Pending:
    status: Literal["confirmation_required", "approval_required"]
    call_id: str
    approve_url: str  # public URL + /api/agent/ui/calls/{call_id}
    expires_at: str  # ISO 8601
    prompt: str
    risk: str
    environment: str | None
    args_digest: str
    approval: dict[str, Any] | None = None  # approvers, quorum (approval_required)
    title: str = ""
    kind: Literal["pending"] = "pending"

    def structured(self) -> dict[str, Any]:
        return {"status": self.status, "call_id": self.call_id,
                "approve_url": self.approve_url, "expires_at": self.expires_at,
                "prompt": self.prompt, "risk": self.risk, "environment": self.environment,
                "args_digest": self.args_digest, "approval": self.approval}


CallOutcome = Done | Refused | Failed | AskInline | Denied | Pending


@dataclass(frozen=True)
class CallStatus:
    """A stored call as its requester sees it (`GatedCalls.result`, the REST list)."""

    call_id: str
    status: Status
    tool: str
    environment: str | None
    args_digest: str
    ask: str  # inline | confirmation | approval: who answers its card
    prompt: str
    expires_at: str
    result: Any = None  # ss-tools' answer, once done
    error: str | None = None  # once failed
    created_at: str = ""
    approve_url: str = ""

    def structured(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "status": self.status, "result": self.result,
                "error": self.error}
