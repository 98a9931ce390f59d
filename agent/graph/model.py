"""The model behind the agent: the offline planner, or any OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import httpx
from langchain_core.language_models import BaseChatModel
from prometheus_client import Gauge

from agentchat.agent.graph.offline.planner import OfflinePlanner
from agentchat.agent.metrics import REGISTRY
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
    chat_model: BaseChatModel = init_chat_model(model, **kwargs)
    return chat_model


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


# At most one probe of the provider a minute per replica, whatever the cache setting says:
# the probe answers `llm-status` only (readiness never waits on it), so fresher is not needed.
LLM_PROBE_MIN_INTERVAL_S = 60.0

LLM_REACHABLE = Gauge("agentchat_llm_reachable",
                      "1 when the last probe of the model endpoint answered, else 0",
                      registry=REGISTRY)
LLM_PROBE_LATENCY = Gauge("agentchat_llm_probe_latency_seconds",
                          "How long the last probe of the model endpoint took",
                          registry=REGISTRY)


class LlmStatusProbe:
    """`llm_status` cached for `ttl_s` (at least LLM_PROBE_MIN_INTERVAL_S); callers that
    arrive while a probe runs await that same probe, so any number of requests make at most
    one outbound call per interval. Each probe also sets the metrics above."""

    def __init__(self, settings: AgentSettings, http: httpx.AsyncClient) -> None:
        self.settings = settings
        self.http = http
        self.ttl_s = max(settings.llm_status_cache_s, LLM_PROBE_MIN_INTERVAL_S)
        self._value: dict[str, Any] | None = None
        self._at = 0.0
        self._inflight: asyncio.Future[dict[str, Any]] | None = None

    async def get(self) -> dict[str, Any]:
        if self._value is not None and time.monotonic() - self._at < self.ttl_s:
            return self._value
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._probe())
        # shield: a caller that disconnects must not cancel the probe the others wait for.
        return await asyncio.shield(self._inflight)

    async def _probe(self) -> dict[str, Any]:
        try:
            value = await llm_status(self.settings, self.http)
            self._value, self._at = value, time.monotonic()
            LLM_REACHABLE.set(1 if value["reachable"] else 0)
            LLM_PROBE_LATENCY.set(value["latency_ms"] / 1000)
            return value
        finally:
            self._inflight = None

