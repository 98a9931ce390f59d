"""JWT verification for every component, following RFC 8725.

- The algorithms are pinned per issuer and never taken from the token.
- Signature, `exp`, `iat`, `iss`, `aud` and `sub` are required; `nbf` is honoured; small leeway.
- Tokens over 8 KB are refused before any parsing.
- Service tokens (ours) and user tokens (ss-tools') differ in issuer, audience, algorithm, key
  set and `typ`, so one can never stand in for the other.
- Keys come from a JWKS file that is re-read when it changes (a Secret or ConfigMap swap).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from agentchat.catalog import cached_catalog
from agentchat.errors import TokenError
from agentchat.keys import SERVICE_TOKEN_TYPE, write_atomic
from agentchat.settings import SharedSettings

MAX_TOKEN_BYTES = 8 * 1024


def bearer(headers: Mapping[str, str] | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None (the one parser every
    component uses; what follows decides whether a missing token is an error)."""
    value = headers.get("authorization") if headers is not None else None
    if not value:
        return None
    scheme, _, token = str(value).partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
REQUIRED_CLAIMS = ["exp", "iat", "iss", "aud", "sub"]
# A role or environment name in the roles claim: plain characters only, so no entry can be read
# as a pattern (`*`, `admin@*`), a list (`prod|ss-dev`) or a wildcard of any other syntax.
ROLE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_LOGGED_ENTRY_CHARS = 100

log = logging.getLogger("agentchat.identity")

# Demo users of the dev issuer (docs/protocol.md §6: roles are `role` or `role@env`).
DEMO_USERS: dict[str, list[str]] = {
    "alice": ["admin"],
    "bob": ["editor@ss-dev", "editor@ss-stage", "viewer@prod"],
    "carol": ["viewer"],
    # The four-eyes demo (docs/protocol.md §11): an editor who approves others' prod deploys.
    "dave": ["editor", "approver@prod"],
}


class JwksFile:
    """A JWKS on disk, re-read when its stat changes (ConfigMaps update by swapping a symlink),
    stat'ed at most every `check_s` seconds (0: on every call)."""

    def __init__(self, path: Path, check_s: float = 0.0) -> None:
        self.path = Path(path)
        self.check_s = check_s
        self._checked = -float("inf")  # monotonic time of the last stat
        self._stamp: tuple[int, int, int] | None = None
        self._keys: dict[str, jwt.PyJWK] = {}
        self._lock = threading.Lock()
        self.revision = 0

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)  # follows the symlink, so a swapped target is seen
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def keys(self) -> dict[str, jwt.PyJWK]:
        now = time.monotonic()
        if now - self._checked < self.check_s:
            return self._keys
        self._checked = now
        stamp = self._stat()
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    self._keys = self._load() if stamp else {}
                    self._stamp = stamp
                    self.revision += 1
        return self._keys

    def _load(self) -> dict[str, jwt.PyJWK]:
        try:
            data = json.loads(self.path.read_text())
            # A broken edit keeps the keys we had; the verifier must not lose every key at once.
            return {k["kid"]: jwt.PyJWK.from_dict(k) for k in data["keys"] if "kid" in k}
        except (OSError, ValueError, KeyError, jwt.PyJWKError):
            return self._keys

    def kids(self) -> list[str]:
        return list(self.keys())


@dataclass(frozen=True)
class Principal:
    """A verified caller: subject, roles (role, env or None for every env) and all claims."""

    sub: str
    roles: tuple[tuple[str, str | None], ...] = ()
    claims: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def role_strings(self) -> list[str]:
        return [r if e is None else f"{r}@{e}" for r, e in self.roles]


def parse_roles(value: Any, environments: Collection[str], *, sub: str | None = None,
                quiet: bool = False) -> tuple[tuple[str, str | None], ...]:
    """The roles claim as (role, env or None = every environment) pairs.

    `role` holds in every environment and `role@env` in that one, where `env` must be one of
    `environments` (the catalog's). Any other entry is ignored, never widened, and logged with
    the token's `sub`: an empty role or environment (`admin@` is not admin everywhere), an
    environment the catalog does not know (`admin@qa`), or a character outside
    `[A-Za-z0-9_.-]` in either part (`admin@*`, `admin@prod|ss-dev`, `adm*n`). A claim that is
    not a string or a list of strings refuses the token. `quiet` skips the log (policy tests).
    """
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TokenError("bad_roles", "token refused: the roles claim must be a list of strings")
    known = environments if isinstance(environments, set | frozenset) else set(environments)
    out: list[tuple[str, str | None]] = []
    for item in value:
        role, at, env = item.partition("@")
        if not ROLE_NAME.fullmatch(role):
            why = "not a plain role name"
        elif not at:
            out.append((role, None))
            continue
        elif not ROLE_NAME.fullmatch(env):
            why = "not a plain environment name"
        elif env not in known:
            why = "an environment the catalog does not know"
        else:
            out.append((role, env))
            continue
        # The entry's text (shortened, repr-quoted so it cannot forge log lines) and the
        # subject only: never the token.
        if not quiet:
            log.warning("roles claim entry ignored (%s): %r, sub %r", why,
                        item[:_LOGGED_ENTRY_CHARS], sub)
    return tuple(out)


