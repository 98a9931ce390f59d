"""`/api/agent/approvals` (docs/protocol.md §11): an approver's inbox, one approval
with its context, and the answer. Thin: the rules are in `agentchat.agent.chat.approvals`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Security
from pydantic import BaseModel, ConfigDict, Field

from agentchat.agent.api import cursors
from agentchat.agent.api.deps import CurrentUser, RestWriter, SameSite, ServicesDep
from agentchat.agent.api.error_docs import BEARER, RestRoute, error_responses
from agentchat.agent.chat.approvals import APPROVAL_ID, APPROVE_PATH, ApprovalAnswer, same_person
from agentchat.agent.storage import approvals as records
from agentchat.agent.storage import grants as grant_records
from agentchat.agent.storage.db import Row
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import bearer

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


def item(row: Row) -> dict[str, Any]:
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
    user: CurrentUser, services: ServicesDep,
    status: Literal["pending", "answered", "expired"] = "pending",
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=512, pattern=r"^[A-Za-z0-9_-]*$")] = None,
) -> dict[str, Any]:
    """What the caller may answer (never their own requests), newest first."""
    after = cursors.decode_approval_key(cursor) if cursor else None
    rows = await records.inbox(services.pool, me=user.sub, roles=user.roles, status=status,
                               limit=limit + 1, after=after)
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more else None
    # Never one's own, as a person (the SQL's `<>` compares raw subjects): a page may be short.
    return {"items": [item(r) for r in rows if not same_person(str(r["requester"]), user.sub)],
            "next_cursor": None if last is None else cursors.approval_key(
                last["created_at"], last["approval_id"])}


@router.get("/{approval_id}", response_model=ApprovalDetail,
            responses=error_responses(401, 404, 503))
async def get_approval(approval_id: str, user: CurrentUser,
                       services: ServicesDep) -> dict[str, Any]:
    """One approval with its context: the requester's message, the card's prompt and
    arguments, the policy rule. For its requester and its approvers; else NOT_FOUND."""
    row = await services.approvals.visible(approval_id, user)
    ctx = await records.context_of(services.pool, row)
    return {**item(row), "message": (ctx or {}).get("message"), "rule": row["rule"]}


@router.post("/{approval_id}", response_model=AnswerOut,
             responses=error_responses(401, 403, 404, 409, 422, 429, 503))
async def answer_approval(approval_id: str, body: AnswerIn, user: RestWriter,
                          services: ServicesDep, request: Request) -> dict[str, Any]:
    """The approver's answer, bound to the card's `args_digest`; the approver is checked by
    the sidecar now, with this token. The quorum's last approval (or a deny) resumes the turn."""
    token = str(bearer(request.headers))
    return await services.approvals.answer(approval_id, user, token, ApprovalAnswer(
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
async def list_grants(user: CurrentUser, services: ServicesDep) -> dict[str, Any]:
    """The caller's grants, and those they gave, newest first (at most 200)."""
    rows = await grant_records.list_grants(services.pool, user.sub)
    return {"items": [grant_records.as_item(r) for r in rows]}


@grants_router.delete("/{grant_id}", response_model=Grant,
                      responses=error_responses(401, 404, 429, 503))
async def revoke_grant(grant_id: str, user: RestWriter, services: ServicesDep) -> dict[str, Any]:
    """Revoke at once (its requester or its approver); the next call needs an approval."""
    row = (await grant_records.revoke(services.pool, grant_id, user.sub)
           if APPROVAL_ID.match(grant_id) else None)
    if row is None:
        raise AgentChatError(ErrorCode.NOT_FOUND, "no such grant")
    return grant_records.as_item(row)
