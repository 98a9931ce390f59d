"""`/api/agent/*`: the model's status, our public keys, and the debug view of the tool
selection. The multi-tab state and Stop are in runs.py."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from agentchat.agent.api.deps import AdminUser, ChatDoor, CurrentUser, Settings
from agentchat.keys import public_members

router = APIRouter(prefix="/api/agent", tags=["agent"])


class LlmStatus(BaseModel):
    model: str
    reachable: bool
    latency_ms: float
    checked_at: str


@router.get("/llm-status", response_model=LlmStatus)
async def get_llm_status(_: CurrentUser, chat: ChatDoor) -> dict[str, Any]:
    """Users only, and cached (AGENTCHAT_AGENT_TUNING__LLM_STATUS_CACHE_S): anonymous callers
    must not be able to make the agent call the model endpoint once per request."""
    return await chat.llm_status()


@router.get("/.well-known/jwks.json")
async def jwks(settings: Settings) -> dict[str, Any]:
    """The public keys of our service-token issuer (next, current and previous). Public (the
    ss-tools API fetches it); only public JWK members leave, whatever the file holds."""
    data: dict[str, Any] = json.loads(settings.jwks_path.read_text())
    keys = data.get("keys") if isinstance(data, dict) else None
    return {"keys": [public_members(key) for key in keys or [] if isinstance(key, dict)]}


class SelectionDebug(BaseModel):
    tools: list[str]
    prefetch: list[dict[str, Any]]
    explain: dict[str, Any]


@router.get("/debug/tool-selection", response_model=SelectionDebug)
async def debug_tool_selection(
    _: AdminUser, chat: ChatDoor,
    q: str = Query(max_length=16384), uicontext: str | None = Query(default=None, max_length=4096),
) -> SelectionDebug:
    """Which tools a message would get and why (intents, keyword hits, fallback scores).
    Only the admin role may read it: it shows how the selection can be steered."""
    plan = await chat.tool_selection(q, uicontext)
    return SelectionDebug(tools=plan.tools, prefetch=[p["args"] for p in plan.prefetch],
                          explain=plan.explain)
