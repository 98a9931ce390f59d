"""`GET /api/assistant/history` (docs/protocol.md §9): a conversation's messages, newest page first,
with their tool cards (titled from the catalog as the stream titled them) and confirmation
outcomes. The work is the door's (`Chat.conversations.history`); the route turns cursors into
keys and back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Security

from agentchat.agent.api import cursors
from agentchat.agent.api.deps import ChatDoor, CurrentUser
from agentchat.agent.api.error_docs import BEARER, RestRoute, error_responses
from agentchat.agent.api.models import HistoryPage

router = APIRouter(prefix="/api/assistant", tags=["history"], dependencies=[Security(BEARER)],
                   route_class=RestRoute)


@router.get("/history", response_model=HistoryPage,
            responses=error_responses(400, 401, 404, 422, 503))
async def history(
    user: CurrentUser, chat: ChatDoor,
    conversation_id: Annotated[str, Query(max_length=200)],
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=512, pattern=r"^[A-Za-z0-9_-]*$",
                                        description="next_cursor of the previous page")] = None,
) -> dict[str, Any]:
    """The newest `limit` messages (oldest first within the page); `next_cursor` pages back."""
    before = cursors.decode_history_key(cursor) if cursor else None
    items, next_pos = await chat.conversations.history(
        owner=user.sub, conversation_id=conversation_id, limit=limit, before=before)
    return {"items": items,
            "next_cursor": None if next_pos is None else cursors.history_key(next_pos)}
