"""`/api/agent/calls` (docs/protocol.md §9, §12): the requester's side of calls made by their
MCP clients that wait for them: the pending ones, one call's status, and their answer, which
the panel's page at `/api/agent/ui/calls/{call_id}` (a call's `approve_url`) sends. Thin: the
rules are the door's `GatedCalls` (agent/chat/gated_calls.py). Only a call's requester learns
that it exists: anyone else gets NOT_FOUND."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Security
from pydantic import BaseModel, ConfigDict, Field

from agentchat.agent.api.deps import CurrentUser, GatedCallsDep, RestWriter, SameSite, UserToken
from agentchat.agent.api.error_docs import BEARER, RestRoute, error_responses
from agentchat.agent.chat import CallStatus

router = APIRouter(prefix="/api/agent/calls", tags=["calls"],
                   dependencies=[Security(BEARER), SameSite], route_class=RestRoute)


class CallAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["confirm", "deny"]
    args_digest: str = Field(min_length=1, max_length=80, pattern=r"^[^\x00]*$")


class CallItem(BaseModel):
    call_id: str
    status: str  # pending | running | done | denied | expired | failed
    tool: str
    environment: str | None
    args_digest: str
    ask: str  # inline | confirmation (the requester answers) | approval (someone else)
    prompt: str
    expires_at: str
    created_at: str
    approve_url: str
    result: Any = None  # ss-tools' answer, once done
    error: str | None = None


class CallPage(BaseModel):
    items: list[CallItem]


def item(status: CallStatus) -> dict[str, Any]:
    return {"call_id": status.call_id, "status": status.status, "tool": status.tool,
            "environment": status.environment, "args_digest": status.args_digest,
            "ask": status.ask, "prompt": status.prompt, "expires_at": status.expires_at,
            "created_at": status.created_at, "approve_url": status.approve_url,
            "result": status.result, "error": status.error}


@router.get("", response_model=CallPage, responses=error_responses(401, 422, 503))
async def list_calls(user: CurrentUser, calls: GatedCallsDep,
                     status: Literal["pending"] = "pending") -> dict[str, Any]:
    """The caller's calls waiting for an answer, newest first (at most 100)."""
    return {"items": [item(s) for s in await calls.pending(user.sub)]}


@router.get("/{call_id}", response_model=CallItem, responses=error_responses(401, 404, 503))
async def get_call(call_id: str, user: CurrentUser, calls: GatedCallsDep) -> dict[str, Any]:
    """One of the caller's calls: its card's prompt, status and, once done, its result."""
    return item(await calls.result(user.sub, call_id))


@router.post("/{call_id}", response_model=CallItem,
             responses=error_responses(401, 403, 404, 409, 422, 429, 503))
async def answer_call(call_id: str, body: CallAnswer, user: RestWriter, token: UserToken,
                      calls: GatedCallsDep) -> dict[str, Any]:
    """The requester's answer, bound to the call's `args_digest`: `confirm` re-checks with
    this token and runs the call once (the answer comes back when it has run), `deny` cancels
    it. A call someone else must approve: only `deny` (FORBIDDEN otherwise)."""
    return item(await calls.answer(user, token.raw, call_id, body.decision, body.args_digest))
