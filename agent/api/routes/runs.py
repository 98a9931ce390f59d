"""Runs on the REST side (docs/protocol.md §4, §9): whether a tab holds a conversation and its
newest run (what a reloaded tab joins), and Stop by run_id. Joining a run is `/chat`'s
action "join" (agent/gradio/). Thin: the rules are the door's (`Chat.stop`,
`Chat.conversations.tab_state`).

Stop is for a tab that follows a run it joined rather than submitted, where Gradio's own
cancel of the submit is not at hand (after a reconnect, a reload). The owner is checked in the
SQL (another user's run is NOT_FOUND), and the tab: only the tab that started the run may stop
it. A run live on this replica is stopped as a Gradio cancel stops it (the partial answer
stored, its status `cancelled`)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Security
from pydantic import BaseModel, StringConstraints

from agentchat.agent.api.deps import ChatDoor, CurrentUser, SameSite
from agentchat.agent.api.error_docs import BEARER, RestRoute, error_responses

# Stop refuses a cross-site browser request first (deps.same_site; reads pass through it).
router = APIRouter(prefix="/api/agent/conversations/{conversation_id}", tags=["agent"],
                   dependencies=[Security(BEARER), SameSite], route_class=RestRoute)
# /chat's tab_id (docs/protocol.md §4).
TabId = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                         pattern=r"^[A-Za-z0-9._:-]+$")]


class ActiveRun(BaseModel):
    run_id: str
    status: str  # running | completed | awaiting_confirmation | failed | cancelled | lost
    last_seq: int


class ActiveState(BaseModel):
    active: bool
    until: datetime | None
    run: ActiveRun | None  # the conversation's newest run: what a reloaded tab joins


@router.get("/active", response_model=ActiveState)
async def active(conversation_id: str, user: CurrentUser, chat: ChatDoor) -> dict[str, Any]:
    """Whether a tab holds the conversation (docs/protocol.md §4): a second tab waits; and its
    newest run, so a reloaded tab knows what to join. From PostgreSQL: the same on every
    replica."""
    state = await chat.conversations.tab_state(owner=user.sub, conversation_id=conversation_id)
    return asdict(state)


class CancelBody(BaseModel):
    tab_id: TabId


class CancelledRun(BaseModel):
    run_id: str
    status: str  # cancelled, or how it had already ended


@router.post("/runs/{run_id}/cancel", response_model=CancelledRun,
             responses=error_responses(401, 404, 409, 422, 503))
async def cancel_run(conversation_id: str, run_id: str, body: CancelBody, user: CurrentUser,
                     chat: ChatDoor) -> dict[str, Any]:
    """Stop the run; a run that already ended answers its status and nothing changes."""
    status = await chat.stop(owner=user.sub, conversation_id=conversation_id, run_id=run_id,
                             tab=body.tab_id)
    return {"run_id": run_id, "status": status}
