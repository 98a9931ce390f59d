"""What the REST routes declare about auth and errors, so the OpenAPI schema is complete: the
bearer scheme, and the `{code, detail}` body (agentchat/http_errors.py) for every error status
a route can give; and `RestRoute`, which gives FastAPI's own pre-route errors the same body.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException  # what FastAPI raises; its own subclasses it

from agentchat.agent.api.models import ErrorBody
from agentchat.http_errors import code_for_status, error_response

# Documents the scheme only: `CurrentUser` verifies the token (auto_error off, so a missing
# token is refused there with UNAUTHORIZED and our error body, not FastAPI's 403).
BEARER = HTTPBearer(auto_error=False, description="the ss-tools user JWT")

_WHEN = {
    400: "INVALID_REQUEST: a body that is not JSON, a cursor this list did not issue, or a "
         "message id used elsewhere",
    401: "UNAUTHORIZED: missing, invalid or expired user token",
    403: "FORBIDDEN: the caller may not do this (an approval: its requester, or no approver "
         "role for it now)",
    404: "NOT_FOUND: no such conversation, or another user's",
    409: "CONVERSATION_ARCHIVED: the conversation is archived; an approval's answer: "
         "STALE_CONFIRMATION, NO_PENDING_CONFIRMATION, ALREADY_ANSWERED, APPROVAL_EXPIRED",
    413: "INVALID_REQUEST: the request body is over the limit "
         "(AGENTCHAT_AGENT_TUNING__MAX_BODY_BYTES)",
    422: "INVALID_REQUEST: malformed input",
    429: "RATE_LIMITED: over the user's REST writes a minute (retryable; Retry-After)",
    500: "INTERNAL",
    503: "STORAGE_UNAVAILABLE: the database is unreachable (retryable)",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: each status with the `{code, detail}` body; 413 and 500 on
    every route (the body limit is a middleware in front of all of them)."""
    return {s: {"model": ErrorBody, "description": _WHEN[s]}
            for s in sorted({*statuses, 413, 500})}


class RestRoute(APIRoute):
    """FastAPI raises Starlette's HTTPException (400 "error parsing the body") before a route
    runs, which the app renders as `{detail}` only; here it becomes `{code, detail}` like
    every other REST error (schemathesis found the difference)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except HTTPException as exc:
                return error_response(exc.status_code, code_for_status(exc.status_code),
                                      str(exc.detail), exc.headers)

        return route
