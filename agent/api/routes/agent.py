"""`/api/agent/*`: the model's status, our public keys, and the multi-tab gate."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from agentchat.agent.api.deps import CurrentUser, ServicesDep
from agentchat.agent.chat.request import UIContext
from agentchat.agent.storage import leases, runs
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.keys import public_members

router = APIRouter(prefix="/api/agent", tags=["agent"])


class LlmStatus(BaseModel):
    model: str
    reachable: bool
    latency_ms: float
    checked_at: str


class ActiveRun(BaseModel):
    run_id: str
    status: str  # running | completed | awaiting_confirmation | failed | cancelled | lost
    last_seq: int


class ActiveState(BaseModel):
    active: bool
    until: datetime | None
    run: ActiveRun | None  # the conversation's newest run: what a reloaded tab joins


@router.get("/llm-status", response_model=LlmStatus)
async def get_llm_status(_: CurrentUser, services: ServicesDep) -> dict[str, Any]:
    """Users only, and cached (AGENTCHAT_LLM_STATUS_CACHE_S): anonymous callers must not be
    able to make the agent call the model endpoint once per request."""
    return await services.llm_status.get()


@router.get("/.well-known/jwks.json")
async def jwks(services: ServicesDep) -> dict[str, Any]:
    """The public keys of our service-token issuer (next, current and previous). Public (the
    ss-tools API fetches it); only public JWK members leave, whatever the file holds."""
    data: dict[str, Any] = json.loads(services.settings.jwks_path.read_text())
    keys = data.get("keys") if isinstance(data, dict) else None
    return {"keys": [public_members(key) for key in keys or [] if isinstance(key, dict)]}


@router.get("/conversations/{conversation_id}/active", response_model=ActiveState)
async def active(conversation_id: str, user: CurrentUser,
                 services: ServicesDep) -> ActiveState:
    """Whether a tab holds the conversation (docs/protocol.md §4): a second tab waits; and its
    newest run, so a reloaded tab knows what to join. From PostgreSQL: the same on every
    replica."""
    lease = await leases.owned_lease(services.pool, owner=user.sub,
                                     conversation_id=conversation_id)
    row = await runs.find_run(services.pool, owner=user.sub, conversation_id=conversation_id,
                              run_id=None, lost_s=services.settings.run_lost_s)
    run = ActiveRun(run_id=row["id"], status=row["status"],
                    last_seq=row["last_seq"]) if row is not None else None
    live = run is not None and run.status == "running" and not row["stale"]  # type: ignore[index]
    if lease is None:
        return ActiveState(active=live, until=None, run=run)
    return ActiveState(active=bool(lease["active"]) or live, until=lease["until"], run=run)


class SelectionDebug(BaseModel):
    tools: list[str]
    prefetch: list[dict[str, Any]]
    explain: dict[str, Any]


@router.get("/debug/tool-selection", response_model=SelectionDebug)
async def debug_tool_selection(
    user: CurrentUser, services: ServicesDep,
    q: str = Query(max_length=16384), uicontext: str | None = Query(default=None, max_length=4096),
) -> SelectionDebug:
    """Which tools a message would get and why (intents, keyword hits, fallback scores).
    Only the admin role may read it: it shows how the selection can be steered."""
    if ("admin", None) not in user.roles:
        raise AgentChatError(ErrorCode.FORBIDDEN, "only the admin role may read this")
    try:
        ctx = UIContext.model_validate_json(uicontext).model_dump() if uicontext else None
    except ValueError:
        raise AgentChatError(ErrorCode.INVALID_REQUEST, "bad UIContext") from None
    # A worker thread, as for a turn: a 16 KB query's keywords and fallback take tens of ms.
    plan = await asyncio.to_thread(services.selection.choose, q, ctx)
    return SelectionDebug(tools=plan.tools, prefetch=[p["args"] for p in plan.prefetch],
                          explain=plan.explain)
