"""`GET /api/agent/audit` (docs/protocol.md §9, agent/README_rest.md): the joined audit record of
each write or destructive call, newest first, keyset-paged. Thin: the door's
`Chat.audit_log` (agent/chat/audit_log.py) says who sees what."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Security
from pydantic import BaseModel

from agentchat.agent.api import cursors
from agentchat.agent.api.deps import ChatDoor, CurrentUser
from agentchat.agent.api.error_docs import BEARER, RestRoute, error_responses
from agentchat.errors import AgentChatError, ErrorCode

router = APIRouter(prefix="/api/agent", tags=["audit"], dependencies=[Security(BEARER)],
                   route_class=RestRoute)

_NO_NUL = r"^[^\x00]*$"


class AuditStage(BaseModel):
    """One row of the chain: decision, card, answer, execution or not_run."""

    seq: int
    at: datetime
    stage: str
    detail: dict[str, Any]
    prev_hash: str
    hash: str


class AuditRecord(BaseModel):
    conversation_id: str
    call_id: str
    turn_id: str
    owner: str
    tool: str
    environment: str | None
    args_hash: str
    decision_id: str | None  # the newest decision's (a re-check's after a confirm)
    outcome: str | None      # the execution's, or not_run:<reason>; null while pending
    started_at: datetime
    updated_at: datetime
    stages: list[AuditStage]
    branch: str | None = None  # the conversation branch the call was on (docs/protocol.md §4)


class AuditPage(BaseModel):
    items: list[AuditRecord]
    next_cursor: str | None


def _aware(value: datetime | None, name: str) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise AgentChatError(ErrorCode.INVALID_REQUEST,
                             f"{name} needs a time zone (e.g. 2026-12-01T10:00:00Z)")
    return value


@router.get("/audit", response_model=AuditPage,
            responses=error_responses(400, 401, 422, 503))
async def audit(
    user: CurrentUser, chat: ChatDoor,
    conversation_id: Annotated[str | None, Query(max_length=200, pattern=_NO_NUL)] = None,
    user_id: Annotated[str | None, Query(alias="user", max_length=200, pattern=_NO_NUL,
                                         description="the conversations' owner")] = None,
    tool: Annotated[str | None, Query(max_length=200, pattern=_NO_NUL)] = None,
    environment: Annotated[str | None, Query(max_length=200, pattern=_NO_NUL)] = None,
    since: Annotated[datetime | None, Query(description="records started at or after")] = None,
    until: Annotated[datetime | None, Query(description="records started before")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=512, pattern=r"^[A-Za-z0-9_-]*$",
                                        description="next_cursor of the previous page")] = None,
) -> dict[str, Any]:
    """Your own records; the audit role's holder also every record (`role`) or an
    environment's (`role@env`)."""
    before = cursors.decode_audit_key(cursor) if cursor else None
    items, next_seq = await chat.audit_log.page(
        user, conversation_id=conversation_id, user=user_id, tool=tool,
        environment=environment, since=_aware(since, "since"), until=_aware(until, "until"),
        limit=limit, before=before)
    return {"items": items,
            "next_cursor": None if next_seq is None else cursors.audit_key(next_seq)}
