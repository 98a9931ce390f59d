"""The agent's error responses: `error_response`, the one `{code, detail}` (docs/protocol.md §5)
answer of the app's handlers, `RestRoute` and the ASGI middlewares (body limit, file guard);
and what the REST routes declare about auth and errors, so the OpenAPI schema is complete:
the bearer scheme, and the body for every error status a route can give.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException  # what FastAPI raises; its own subclasses it

from agentchat.agent.api.models import ErrorBody
from agentchat.errors import ErrorCode, error_body

# Documents the scheme only: `CurrentUser` verifies the token (auto_error off, so a missing
# token is refused there with UNAUTHORIZED and our error body, not FastAPI's 403).
BEARER = HTTPBearer(auto_error=False, description="the ss-tools user JWT")

_WHEN = {
    400: "INVALID_REQUEST: a body that is not JSON, a cursor this list did not issue, or a "
         "message id used elsewhere",
    401: "UNAUTHORIZED: missing, invalid or expired user token",
    404: "NOT_FOUND: no such conversation, or another user's",
    409: "CONVERSATION_ARCHIVED: the conversation is archived",
    413: "INVALID_REQUEST: the request body is over the limit (AGENTCHAT_AGENT_MAX_BODY_BYTES)",
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


_CODES = {400: ErrorCode.INVALID_REQUEST, 401: ErrorCode.UNAUTHORIZED,
          403: ErrorCode.FORBIDDEN, 404: ErrorCode.NOT_FOUND}


def code_for_status(status: int) -> ErrorCode:
    """The code of an HTTP error raised by FastAPI or Starlette (unknown path, wrong method)."""
    return _CODES.get(status, ErrorCode.INVALID_REQUEST if status < 500 else ErrorCode.INTERNAL)


def error_response(status: int, code: ErrorCode, detail: str,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    """A `{code, detail}` response; an ASGI app too (`await error_response(...)(scope, receive,
    send)`), so the middlewares answer in the same shape."""
    return JSONResponse(error_body(code, detail), status_code=status, headers=headers)


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
