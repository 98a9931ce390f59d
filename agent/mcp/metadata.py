"""The endpoint's OAuth 2.0 Protected Resource Metadata (RFC 9728), what a client reads after
a 401 to learn where to get a token: `resource` (the audience its token must carry, RFC 8707),
`authorization_servers` (the user tokens' issuer), `bearer_methods_supported: ["header"]`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from agentchat.agent.settings import MCP_PATH, AgentSettings

WELL_KNOWN = "/.well-known/oauth-protected-resource"
METADATA_PATH = WELL_KNOWN + MCP_PATH


def resource_metadata(settings: AgentSettings) -> dict[str, Any]:
    return {"resource": settings.mcp_resource,
            "authorization_servers": [settings.user_issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "AgentChat: ss-tools through the gate"}


def metadata_router(settings: AgentSettings) -> APIRouter:
    router = APIRouter(tags=["mcp"])
    body = resource_metadata(settings)

    @router.get(METADATA_PATH, summary="The MCP endpoint's protected resource metadata")
    async def protected_resource() -> JSONResponse:
        # Public and the same for everyone: a client may cache it an hour.
        return JSONResponse(body, headers={"Cache-Control": "public, max-age=3600"})

    return router
