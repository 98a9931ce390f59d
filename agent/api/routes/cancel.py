"""`POST /api/agent/conversations/{id}/runs/{run_id}/cancel` (docs/protocol.md §4, "Stop by
run_id"): Stop for a tab that follows a run it joined rather than submitted, where Gradio's
own cancel of the submit is not at hand (after a reconnect, a reload). The owner is checked in
the SQL (another user's run is NOT_FOUND), and the tab: only the tab that started the run may
stop it. A run live on this replica is stopped as a Gradio cancel stops it (the partial
answer stored, its status `cancelled`)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Security
from pydantic import BaseModel, StringConstraints

from agentchat.agent.api.deps import CurrentUser, ServicesDep
from agentchat.agent.api.errors import BEARER, RestRoute, error_responses
from agentchat.agent.storage import runs
from agentchat.errors import AgentChatError, ErrorCode

router = APIRouter(prefix="/api/agent", tags=["agent"], dependencies=[Security(BEARER)],
                   route_class=RestRoute)
# /chat's tab_id (docs/protocol.md §4).
TabId = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                         pattern=r"^[A-Za-z0-9._:-]+$")]


class CancelBody(BaseModel):
    tab_id: TabId


class CancelledRun(BaseModel):
    run_id: str
    status: str  # cancelled, or how it had already ended


@router.post("/conversations/{conversation_id}/runs/{run_id}/cancel",
             response_model=CancelledRun,
             responses=error_responses(401, 404, 409, 422, 503))
async def cancel_run(conversation_id: str, run_id: str, body: CancelBody, user: CurrentUser,
                     services: ServicesDep) -> dict[str, Any]:
    """Stop the run; a run that already ended answers its status and nothing changes."""
    row = await runs.find_run(services.pool, owner=user.sub, conversation_id=conversation_id,
                              run_id=run_id, lost_s=services.settings.run_lost_s)
    if row is None:
        raise AgentChatError(ErrorCode.NOT_FOUND, "no such run")
    if row["tab_id"] != body.tab_id:
        raise AgentChatError(ErrorCode.CONVERSATION_BUSY,
                             "another tab started this run; stop it there")
    if row["status"] != "running":
        return {"run_id": run_id, "status": row["status"]}
    live = services.hub.live.get(run_id)
    turn = services.runner.active.get(conversation_id)
    if live is None or turn is None or turn.turn_id != row["turn_id"] or turn.task is None:
        # Its replica is another one (or it just ended): that replica's cancel is not
        # reachable from here; the client may try again.
        raise AgentChatError(ErrorCode.CONVERSATION_BUSY,
                             "the run is served by another agent replica; try again")
    turn.task.cancel()
    await asyncio.wait([turn.task], timeout=services.settings.stop_wait_s)
    return {"run_id": run_id, "status": live.status if live.done else "cancelled"}
