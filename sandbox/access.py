"""Who is calling and what they may do: both JWTs, then ss-tools' own RBAC per environment.

Every /api route but the token endpoint needs `Authorization: Bearer <service JWT>` and
`X-User-JWT: <user JWT>`; either refused is 401 and nothing is audited (the caller is unknown).
Roles: `role` (every environment) or `role@env` (docs/protocol.md §6): read needs viewer, editor or
admin; write needs editor or admin; destructive needs admin. A migration needs read on its
source and write on its target.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from agentchat.errors import TokenError
from agentchat.identity import Principal, TokenVerifier, bearer

ROLES_FOR: dict[str, frozenset[str]] = {
    "read": frozenset({"viewer", "editor", "admin"}),
    "write": frozenset({"editor", "admin"}),
    "destructive": frozenset({"admin"}),
}


@dataclass(frozen=True)
class Caller:
    service: Principal
    user: Principal


class Gatekeeper:
    """Verifies the service and user tokens of a request (keys re-read when their files change)."""

    def __init__(self, service: TokenVerifier, user: TokenVerifier) -> None:
        self.service = service
        self.user = user

    def authenticate(self, request: Request) -> Caller:
        token = bearer(request.headers)
        if token is None:
            raise TokenError("missing", "service token refused: missing Authorization: Bearer")
        try:
            service = self.service.verify(token)
        except TokenError as e:
            # Say which header was refused and why, never echo the token.
            raise TokenError(e.cause, f"service token refused: {e.cause}") from None
        try:
            user = self.user.verify(request.headers.get("x-user-jwt", "").strip() or None)
        except TokenError as e:
            raise TokenError(e.cause, f"user token (X-User-JWT) refused: {e.cause}") from None
        return Caller(service=service, user=user)

    def ready(self) -> bool:
        return bool(self.service.jwks.keys()) and bool(self.user.jwks.keys())


def allowed(user: Principal, risk: str, env: str | None) -> bool:
    """Whether the user holds a role for `risk` in `env` (None: in at least one environment)."""
    needed = ROLES_FOR[risk]
    return any(role in needed and (scope is None or env is None or scope == env)
               for role, scope in user.roles)


def readable_envs(user: Principal, envs: list[str]) -> list[str]:
    return [e for e in envs if allowed(user, "read", e)]


def refusal(user: Principal, risk: str, env: str | None, source: str | None) -> str | None:
    """Why the call is refused, or None when it may run."""
    if source is not None and not allowed(user, "read", source):
        return f"{user.sub} may not read {source} (needs viewer, editor or admin there)"
    if not allowed(user, risk, env):
        where = f"in {env}" if env else "in any environment"
        roles = ", ".join(sorted(ROLES_FOR[risk]))
        return f"{user.sub} may not {risk} {where} (needs one of: {roles})"
    return None
