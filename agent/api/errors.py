"""What the REST routes declare about auth and errors, so the OpenAPI schema is complete:
the bearer scheme, and `{code, detail}` (PROTOCOL §5) for every error status a route can give.
"""

from __future__ import annotations

from typing import Any

from agentchat.agent.rest_models import ErrorBody
from fastapi.security import HTTPBearer

# Documents the scheme only: `CurrentUser` verifies the token (auto_error off, so a missing
# token is refused there with UNAUTHORIZED and our error body, not FastAPI's 403).
BEARER = HTTPBearer(auto_error=False, description="the ss-tools user JWT")

_WHEN = {
    400: "INVALID_REQUEST: a cursor this list did not issue, or a message id used elsewhere",
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
