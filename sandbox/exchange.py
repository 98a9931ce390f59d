"""The user tokens' issuer's token exchange (RFC 8693), as the sandbox plays it in dev.

The agent's MCP endpoint (docs/protocol.md §12) accepts tokens issued for its own resource
(`aud` = its URL) and never passes them on: it exchanges each here, as a confidential client
(the sandbox's one client, HTTP Basic or form fields), for an ss-tools user token of the same
person (`aud` = the user audience, the same roles, `act: {sub: <client>}`), which its calls
carry. The sandbox signs with the dev issuer's key (agentchat/identity.py `DevUserIssuer`),
so it exists in dev only, as that issuer does.

Errors are RFC 6749 §5.2's `{error, error_description}`: 401 `invalid_client`, 400
`unsupported_grant_type`, `invalid_request` or `invalid_grant` (a subject token that is not a
valid token of this issuer for another audience). A journal (dev only) keeps a digest of every
token the sandbox's other routes receive and of every subject token exchanged here, so a test
can tell what reached ss-tools (`GET /api/sandbox/tokens`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import jwt
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from agentchat.errors import TokenError
from agentchat.identity import DevUserIssuer, JwksFile, bearer, user_verifier
from agentchat.sandbox.settings import SandboxSettings

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
JWT_TOKEN = "urn:ietf:params:oauth:token-type:jwt"
# An exchanged token lives at most this long, and never past its subject token.
MAX_LIFETIME_S = 900
EXCHANGE_PATH = "/api/auth/token"


def digest(token: str) -> str:
    """What the journal keeps of a token: never the token."""
    return hashlib.sha256(token.encode()).hexdigest()[:32]


@dataclass
class TokenJournal:
    seen: set[str] = field(default_factory=set)  # tokens on any route but the exchange
    exchanged: list[str] = field(default_factory=list)  # subject tokens, in order

    def clear(self) -> None:
        self.seen.clear()
        self.exchanged.clear()


def _oauth_error(status: int, error: str, description: str) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Basic realm="sandbox"'} if status == 401 else None
    return JSONResponse({"error": error, "error_description": description}, status_code=status,
                        headers={**(headers or {}), "Cache-Control": "no-store"})


def _client(request: Request, form: dict[str, str]) -> tuple[str, str]:
    """The client's id and secret: HTTP Basic (RFC 6749 §2.3.1) or the form's fields."""
    value = request.headers.get("authorization", "")
    scheme, _, creds = value.partition(" ")
    if scheme.lower() == "basic":
        try:
            raw = base64.b64decode(creds.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return "", ""
        client_id, _, secret = raw.partition(":")
        return unquote(client_id), unquote(secret)
    return form.get("client_id", ""), form.get("client_secret", "")


class Exchange:
    def __init__(self, settings: SandboxSettings, journal: TokenJournal) -> None:
        self.settings = settings
        self.journal = journal
        self.jwks = JwksFile(settings.user_jwks, settings.jwks_check_s)
        self._issuer: DevUserIssuer | None = None

    def issuer(self) -> DevUserIssuer:
        if self._issuer is None:
            self._issuer = DevUserIssuer(self.settings)
        return self._issuer

    async def __call__(self, request: Request) -> Response:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        client_id, secret = _client(request, form)
        expected = self.settings.client_secret.get_secret_value() \
            if self.settings.client_secret else ""
        ok_id = hmac.compare_digest(client_id.encode(), self.settings.client_id.encode())
        ok_secret = hmac.compare_digest(secret.encode(), expected.encode())
        if not (ok_id and ok_secret and expected):
            return _oauth_error(401, "invalid_client", "unknown client or wrong client secret")
        if form.get("grant_type") != GRANT:
            return _oauth_error(400, "unsupported_grant_type", "only token exchange is served")
        subject = form.get("subject_token", "")
        if not subject or form.get("subject_token_type") not in (ACCESS_TOKEN, JWT_TOKEN):
            return _oauth_error(400, "invalid_request",
                                "subject_token and an access_token or jwt subject_token_type")
        wanted = form.get("audience")
        if wanted not in (None, self.settings.user_audience):
            return _oauth_error(400, "invalid_target", "tokens are issued for ss-tools only")
        self.journal.exchanged.append(digest(subject))
        try:
            claims = self._subject_claims(subject)
        except TokenError as e:
            return _oauth_error(400, "invalid_grant", f"subject token refused: {e.cause}")
        now = int(time.time())
        lifetime = min(MAX_LIFETIME_S, int(claims["exp"]) - now)
        token = self.issuer().mint(
            claims["sub"], None, lifetime_s=lifetime, now=now,
            extra={self.settings.roles_claim: claims.get(self.settings.roles_claim, []),
                   "act": {"sub": client_id}})
        return JSONResponse({"access_token": token, "issued_token_type": ACCESS_TOKEN,
                             "token_type": "Bearer", "expires_in": lifetime},
                            headers={"Cache-Control": "no-store"})

    def _subject_claims(self, token: str) -> dict[str, Any]:
        """A valid token of this issuer for another audience than ss-tools' own (a token for
        ss-tools needs no exchange); its signature, issuer and expiry checked as any user
        token's (agentchat/identity.py)."""
        try:
            aud = jwt.decode(token, options={"verify_signature": False}).get("aud")
        except jwt.PyJWTError:
            raise TokenError("malformed") from None
        if not isinstance(aud, str) or aud == self.settings.user_audience:
            raise TokenError("bad_audience")
        verifier = user_verifier(self.settings, self.jwks, audience=aud,
                                 refused_audience=self.settings.user_audience)
        return verifier.verify(token).claims


def install(app: FastAPI, settings: SandboxSettings, journal: TokenJournal) -> None:
    """The exchange endpoint, and the journal of what reached the sandbox (dev only)."""
    app.add_api_route(EXCHANGE_PATH, Exchange(settings, journal), methods=["POST"],
                      tags=["auth"], summary="OAuth 2.0 Token Exchange (RFC 8693)")

    @app.middleware("http")
    async def note_tokens(request: Request,
                          call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.url.path != EXCHANGE_PATH:
            for token in (bearer(request.headers), request.headers.get("x-user-jwt")):
                if token:
                    journal.seen.add(digest(token.strip()))
        return await call_next(request)

    @app.get("/api/sandbox/tokens", tags=["sandbox"])
    async def tokens() -> dict[str, Any]:
        return {"seen": sorted(journal.seen), "exchanged": list(journal.exchanged)}
