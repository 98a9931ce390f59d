"""FastAPI dependencies as Annotated aliases: the services and the calling user."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from agentchat.agent.wiring import Services
from agentchat.identity import Principal, bearer


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
