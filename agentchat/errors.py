"""Error codes of the wire contract (docs/protocol.md §5) and the exceptions that carry them.

Every exception class of the product is an `AgentChatError`, or a signal registered in
`SIGNALS` below; the tree, with where each lives (the leaves stay beside the code that raises
them, which keeps this module import-free; tests/core/test_error_tree.py checks this drawing
against the classes, both ways):

    AgentChatError                 code, detail, retryable, HTTP status; str: "CODE: detail"
    ├── TokenError                 a JWT was refused (cause: expired, bad_signature, ...)
    ├── CatalogError               the tool catalog is broken (names file, tool and field)
    └── LocalError                 handled inside one component; str(e) is its detail
        ├── InvalidArguments       agentchat/tool_request.py: a call's arguments (ValueError too)
        ├── SchemaTooOld           agentchat/db.py: the database is older than the code needs
        ├── TelemetryConfigError   agentchat/telemetry.py: an OTEL_* setting refused at start
        ├── MountPathClash         agent/main.py: a mount path hiding REST routes (ValueError too)
        ├── UploadRefused          agent/chat/upload_book.py: an upload over a limit (413, 429)
        ├── RefusedFile            agent/chat/attachments.py: a /chat file not the user's upload
        ├── EmbeddingsUnavailable  agent/selection/embeddings.py: the selector widens the tool set
        ├── ExchangeRefused        agent/mcp/exchange.py: the issuer refused an MCP token (401)
        ├── ExchangeUnavailable    agent/mcp/exchange.py: the issuer's token exchange is down (503)
        ├── UpstreamFailure        agent/gate/upstream_client.py: an upstream MCP call failed
        ├── ResultTooLarge         agent/gate/upstream_client.py: an upstream's answer over its cap
        ├── UpstreamAuthError      agent/gate/upstream_auth.py: no usable credential for an upstream
        ├── Unreachable            agent/gate/upstream_served.py: an upstream's tools/list unread
        ├── WireError              agent/gate/policy_wire.py: no usable answer from the sidecar
        │   └── StaleConnection    agent/gate/policy_wire.py: a kept connection closed: resent
        ├── Refused                policy/app.py: a sidecar request refused (code and status)
        ├── PolicyError            policy/rules.py: a policy folder that cannot become a snapshot
        ├── ApprovalRuleError      policy/approvals.py: approvals.yaml unreadable (ValueError too)
        ├── ReloadError            policy/reload.py: a policy, catalog or test refused a reload
        ├── GitError               policy/diff.py: a --git revision or path cannot be read
        ├── ReplayError            policy/replay.py: a --since that cannot be read (ValueError too)
        ├── ArgumentsError         sandbox/arguments.py: malformed request arguments (422)
        ├── OpError                sandbox/context.py: an operation refused (404, 403 or 422)
        ├── InvalidSpec            operator/spec.py: a spec that cannot be acted on (ValueError too)
        ├── KubeError              operator/kube.py: the Kubernetes API refused or is unreachable
        │   └── Conflict           operator/kube.py: the object changed since it was read (409)
        ├── CorruptRing            operator/handlers/handle_rotate_agentchat.py: an unreadable ring
        ├── NoDatabase             operator/handlers/handle_prune_agentchat.py: no database to prune
        ├── SchemaNotReady         operator/handlers/handle_prune_agentchat.py: not migrated enough
        └── PrunerBusy             operator/pruning.py: another pruner holds the lock

kopf's own exceptions (TemporaryError, PermanentError) stay kopf's: they are its retry signals.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


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
    # docs/protocol.md §4 "Runs": nothing to join; the events asked for are no longer kept;
    # the run's replica died (`retry` completes the turn); the replica takes no more runs.
    NO_RUN = "NO_RUN"
    JOIN_EXPIRED = "JOIN_EXPIRED"
    RUN_LOST = "RUN_LOST"
    AGENT_SATURATED = "AGENT_SATURATED"
    # docs/protocol.md §11: an approver answering twice; an approval past expiry.
    ALREADY_ANSWERED = "ALREADY_ANSWERED"
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"


# (HTTP status, retryable) per code; None where the code never travels over REST.
ERROR_TABLE: dict[ErrorCode, tuple[int | None, bool]] = {
    ErrorCode.UNAUTHORIZED: (401, False),
    ErrorCode.FORBIDDEN: (403, False),
    ErrorCode.NOT_FOUND: (404, False),
    ErrorCode.INVALID_REQUEST: (400, False),
    ErrorCode.CONVERSATION_BUSY: (409, True),
    ErrorCode.CONVERSATION_ARCHIVED: (409, False),
    # 409 over REST only from an approval's answer (§11); in a stream, the `error` event's.
    ErrorCode.NO_PENDING_CONFIRMATION: (409, False),
    ErrorCode.STALE_CONFIRMATION: (409, False),
    ErrorCode.LLM_UNAVAILABLE: (None, True),
    ErrorCode.POLICY_UNAVAILABLE: (503, True),
    ErrorCode.STORAGE_UNAVAILABLE: (503, True),
    ErrorCode.TOOL_FAILURE: (None, False),
    ErrorCode.INTERNAL: (500, True),
    ErrorCode.RATE_LIMITED: (429, True),
    ErrorCode.NO_RUN: (None, False),
    ErrorCode.JOIN_EXPIRED: (None, False),
    ErrorCode.RUN_LOST: (None, True),
    ErrorCode.AGENT_SATURATED: (None, True),
    ErrorCode.ALREADY_ANSWERED: (409, False),
    ErrorCode.APPROVAL_EXPIRED: (409, False),
}


def error_body(code: ErrorCode, detail: str) -> dict[str, str]:
    """docs/protocol.md §5's error body; each service answers with it through one response helper
    (agent/api/error_docs.py, policy/app.py, sandbox/context.py)."""
    return {"code": str(code), "detail": detail}


# Exceptions of the product outside the tree, each with why. A signal is control flow, not an
# error: it must pass through every `except AgentChatError` between its raise and its handler.
SIGNALS: dict[str, str] = {
    "agentchat.agent.storage.fencing.RunFenced":
        "the run is another replica's now: its turn stops here with no error event, caught only"
        " by the turn's task (agent/chat/turn_task.py); tool and store calls that catch"
        " AgentChatError must not turn it into an error",
}


class AgentChatError(Exception):
    """An error with a docs/protocol.md §5 code; `detail` is safe to show to the user."""

    def __init__(self, code: ErrorCode, detail: str, *, retryable: bool | None = None,
                 status: int | None = None, message: str | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(f"{code}: {detail}" if message is None else message)
        self.code = code
        self.detail = detail
        self.retryable = ERROR_TABLE[code][1] if retryable is None else retryable
        self._status = status
        self.retry_after = retry_after  # seconds; REST answers carry it as Retry-After
        # The language of the conversation it happened in, when known (its event's words).
        self.lang: str | None = None

    @property
    def http_status(self) -> int:
        """The status given, else the code's (500 for a code that never travels over REST)."""
        return self._status or ERROR_TABLE[self.code][0] or 500

    def to_dict(self) -> dict[str, str]:
        return error_body(self.code, self.detail)


class TokenError(AgentChatError):
    """A JWT was refused. `cause` is a short machine-readable reason, never the token."""

    def __init__(self, cause: str, detail: str | None = None) -> None:
        super().__init__(ErrorCode.UNAUTHORIZED, detail or f"token refused: {cause}")
        self.cause = cause


class CatalogError(AgentChatError):
    """The tool catalog cannot be loaded; the message names the file, tool and field."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.INTERNAL, detail, retryable=False)


class LocalError(AgentChatError):
    """An error one component raises and handles itself: a subclass names its `CODE` (or takes
    one per instance), and is raised with its detail, which is also its message (`str(e)`)."""

    CODE: ClassVar[ErrorCode] = ErrorCode.INTERNAL

    def __init__(self, detail: str, *, code: ErrorCode | None = None,
                 status: int | None = None) -> None:
        super().__init__(code or self.CODE, detail, status=status, message=detail)
