"""What an operation gets (the world, the caller, the environments it targets) and how it fails."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentchat.catalog import Catalog
from agentchat.errors import ErrorCode, LocalError
from agentchat.identity import Principal
from agentchat.sandbox.access import readable_envs
from agentchat.sandbox.data import ENV_IDS
from agentchat.sandbox.world import World


class OpError(LocalError):
    """An operation refused or failed: HTTP status, docs/protocol.md §5 code, audit outcome."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail, status=status, code={
            404: ErrorCode.NOT_FOUND, 403: ErrorCode.FORBIDDEN}.get(
            status, ErrorCode.INVALID_REQUEST))
        self.outcome = "not_found" if status == 404 else "error"


def not_found(what: str) -> OpError:
    return OpError(404, f"{what} not found")


@dataclass(frozen=True)
class Reply:
    body: dict[str, Any]
    status: int = 200


@dataclass(frozen=True)
class OpContext:
    world: World
    catalog: Catalog
    user: Principal

    def envs(self, env_id: str | None) -> list[str]:
        """The environment asked for, or every environment the user may read."""
        return [env_id] if env_id else readable_envs(self.user, ENV_IDS)
