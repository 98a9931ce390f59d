"""Error codes of the wire contract (docs/protocol.md §5) and the exceptions that carry them.

    AgentChatError                 code, detail, retryable, HTTP status
    ├── TokenError                 a JWT was refused (cause: expired, bad_signature, ...)
    └── CatalogError               the tool catalog is broken (names file, tool and field)
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    NOT_FOUND = "NOT_FOUND"
    INVALID_REQUEST = "INVALID_REQUEST"
    CONVERSATION_BUSY = "CONVERSATION_BUSY"
    CONVERSATION_ARCHIVED = "CONVERSATION_ARCHIVED"
    NO_PENDING_CONFIRMATION = "NO_PENDING_CONFIRMATION"
    STALE_CONFIRMATION = "STALE_CONFIRMATION"
    LLM_UNAVAILABLE = "LLM_UNAVAILABLE"
    POLICY_UNAVAILABLE = "POLICY_UNAVAILABLE"
    STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"
    TOOL_FAILURE = "TOOL_FAILURE"
    INTERNAL = "INTERNAL"
    # docs/protocol.md §10: a per-user limit (runs at once, submits a minute); try again shortly.
    RATE_LIMITED = "RATE_LIMITED"


# (HTTP status, retryable) per code; None where the code never travels over REST.
ERROR_TABLE: dict[ErrorCode, tuple[int | None, bool]] = {
    ErrorCode.UNAUTHORIZED: (401, False),
    ErrorCode.FORBIDDEN: (403, False),
    ErrorCode.NOT_FOUND: (404, False),
    ErrorCode.INVALID_REQUEST: (400, False),
    ErrorCode.CONVERSATION_BUSY: (409, True),
    ErrorCode.CONVERSATION_ARCHIVED: (409, False),
    ErrorCode.NO_PENDING_CONFIRMATION: (None, False),
    ErrorCode.STALE_CONFIRMATION: (None, False),
    ErrorCode.LLM_UNAVAILABLE: (None, True),
    ErrorCode.POLICY_UNAVAILABLE: (503, True),
    ErrorCode.STORAGE_UNAVAILABLE: (503, True),
    ErrorCode.TOOL_FAILURE: (None, False),
    ErrorCode.INTERNAL: (500, True),
    ErrorCode.RATE_LIMITED: (429, True),
}


class AgentChatError(Exception):
    """An error with a docs/protocol.md §5 code; `detail` is safe to show to the user."""

    def __init__(self, code: ErrorCode, detail: str, *, retryable: bool | None = None) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.retryable = ERROR_TABLE[code][1] if retryable is None else retryable

    @property
    def http_status(self) -> int:
        return ERROR_TABLE[self.code][0] or 500

    def to_dict(self) -> dict[str, object]:
        return {"code": str(self.code), "detail": self.detail}


class TokenError(AgentChatError):
    """A JWT was refused. `cause` is a short machine-readable reason, never the token."""

    def __init__(self, cause: str, detail: str | None = None) -> None:
        super().__init__(ErrorCode.UNAUTHORIZED, detail or f"token refused: {cause}")
        self.cause = cause


class CatalogError(AgentChatError):
    """The tool catalog cannot be loaded; the message names the file, tool and field."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.INTERNAL, detail, retryable=False)
