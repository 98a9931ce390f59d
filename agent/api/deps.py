"""FastAPI dependencies as `Annotated` aliases (the full-stack FastAPI template's `deps.py`):
each route names the few things it uses, never the whole of what `wiring.py` built.

    Settings      the agent's settings
    DbPool        the database pool (readiness)
    HttpClient    the shared outbound client (readiness asks the sidecar)
    ChatDoor      the chat domain's door, `agentchat.agent.chat.Chat`
    ApprovalsDep  approvals by someone else, `agentchat.agent.chat.Approvals`
    GatedCallsDep MCP calls waiting for their requester, `agentchat.agent.chat.GatedCalls`
    DevIssuer     the dev issuer of the demo users' tokens; None outside dev
    UserToken     the bearer, parsed and verified once per request (401 in the error handler)
    CurrentUser   its principal
    AdminUser     a user holding the admin role, else 403 FORBIDDEN
    RestWriter    a user within their REST writes a minute, else 429 RATE_LIMITED
    SameSite      the cross-site refusal on every router with writes
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Protocol
from urllib.parse import urlsplit

import httpx
from fastapi import Depends, Request
from psycopg_pool import AsyncConnectionPool

from agentchat.agent.chat import Approvals, Chat, GatedCalls
from agentchat.agent.settings import AgentSettings
from agentchat.agent.wiring import Services
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import DevUserIssuer, Principal, bearer

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Sec-Fetch-Site values a browser sends for a request the page's own origin (or the person,
# typing an address) made.
OWN_SITE = frozenset({"same-origin", "none"})
ADMIN = ("admin", None)  # the admin role everywhere (docs/protocol.md §6)


def _services(request: Request) -> Services:
    """What the lifespan built; only the aliases below read it."""
    services: Services = request.app.state.holder.get()
    return services


_Services = Annotated[Services, Depends(_services)]


def _settings(services: _Services) -> AgentSettings:
    return services.settings


def _pool(services: _Services) -> AsyncConnectionPool:
    return services.pool


def _http(services: _Services) -> httpx.AsyncClient:
    return services.http


def _chat(services: _Services) -> Chat:
    return services.chat


def _approvals(services: _Services) -> Approvals:
    return services.approvals


def _gated_calls(services: _Services) -> GatedCalls:
    return services.gated_calls


def _dev_issuer(services: _Services) -> DevUserIssuer | None:
    return services.dev_issuer


Settings = Annotated[AgentSettings, Depends(_settings)]
DbPool = Annotated[AsyncConnectionPool, Depends(_pool)]
HttpClient = Annotated[httpx.AsyncClient, Depends(_http)]
ChatDoor = Annotated[Chat, Depends(_chat)]
ApprovalsDep = Annotated[Approvals, Depends(_approvals)]
GatedCallsDep = Annotated[GatedCalls, Depends(_gated_calls)]
DevIssuer = Annotated[DevUserIssuer | None, Depends(_dev_issuer)]


@dataclass(frozen=True)
class VerifiedToken:
    """The caller's bearer as sent (an approver's answer runs calls under it,
    docs/protocol.md §11) and the principal it was verified as."""

    raw: str
    principal: Principal


def user_token(request: Request, services: _Services) -> VerifiedToken:
    """The user JWT in `Authorization`, verified once per request (FastAPI caches a
    dependency within a request); TokenError becomes 401 in the error handler."""
    raw = bearer(request.headers)
    principal = services.verifier.verify(raw)
    return VerifiedToken(raw=str(raw), principal=principal)


UserToken = Annotated[VerifiedToken, Depends(user_token)]


def current_user(token: UserToken) -> Principal:
    return token.principal


CurrentUser = Annotated[Principal, Depends(current_user)]


def admin_user(user: CurrentUser) -> Principal:
    """Only the admin role, everywhere: 403 FORBIDDEN for anyone else."""
    if ADMIN not in user.roles:
        raise AgentChatError(ErrorCode.FORBIDDEN, "only the admin role may read this")
    return user


AdminUser = Annotated[Principal, Depends(admin_user)]


def rest_writer(user: CurrentUser, services: _Services) -> Principal:
    """The calling user, within their REST writes a minute (create, rename, delete, restore,
    append: each row and search index entry costs the database): over it 429 RATE_LIMITED
    with Retry-After, before anything is stored (per replica, like /chat's limits)."""
    services.rest_writes.admit(user.sub)
    return user


RestWriter = Annotated[Principal, Depends(rest_writer)]


def origin_of(url: str) -> str:
    """`scheme://host[:port]`, lowercased, of a URL or an Origin header; empty for none."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else ""


def allowed_origins(settings: AgentSettings) -> frozenset[str]:
    listed = [*settings.allowed_origins, settings.public_url]
    return frozenset(o for o in map(origin_of, listed) if o)


class _WithSettings(Protocol):
    @property
    def settings(self) -> AgentSettings: ...


def same_site(request: Request, services: Annotated[_WithSettings, Depends(_services)]) -> None:
    """A browser's request from another site changes nothing (docs/protocol.md §9): behind an
    ingress that signs people in by cookie and injects `Authorization`, a page elsewhere could
    otherwise make their browser create, delete or restore a conversation. Refused with 403
    FORBIDDEN, before the token or the write rate is looked at, when a browser says the
    request is cross-site or same-site (`Sec-Fetch-Site`) or its `Origin` is neither this
    host, `AGENTCHAT_AGENT_PUBLIC_URL`'s, nor one of `AGENTCHAT_AGENT_ALLOWED_ORIGINS`. A
    request with neither header is not a browser's (curl, the ss-tools backend): it passes.
    Reads (GET, HEAD, OPTIONS) pass: they change nothing. On every router with writes."""
    if request.method in SAFE_METHODS:
        return
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    if origin is None and site is None:
        return
    if site in OWN_SITE:
        return
    if origin is not None:
        got = origin_of(origin)  # "null" (a sandboxed frame, a file) has none: refused
        host = (request.headers.get("host") or "").lower()
        if got and (got in allowed_origins(services.settings)
                    or (site is None and urlsplit(got).netloc == host)):
            return
    raise AgentChatError(ErrorCode.FORBIDDEN,
                         "a request from another site may not change anything here")


SameSite = Depends(same_site)
