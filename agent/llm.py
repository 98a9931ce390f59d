"""The model behind the agent: the offline planner, or any OpenAI-compatible endpoint."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import httpx
from langchain_core.language_models import BaseChatModel

from agentchat.agent.planner import OfflinePlanner
from agentchat.agent.settings import OFFLINE_OBEDIENT, AgentSettings

OFFLINE = "offline"
# OFFLINE_OBEDIENT: a planner that obeys instructions found in tool results; only for the
# prompt-injection tests, which prove the policy gate and the card still stand between it and
# the API. AgentSettings refuses it outside dev.


def make_llm(settings: AgentSettings) -> BaseChatModel:
    if settings.llm in (OFFLINE, OFFLINE_OBEDIENT):
        return OfflinePlanner(token_delay_s=settings.planner_token_delay_s,
                              obey_tool_text=settings.llm == OFFLINE_OBEDIENT)
    from langchain.chat_models import init_chat_model

    kwargs: dict[str, Any] = {"timeout": settings.llm_timeout_s, "max_retries": 0,
                              "streaming": True}
    if settings.llm_base_url:
        kwargs["base_url"] = settings.llm_base_url
    if settings.llm_api_key:
        kwargs["api_key"] = settings.llm_api_key
    model = settings.llm if ":" in settings.llm else f"openai:{settings.llm}"
    return init_chat_model(model, **kwargs)


async def llm_status(settings: AgentSettings, http: httpx.AsyncClient) -> dict[str, Any]:
    """`GET /api/agent/llm-status`: is the model endpoint answering, and how fast."""
    checked = datetime.now(UTC).isoformat()
    if settings.llm in (OFFLINE, OFFLINE_OBEDIENT):
        return {"model": settings.llm, "reachable": True, "latency_ms": 0.0,
                "checked_at": checked}
    base = (settings.llm_base_url or "https://api.openai.com/v1").rstrip("/")
    started = time.monotonic()
    try:
        headers = {"Authorization": f"Bearer {settings.llm_api_key}"} if settings.llm_api_key \
            else {}
        resp = await http.get(base + "/models", headers=headers, timeout=3.0)
        reachable = resp.status_code < 500
    except httpx.HTTPError:
        reachable = False
    return {"model": settings.llm, "reachable": reachable,
            "latency_ms": round((time.monotonic() - started) * 1000, 1), "checked_at": checked}
