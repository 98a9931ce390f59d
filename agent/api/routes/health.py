"""Liveness, readiness (what this pod needs: the database pool and the sidecar) and metrics.

The model endpoint is not part of readiness: a slow or failing provider would take every
replica out of the Service, and the page, history and REST API with it. Its state is the
cached `llm-status` route and the `agentchat_llm_reachable` metric (agent/graph/model.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agentchat.agent.api.deps import ChatDoor, DbPool, HttpClient, Settings
from agentchat.agent.metrics import REGISTRY

router = APIRouter(tags=["health"])


@router.get("/livez")
async def livez() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(pool: DbPool, http: HttpClient, settings: Settings,
                 chat: ChatDoor) -> JSONResponse:
    async def database() -> str | None:
        try:
            async with pool.connection(timeout=2) as conn:
                await conn.execute("SELECT 1")
        except Exception as e:
            return f"database: {type(e).__name__}"
        return None

    async def sidecar() -> str | None:
        try:
            resp = await http.get(settings.policy_url.rstrip("/") + "/readyz", timeout=1.0)
        except httpx.HTTPError as e:
            return f"policy sidecar: {type(e).__name__}"
        return None if resp.status_code == 200 else f"policy sidecar: {resp.status_code}"

    problems = [p for p in await asyncio.gather(database(), sidecar()) if p]
    if chat.draining:  # SIGTERM: out of the Service while live runs finish
        problems.append("draining: this replica takes no new runs")
    body: dict[str, Any] = {"status": "ok" if not problems else "unavailable",
                            "problems": problems}
    return JSONResponse(body, status_code=200 if not problems else 503)


@router.get("/metrics")
async def metrics() -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
