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