class TokenVerifier:
    """Verifies one issuer's tokens against its pinned algorithms and its JWKS file."""

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        algorithms: list[str],
        jwks: JwksFile,
        leeway_s: int = 30,
        token_type: str | None = None,
        forbidden_type: str | None = None,
        roles_claim: str | None = None,
        environments: Collection[str] | Callable[[], Collection[str]] = (),
        refused_audience: str | None = None,
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        # One token, one audience (RFC 8707): a token that also names this one (the MCP
        # endpoint's resource, for /chat's verifier; /chat's, for the MCP endpoint's) is
        # refused, so a token minted for one never serves the other.
        self.refused_audience = refused_audience
        self.algorithms = list(algorithms)
        self.jwks = jwks
        self.leeway_s = leeway_s
        self.token_type = token_type
        self.forbidden_type = forbidden_type
        self.roles_claim = roles_claim
        # The environments a `role@env` may name: a collection, or a callable for a live one
        # (the policy sidecar's current catalog, which reloads).
        self.environments = environments

    def verify(self, token: str | None) -> Principal:
        if not token:
            raise TokenError("missing", "token refused: missing")
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenError("too_large", "token refused: over 8 KB")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenError("malformed") from None
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise TokenError("bad_algorithm")
        typ = header.get("typ")
        if self.token_type is not None and typ != self.token_type:
            raise TokenError("bad_type")
        if self.forbidden_type is not None and typ == self.forbidden_type:
            raise TokenError("bad_type")
        kid = header.get("kid")
        key = self.jwks.keys().get(kid) if isinstance(kid, str) else None
        if key is None:
            raise TokenError("unknown_kid")
        if key.algorithm_name not in self.algorithms or key.algorithm_name != alg:
            raise TokenError("bad_algorithm")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError:
            raise TokenError("expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenError("not_yet_valid") from None
        except jwt.InvalidAudienceError:
            raise TokenError("bad_audience") from None
        except jwt.InvalidIssuerError:
            raise TokenError("bad_issuer") from None
        except jwt.MissingRequiredClaimError as e:
            raise TokenError("missing_claim", f"token refused: missing claim {e.claim}") from None
        except jwt.InvalidSignatureError:
            raise TokenError("bad_signature") from None
        except jwt.PyJWTError:
            raise TokenError("malformed") from None
        if self.refused_audience is not None:
            aud = claims.get("aud")
            if self.refused_audience in (aud if isinstance(aud, list) else [aud]):
                raise TokenError("bad_audience")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise TokenError("missing_claim", "token refused: missing claim sub")
        roles: tuple[tuple[str, str | None], ...] = ()
        if self.roles_claim:
            envs = self.environments() if callable(self.environments) else self.environments
            roles = parse_roles(claims.get(self.roles_claim), envs, sub=sub)
        return Principal(sub=sub, roles=roles, claims=claims)


def service_verifier(settings: SharedSettings, jwks: JwksFile | None = None) -> TokenVerifier:
    return TokenVerifier(
        issuer=settings.service_issuer,
        audience=settings.service_audience,
        algorithms=["EdDSA"],
        jwks=jwks or JwksFile(settings.jwks_path, settings.jwks_check_s),
        leeway_s=settings.jwt_leeway_s,
        token_type=SERVICE_TOKEN_TYPE,
    )


def user_verifier(settings: SharedSettings, jwks: JwksFile | None = None, *,
                  environments: Collection[str] | Callable[[], Collection[str]] | None = None,
                  audience: str | None = None, refused_audience: str | None = None,
                  ) -> TokenVerifier:
    """User tokens (ss-tools'). `role@env` roles may only name `environments`; by default the
    catalog's (`settings.catalog_path`). `audience` is the user audience unless given (the MCP
    endpoint's resource); a token naming `refused_audience` too is refused."""
    if environments is None:
        environments = frozenset(cached_catalog(str(settings.catalog_path)).environments)
    return TokenVerifier(
        issuer=settings.user_issuer,
        audience=audience or settings.user_audience,
        algorithms=settings.user_algorithms,
        jwks=jwks or JwksFile(settings.user_jwks, settings.jwks_check_s),
        leeway_s=settings.jwt_leeway_s,
        forbidden_type=SERVICE_TOKEN_TYPE,
        roles_claim=settings.roles_claim,
        environments=environments,
        refused_audience=refused_audience,
    )


class DevUserIssuer:
    """The local stand-in for ss-tools' identity provider: an RSA key in the data folder.

    Refused outside dev mode: production user tokens come from ss-tools only.
    """

    def __init__(self, settings: SharedSettings) -> None:
        if not settings.is_dev:
            raise RuntimeError("the dev user issuer is only available with AGENTCHAT_MODE=dev")
        self.settings = settings
        self.dir = settings.data_dir / "dev-issuer"
        self.private_path = self.dir / "private.pem"
        if not self.private_path.exists():
            self._generate()
        key = serialization.load_pem_private_key(self.private_path.read_bytes(), password=None)
        assert isinstance(key, rsa.RSAPrivateKey)
        self._key = key
        self.kid = json.loads(settings.user_jwks.read_text())["keys"][0]["kid"]

    def _generate(self) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        jwk.update(kid="dev-" + secrets.token_hex(4), use="sig", alg="RS256")
        write_atomic(self.private_path, pem)
        write_atomic(self.settings.user_jwks, json.dumps({"keys": [jwk]}, indent=2), 0o644)

    def mint(
        self,
        user: str,
        roles: list[str] | None = None,
        *,
        lifetime_s: int = 8 * 3600,
        now: float | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        if roles is None:
            roles = DEMO_USERS.get(user, [])
        now_i = int(time.time() if now is None else now)
        claims: dict[str, Any] = {
            "iss": self.settings.user_issuer,
            "aud": self.settings.user_audience,
            "sub": user,
            "iat": now_i,
            "exp": now_i + lifetime_s,
            self.settings.roles_claim: roles,
        }
        claims.update(extra or {})
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.kid})
