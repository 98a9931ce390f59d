"""`/api/agent/approvals` (docs/protocol.md §11): an approver's inbox, one approval
with its context, and the answer; `/api/agent/grants`, the grants they gave. Thin: the rules
are the door's `Approvals` (agent/chat/approvals.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Security
from pydantic import BaseModel, ConfigDict, Field

from agentchat.agent.api import cursors
from agentchat.agent.api.deps import ApprovalsDep, CurrentUser, RestWriter, SameSite, UserToken
from agentchat.agent.api.error_docs import BEARER, RestRoute, error_responses
from agentchat.agent.chat import APPROVE_PATH, ApprovalAnswer

router = APIRouter(prefix="/api/agent/approvals", tags=["approvals"],
                   dependencies=[Security(BEARER), SameSite], route_class=RestRoute)

class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"]
    args_digest: str = Field(min_length=1, max_length=80, pattern=r"^[^\x00]*$")
    comment: str = Field(default="", max_length=1000, pattern=r"^[^\x00]*$")
    # Approve, and let the requester's same calls (tool, environment, object) run without a
    # second approval for this long; at most the rule's grant_max_minutes.
    grant_minutes: int | None = Field(default=None, ge=1, le=1440)


class AnswerOut(BaseModel):
    approval_id: str
    status: str  # pending (more approvals needed) | approved | denied
    approvals: int
    quorum: int
    run_id: str | None  # the resumed run, when this answer decided it
    grant_id: str | None  # the time-boxed grant this approval gave, if asked


class ApproverAnswer(BaseModel):
    approver: str
    decision: str
    comment: str
    channel: str
    at: datetime


class ApprovalItem(BaseModel):
    approval_id: str
    conversation_id: str
    requester: str
    tool_name: str
    title: str | None
    prompt: str | None
    environment: str | None
    risk: str | None
    tool_args: dict[str, Any]
    # A batched card's calls (docs/protocol.md §11), approved together; None for one call.
    calls: list[dict[str, Any]] | None = None
    args_digest: str
    approvers: list[str]
    quorum: int
    status: str  # pending | approved | denied | cancelled | expired
    answers: list[ApproverAnswer]
    created_at: datetime
    expires_at: datetime
    escalated_at: datetime | None
    approve_url: str


class ApprovalPage(BaseModel):
    items: list[ApprovalItem]
    next_cursor: str | None


class ApprovalDetail(ApprovalItem):
    message: str | None  # the requester's message of the turn
    rule: dict[str, Any]  # the policy rule (approvals.yaml) behind it


def item(row: dict[str, Any]) -> dict[str, Any]:
    card = row["card"] or {}
    return {"approval_id": row["approval_id"], "conversation_id": row["conversation_id"],
            "requester": row["requester"], "tool_name": row["tool"],
            "title": card.get("title"), "prompt": card.get("prompt"),
            "environment": row["environment"], "risk": card.get("risk"),
            "tool_args": card.get("tool_args") or {}, "calls": card.get("calls"),
            "args_digest": row["args_digest"],
            "approvers": row["approvers"], "quorum": row["quorum"], "status": row["status"],
            "answers": row["answers"], "created_at": row["created_at"],
            "expires_at": row["expires_at"], "escalated_at": row["escalated_at"],
            "approve_url": APPROVE_PATH + row["approval_id"]}


@router.get("", response_model=ApprovalPage, responses=error_responses(400, 401, 422, 503))
async def list_approvals(
    user: CurrentUser, approvals: ApprovalsDep,
    status: Literal["pending", "answered", "expired"] = "pending",
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=512, pattern=r"^[A-Za-z0-9_-]*$")] = None,
) -> dict[str, Any]:
    """What the caller may answer (never their own requests), newest first."""
    after = cursors.decode_approval_key(cursor) if cursor else None
    rows, next_key = await approvals.inbox(user, status=status, limit=limit, after=after)
    return {"items": [item(r) for r in rows],
            "next_cursor": None if next_key is None else cursors.approval_key(*next_key)}


@router.get("/{approval_id}", response_model=ApprovalDetail,
            responses=error_responses(401, 404, 503))
async def get_approval(approval_id: str, user: CurrentUser,
                       approvals: ApprovalsDep) -> dict[str, Any]:
    """One approval with its context: the requester's message, the card's prompt and
    arguments, the policy rule. For its requester and its approvers; else NOT_FOUND."""
    row, message = await approvals.detail(approval_id, user)
    return {**item(row), "message": message, "rule": row["rule"]}


@router.post("/{approval_id}", response_model=AnswerOut,
             responses=error_responses(401, 403, 404, 409, 422, 429, 503))
async def answer_approval(approval_id: str, body: AnswerIn, user: RestWriter,
                          token: UserToken, approvals: ApprovalsDep) -> dict[str, Any]:
    """The approver's answer, bound to the card's `args_digest`; the approver is checked by
    the sidecar now, with this token. The quorum's last approval (or a deny) resumes the turn."""
    return await approvals.answer(approval_id, user, token.raw, ApprovalAnswer(
        decision=body.decision, args_digest=body.args_digest, comment=body.comment,
        grant_minutes=body.grant_minutes))


grants_router = APIRouter(prefix="/api/agent/grants", tags=["approvals"],
                          dependencies=[Security(BEARER), SameSite], route_class=RestRoute)


class Grant(BaseModel):
    grant_id: str
    approval_id: str
    requester: str
    tool: str
    environment: str | None
    object_key: str  # "v2:" + the call's arguments but free text, canonical JSON
    granted_by: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    live: bool


class GrantList(BaseModel):
    items: list[Grant]


@grants_router.get("", response_model=GrantList, responses=error_responses(401, 503))
async def list_grants(user: CurrentUser, approvals: ApprovalsDep) -> dict[str, Any]:
    """The caller's grants, and those they gave, newest first (at most 200)."""
    return {"items": await approvals.grants(user)}


@grants_router.delete("/{grant_id}", response_model=Grant,
                      responses=error_responses(401, 404, 429, 503))
async def revoke_grant(grant_id: str, user: RestWriter,
                       approvals: ApprovalsDep) -> dict[str, Any]:
    """Revoke at once (its requester or its approver); the next call needs an approval."""
    return await approvals.revoke_grant(grant_id, user)
