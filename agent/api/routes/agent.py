"""`/api/agent/*`: the model's status, our public keys, and the multi-tab gate."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from agentchat.agent.api.deps import CurrentUser, ServicesDep
from agentchat.agent.llm import llm_status
from fastapi import APIRouter
from pydantic import BaseModel

router = APIRouter(prefix="/api/agent", tags=["agent"])


class LlmStatus(BaseModel):
    model: str
    reachable: bool
    latency_ms: float
    checked_at: str


class ActiveState(BaseModel):
    active: bool
    until: datetime | None


@router.get("/llm-status", response_model=LlmStatus)
async def get_llm_status(services: ServicesDep) -> dict[str, Any]:
    return await llm_status(services.settings, services.http)


@router.get("/.well-known/jwks.json")
async def jwks(services: ServicesDep) -> dict[str, Any]:
    """The public keys of our service-token issuer (next, current and previous)."""
    data: dict[str, Any] = json.loads(services.settings.jwks_path.read_text())
    return {"keys": [{k: v for k, v in key.items()} for key in data.get("keys", [])]}


@router.get("/conversations/{conversation_id}/active", response_model=ActiveState)
async def active(conversation_id: str, user: CurrentUser,
                 services: ServicesDep) -> ActiveState:
    """Whether another tab holds the conversation (PROTOCOL §4), so a second tab can wait."""
    await services.store.owned_conversation(conversation_id, user.sub)
    lease = await services.store.lease(conversation_id)
    running = conversation_id in services.runner.active
    if lease is None:
        return ActiveState(active=running, until=None)
    return ActiveState(active=bool(lease["active"]) or running, until=lease["until"])
