"""All REST routers of the agent service."""

from fastapi import APIRouter

from agentchat.agent.api.routes import (
    agent,
    approvals,
    audit,
    calls,
    conversations,
    health,
    history,
    runs,
    ui,
)

api_router = APIRouter()
api_router.include_router(health.router)
api_router.include_router(agent.router)
api_router.include_router(runs.router)
api_router.include_router(conversations.router)
api_router.include_router(history.router)
api_router.include_router(ui.router)
api_router.include_router(audit.router)
api_router.include_router(approvals.router)
api_router.include_router(approvals.grants_router)
api_router.include_router(calls.router)
