"""`POST /api/agent/conversations/{id}/runs/{run_id}/cancel` (docs/protocol.md §4, "Stop by
run_id"): Stop for a tab that follows a run it joined rather than submitted, where Gradio's
own cancel of the submit is not at hand (after a reconnect, a reload). The owner is checked in
the SQL (another user's run is NOT_FOUND), and the tab: only the tab that started the run may
stop it. A run live on this replica is stopped as a Gradio cancel stops it (the partial
answer stored, its status `cancelled`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Security
from pydantic import BaseModel, StringConstraints

from agentchat.agent.api.deps import CurrentUser, SameSite, ServicesDep
from agentchat.agent.api.error_docs import BEARER, RestRoute, error_responses

# Stop refuses a cross-site browser request first (deps.same_site).
router = APIRouter(prefix="/api/agent", tags=["agent"],
                   dependencies=[Security(BEARER), SameSite], route_class=RestRoute)
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
    status = await services.chat.stop(owner=user.sub, conversation_id=conversation_id,
                                      run_id=run_id, tab=body.tab_id)
    return {"run_id": run_id, "status": status}
