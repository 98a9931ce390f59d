"""What the REST routes declare about auth and errors, so the OpenAPI schema is complete:
the bearer scheme, and `{code, detail}` (docs/protocol.md §5) for every error status a route
can give.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException  # what FastAPI raises; its own subclasses it

from agentchat.agent.api.models import ErrorBody
from agentchat.errors import ErrorCode

# Documents the scheme only: `CurrentUser` verifies the token (auto_error off, so a missing
# token is refused there with UNAUTHORIZED and our error body, not FastAPI's 403).
BEARER = HTTPBearer(auto_error=False, description="the ss-tools user JWT")

_WHEN = {
    400: "INVALID_REQUEST: a body that is not JSON, a cursor this list did not issue, or a "
         "message id used elsewhere",
    401: "UNAUTHORIZED: missing, invalid or expired user token",
    404: "NOT_FOUND: no such conversation, or another user's",
    409: "CONVERSATION_ARCHIVED: the conversation is archived",
    422: "INVALID_REQUEST: malformed input",
    500: "INTERNAL",
    503: "STORAGE_UNAVAILABLE: the database is unreachable (retryable)",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: each status with the `{code, detail}` body (500 always)."""
    return {s: {"model": ErrorBody, "description": _WHEN[s]}
            for s in sorted({*statuses, 500})}


_CODES = {400: ErrorCode.INVALID_REQUEST, 401: ErrorCode.UNAUTHORIZED,
          403: ErrorCode.FORBIDDEN, 404: ErrorCode.NOT_FOUND}


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
                code = _CODES.get(exc.status_code, ErrorCode.INVALID_REQUEST
                                  if exc.status_code < 500 else ErrorCode.INTERNAL)
                return JSONResponse({"code": str(code), "detail": str(exc.detail)},
                                    status_code=exc.status_code, headers=exc.headers)

        return route
