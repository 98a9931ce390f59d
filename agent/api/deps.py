"""FastAPI dependencies as Annotated aliases: the services, the calling user, and the
same-site check of the routes that change something."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request

from agentchat.agent.settings import AgentSettings
from agentchat.agent.wiring import Services
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.identity import Principal, bearer

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Sec-Fetch-Site values a browser sends for a request the page's own origin (or the person,
# typing an address) made.
OWN_SITE = frozenset({"same-origin", "none"})


def get_services(request: Request) -> Services:
    services: Services = request.app.state.holder.get()
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def current_user(request: Request, services: ServicesDep) -> Principal:
    """The user JWT in `Authorization`; TokenError becomes 401 in the error handler."""
    return services.verifier.verify(bearer(request.headers))


CurrentUser = Annotated[Principal, Depends(current_user)]


def rest_writer(user: CurrentUser, services: ServicesDep) -> Principal:
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


def same_site(request: Request, services: ServicesDep) -> None:
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
