"""How the agent proves itself to an upstream MCP server: never with the user's token (that
token is for ss-tools; passing it on would let any upstream act as the user there).

Each upstream's credential is a file the operator mounts from a Secret,
`<AGENTCHAT_AGENT_UPSTREAM_SECRETS>/<server>/…`, re-read when it changes (rotation needs no
restart), by the catalog's `auth.type`:

    bearer              `token`: sent as it is
    client_credentials  `client_secret`: exchanged at `token_url` (RFC 6749 §4.4, HTTP Basic
                        as client `client_id`) for an access token, kept until shortly before
                        it expires, one exchange at a time per upstream
    jwt                 `private_key.pem`: a JWT we sign per call with the catalog's algorithm
                        (RS256 for Superset 6.1): iss, aud, sub, iat, exp (`lifetime_s`), jti,
                        and the caller's user id in `user_claim` (the upstream may log it; it
                        runs every call as one account all the same)
    none                nothing: dev mode only

A credential that is missing or refused is `UpstreamAuthError` with reason
`upstream_not_configured`; a token endpoint that cannot answer, `upstream_unavailable`.
Nothing here logs a token or a secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt

from agentchat.catalog_upstreams import UpstreamAuth
from agentchat.errors import ErrorCode, LocalError

NOT_CONFIGURED = "upstream_not_configured"
UNAVAILABLE = "upstream_unavailable"
FILES = {"bearer": "token", "client_credentials": "client_secret", "jwt": "private_key.pem"}
# An access token is used until this long before it expires (or a tenth of its life, when
# that is shorter): a call that starts with it must not arrive with it expired.
REFRESH_MARGIN_S = 30.0
# Without `expires_in` a token endpoint promises nothing: ask again after this.
UNSTATED_LIFETIME_S = 60.0


class UpstreamAuthError(LocalError):
    """No credential for an upstream, or its token endpoint refused or failed (`reason`)."""

    CODE = ErrorCode.TOOL_FAILURE

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class SecretFile:
    """A Secret's file, read again whenever its inode, size or mtime changes (a Secret's
    update swaps a symlink: a new inode)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._text = ""

    def read(self) -> str:
        try:
            st = self.path.stat()
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if key != self._seen:
                self._text = self.path.read_text(encoding="utf-8").strip()
                self._seen = key
        except (OSError, UnicodeDecodeError):
            self._seen = None
            return ""
        return self._text


@dataclass
class _Token:
    value: str
    until: float  # time.monotonic() after which it is asked for again
    secret: str   # sha256 of the secret it was got with: a rotated secret asks again


class UpstreamCredentials:
    """The Authorization header for a call to an upstream, per its catalog `auth`."""

    def __init__(self, *, folder: Path, http: httpx.AsyncClient, dev: bool,
                 clock: Callable[[], float] = time.time) -> None:
        self.folder = folder
        self.http = http  # agentchat/http_clients.py's: it keeps no cookie
        self.dev = dev
        self.clock = clock
        self._files: dict[tuple[str, str], SecretFile] = {}
        self._tokens: dict[str, _Token] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._keys: dict[str, tuple[str, Any]] = {}  # server -> its PEM's sha256, the key

    async def headers(self, server: str, auth: UpstreamAuth, *,
                      user: str | None) -> dict[str, str]:
        """`user`: the caller's id for a JWT's `user_claim` (None: a call of the agent's own,
        such as the pins' tools/list)."""
        if auth.type == "none":
            if not self.dev:
                raise UpstreamAuthError(NOT_CONFIGURED, f"upstream {server!r}: auth type none "
                                        "is refused outside dev mode")
            return {}
        secret = self.secret(server, auth.type)
        if auth.type == "bearer":
            token = secret
        elif auth.type == "client_credentials":
            token = await self._client_token(server, auth, secret)
        else:
            token = self._signed(server, auth, secret, user)
        return {"Authorization": f"Bearer {token}"}

    def invalidate(self, server: str) -> None:
        """Forget an upstream's access token (it answered 401: the next call asks anew)."""
        self._tokens.pop(server, None)

    def secret(self, server: str, kind: str) -> str:
        name = FILES[kind]
        file = self._files.get((server, name))
        if file is None:
            file = self._files[(server, name)] = SecretFile(self.folder / server / name)
        text = file.read()
        if not text:
            raise UpstreamAuthError(NOT_CONFIGURED, f"upstream {server!r}: no credential "
                                    f"(its {name} file is missing or empty)")
        return text

    async def _client_token(self, server: str, auth: UpstreamAuth, secret: str) -> str:
        fingerprint = hashlib.sha256(secret.encode()).hexdigest()
        lock = self._locks.setdefault(server, asyncio.Lock())
        async with lock:  # one exchange at a time: the others use its token
            held = self._tokens.get(server)
            if held is not None and held.secret == fingerprint and time.monotonic() < held.until:
                return held.value
            data = {"grant_type": "client_credentials"}
            if auth.scope:
                data["scope"] = auth.scope
            try:
                resp = await self.http.post(str(auth.token_url), data=data, timeout=10.0,
                                            auth=(str(auth.client_id), secret),
                                            headers={"Accept": "application/json"})
            except httpx.HTTPError as e:
                raise UpstreamAuthError(UNAVAILABLE, f"upstream {server!r}: its token "
                                        f"endpoint cannot be reached ({type(e).__name__})"
                                        ) from None
            if resp.status_code in (400, 401, 403):
                raise UpstreamAuthError(NOT_CONFIGURED, f"upstream {server!r}: its token "
                                        f"endpoint refused our client ({resp.status_code})")
            try:
                body = resp.json() if resp.status_code == 200 else None
            except ValueError:
                body = None
            value = body.get("access_token") if isinstance(body, dict) else None
            if not isinstance(value, str) or not value:
                raise UpstreamAuthError(UNAVAILABLE, f"upstream {server!r}: its token endpoint "
                                        f"gave no access token ({resp.status_code})")
            lifetime = body.get("expires_in") if isinstance(body, dict) else None
            life = float(lifetime) if isinstance(lifetime, int | float) and lifetime > 0 \
                else UNSTATED_LIFETIME_S
            until = time.monotonic() + life - min(REFRESH_MARGIN_S, life / 10)
            self._tokens[server] = _Token(value, until, fingerprint)
            return value

    def _signed(self, server: str, auth: UpstreamAuth, pem: str, user: str | None) -> str:
        digest = hashlib.sha256(pem.encode()).hexdigest()
        held = self._keys.get(server)
        if held is not None and held[0] == digest:
            key = held[1]
        else:  # parsed once per key, not per call (an RSA key takes a few ms)
            try:
                key = jwt.get_algorithm_by_name(auth.algorithm).prepare_key(pem)
            except (ValueError, TypeError, jwt.PyJWTError):
                raise UpstreamAuthError(NOT_CONFIGURED, f"upstream {server!r}: its "
                                        f"private_key.pem is not a {auth.algorithm} key"
                                        ) from None
            self._keys[server] = (digest, key)
        now = int(self.clock())
        claims: dict[str, Any] = {"iss": auth.issuer, "aud": auth.audience, "sub": auth.subject,
                                  "iat": now, "nbf": now, "exp": now + auth.lifetime_s,
                                  "jti": uuid.uuid4().hex}
        if user is not None:
            claims[auth.user_claim] = user
        return jwt.encode(claims, key, algorithm=auth.algorithm)
