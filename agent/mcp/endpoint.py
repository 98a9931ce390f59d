"""`POST /api/agent/mcp`: the SDK's Streamable HTTP transport, stateless (any replica answers
any request: nothing of a client is kept between requests), JSON responses, behind the guard
(guard.py), plus the RFC 9728 metadata (metadata.py). `mount` puts both on the app;
`Endpoint.running()` is entered by the app's lifespan once the services exist."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agentchat.agent.chat import PerMinute
from agentchat.agent.mcp.exchange import TokenExchange
from agentchat.agent.mcp.guard import Guard, origin_of
from agentchat.agent.mcp.metadata import metadata_router
from agentchat.agent.mcp.server import build_server
from agentchat.agent.settings import MCP_PATH, AgentSettings
from agentchat.agent.wiring import ServiceHolder
from agentchat.errors import ErrorCode
from agentchat.http_errors import error_response
from agentchat.identity import user_verifier
from agentchat.verified_tokens import CachedVerifier

# Hosts a request may name besides the public URL's and the resource's (DNS rebinding: the
# SDK refuses any other `Host` with 421): this machine, by any port.
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def allowed_origins(settings: AgentSettings) -> frozenset[str]:
    listed = [*settings.allowed_origins, settings.public_url]
    return frozenset(o for o in map(origin_of, listed) if o)


def allowed_hosts(settings: AgentSettings) -> list[str]:
    named = {urlsplit(u).netloc.lower() for u in (settings.public_url, settings.mcp_resource)}
    return sorted(h for h in named if h) + [f"{h}{p}" for h in LOCAL_HOSTS for p in ("", ":*")]


class Endpoint:
    def __init__(self, holder: ServiceHolder, settings: AgentSettings, version: str) -> None:
        self.holder = holder
        self.settings = settings
        origins = allowed_origins(settings)
        self.origins = origins
        self.manager = StreamableHTTPSessionManager(
            app=build_server(holder, version), stateless=True, json_response=True,
            max_request_body_size=settings.tuning.max_body_bytes,
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts(settings),
                allowed_origins=sorted(origins)))
        self.guard: Guard | None = None
        self.exchange: TokenExchange | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        services = self.holder.get()
        s = self.settings
        verifier = CachedVerifier(
            user_verifier(s, audience=s.mcp_resource, refused_audience=s.user_audience),
            ttl_s=s.tuning.token_cache_s, max_size=s.tuning.token_cache_size)
        self.exchange = TokenExchange(url=s.mcp_exchange_url, client_id=s.service_client_id,
                                      client_secret=s.service_client_secret,
                                      audience=s.user_audience, http=services.http)
        calls = PerMinute(s.tuning.max_rest_writes_per_minute_per_user, "MCP tool calls")
        async with self.manager.run():
            self.guard = Guard(self.manager.handle_request, verifier=verifier,
                               exchange=self.exchange, calls=calls, origins=self.origins,
                               resource=s.mcp_resource)
            try:
                yield
            finally:
                self.guard = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.guard is None:
            await error_response(503, ErrorCode.INTERNAL, "the MCP endpoint is not started",
                                 {"Retry-After": "1"})(scope, receive, send)
            return
        await self.guard(scope, receive, send)


def mount(app: FastAPI, holder: ServiceHolder, settings: AgentSettings,
          version: str) -> Endpoint | None:
    """The endpoint and its metadata on `app`; nothing when `AGENTCHAT_AGENT_MCP_ENABLED` is
    false (both paths 404)."""
    if not settings.mcp_enabled:
        return None
    endpoint = Endpoint(holder, settings, version)
    # First: one exact path, so an MCP request is not matched against every REST route
    # (3.5 % of the agent's CPU per call at one client, bench/mcp_gateway.py).
    app.router.routes.insert(0, Route(MCP_PATH, endpoint, methods=["GET", "POST", "DELETE"]))
    app.include_router(metadata_router(settings))
    return endpoint


@contextlib.asynccontextmanager
async def running(endpoint: Endpoint | None) -> AsyncIterator[Any]:
    """The app's lifespan enters this (nothing to run when the endpoint is off)."""
    if endpoint is None:
        yield None
        return
    async with endpoint.running():
        yield endpoint
