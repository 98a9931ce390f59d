"""`/api/assistant/conversations` (docs/protocol.md §9): create, list, search, rename, soft delete,
restore, the idempotent append after a stream ends, and the active branch. Thin: the work is
the door's (`Chat.conversations`, agent/chat/conversations.py; `Chat.switch_branch`); the
route turns cursors into keys and back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, Security, status
from pydantic import BaseModel, Field, StringConstraints

from agentchat.agent.api import cursors
from agentchat.agent.api.deps import ChatDoor, CurrentUser, RestWriter, SameSite
from agentchat.agent.api.error_docs import BEARER, RestRoute, error_responses
from agentchat.agent.api.models import (
    Conversation,
    ConversationCreate,
    ConversationPage,
    ConversationRename,
    Message,
    MessageIn,
)
from agentchat.agent.api.routes.runs import TabId

# Every write here (create, rename, delete, restore, append, branch) refuses a cross-site
# browser request first (deps.same_site; reads pass through it).
router = APIRouter(prefix="/api/assistant/conversations", tags=["conversations"],
                   dependencies=[Security(BEARER), SameSite], route_class=RestRoute)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=Conversation,
             responses=error_responses(400, 401, 422, 429, 503))
async def create_conversation(user: RestWriter, chat: ChatDoor,
                              body: ConversationCreate | None = None) -> dict[str, Any]:
    """A new conversation; its `id` is the `conversation_id` (thread_id) `/chat` takes. With no
    title, the first user message names it."""
    return await chat.conversations.create(owner=user.sub, title=body.title if body else "")


@router.get("", response_model=ConversationPage,
            responses=error_responses(400, 401, 422, 503))
async def list_conversations(
    user: CurrentUser, chat: ChatDoor,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=512, pattern=r"^[A-Za-z0-9_-]*$",
                                        description="next_cursor of the previous page")] = None,
    q: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$",
                                   description="search titles and message text, Russian "
                                               "and English, with stemming")] = None,
    include_archived: bool = False,
) -> dict[str, Any]:
    """The caller's conversations, newest activity first."""
    after = cursors.decode_conversation_key(cursor) if cursor else None
    items, next_key = await chat.conversations.page(
        owner=user.sub, limit=limit, after=after, q=q, include_archived=include_archived)
    return {"items": items,
            "next_cursor": None if next_key is None else cursors.conversation_key(*next_key)}


@router.patch("/{conversation_id}", response_model=Conversation,
              responses=error_responses(400, 401, 404, 422, 429, 503))
async def rename_conversation(conversation_id: str, body: ConversationRename,
                              user: RestWriter, chat: ChatDoor) -> dict[str, Any]:
    return await chat.conversations.rename(owner=user.sub, conversation_id=conversation_id,
                                           title=body.title)


@router.delete("/{conversation_id}", response_model=Conversation,
               responses=error_responses(401, 404, 429, 503))
async def archive_conversation(conversation_id: str, user: RestWriter,
                               chat: ChatDoor) -> dict[str, Any]:
    """Soft delete (`is_archived = true`): hidden from the list, turns refused with
    CONVERSATION_ARCHIVED, history still readable; `restore` undoes it. The uploads its
    messages used are deleted (this replica's: agent/chat/attachments.py)."""
    return await chat.conversations.archive(owner=user.sub, conversation_id=conversation_id)


@router.post("/{conversation_id}/restore", response_model=Conversation,
             responses=error_responses(401, 404, 429, 503))
async def restore_conversation(conversation_id: str, user: RestWriter,
                               chat: ChatDoor) -> dict[str, Any]:
    return await chat.conversations.restore(owner=user.sub, conversation_id=conversation_id)


@router.post("/{conversation_id}/messages", status_code=status.HTTP_201_CREATED,
             response_model=Message,
             responses={200: {"model": Message, "description": "already stored: unchanged"},
                        **error_responses(400, 401, 404, 409, 422, 429, 503)})
async def append_message(conversation_id: str, body: MessageIn, user: RestWriter,
                         chat: ChatDoor, response: Response) -> dict[str, Any]:
    """Append after stream_end: 201 when stored, 200 when a message with this `id` (the
    client's, or the final event's `message_id`) is already there, which is left unchanged."""
    message, created = await chat.conversations.append(
        owner=user.sub, conversation_id=conversation_id, message_id=body.id, role=body.role,
        content=body.content)
    if not created:
        response.status_code = status.HTTP_200_OK
    return message


class BranchBody(BaseModel):
    message_id: Annotated[str, StringConstraints(min_length=1, max_length=128,
                                                 pattern=r"^[A-Za-z0-9._:-]+$")]
    tab_id: TabId | None = Field(default=None, description="/chat's tab_id: the tab whose "
                                 "lease the switch takes (another tab's lease: 409)")


class ActiveBranch(BaseModel):
    conversation_id: str
    leaf_id: str = Field(description="the active branch's last message")


@router.post("/{conversation_id}/branch", response_model=ActiveBranch,
             responses=error_responses(400, 401, 404, 409, 422, 429, 503))
async def switch_branch(conversation_id: str, body: BranchBody, user: RestWriter,
                        chat: ChatDoor) -> dict[str, Any]:
    """Make the branch through `message_id` (one of a message's `siblings`) the active one:
    history shows it, and the next message continues it (docs/protocol.md §4, "Branches"). Refused
    with 409 CONVERSATION_BUSY while a card waits for an answer or a run is live."""
    leaf = await chat.switch_branch(
        owner=user.sub, conversation_id=conversation_id, message_id=body.message_id,
        tab=body.tab_id or f"rest:{user.sub}")
    return {"conversation_id": conversation_id, "leaf_id": leaf}
