"""What every request to `/api/agent/mcp` passes before the SDK reads it (docs/protocol.md §12):

1. `Origin`: a browser's request from an origin not allowed (`AGENTCHAT_AGENT_ALLOWED_ORIGINS`,
   `AGENTCHAT_AGENT_PUBLIC_URL`'s) is 403 `FORBIDDEN`, before its token is looked at; a
   request without one (an agent, curl) passes. The SDK's own DNS-rebinding check, on, then
   refuses a `Host` not ours (421).
2. The bearer: a user token whose `aud` is this endpoint's resource, and only that (RFC 8707),
   else 401 with `WWW-Authenticate: Bearer resource_metadata="…"` (RFC 9728) so a client
   finds where to sign in.
3. A `tools/call` counts against the user's calls a minute (over it 429 `RATE_LIMITED`,
   `Retry-After`); the body limit is the app's, in front (413).
4. For `tools/list` and `tools/call`, the caller's ss-tools user token, by exchange of the
   bearer (exchange.py): refused by the issuer 401, the issuer down 503.

What the handlers need of the caller rides the ASGI scope (`CallerContext`, scope key
`SCOPE_KEY`): the SDK hands each handler the request, in both eras.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.routes import build_resource_metadata_url
from pydantic import AnyHttpUrl
from starlette.types import ASGIApp, Receive, Scope, Send

from agentchat.agent.chat import PerMinute
from agentchat.agent.mcp.exchange import ExchangeRefused, ExchangeUnavailable, TokenExchange
from agentchat.asgi import read_body, replay
from agentchat.errors import AgentChatError, ErrorCode, TokenError
from agentchat.http_errors import error_response
from agentchat.identity import Principal, bearer
from agentchat.verified_tokens import Verifier
from agentchat.words import Lang

log = logging.getLogger("agentchat.agent.mcp")
SCOPE_KEY = "agentchat.mcp"
# The methods whose handlers act as the caller at ss-tools or the sidecar.
NEEDS_USER_TOKEN = frozenset({"tools/list", "tools/call"})
_LANG = re.compile(r"\s*([A-Za-z]{2})(?:-[A-Za-z0-9]+)*\s*(?:;\s*q\s*=\s*([0-9.]+))?\s*")


@dataclass(frozen=True)
class CallerContext:
    """Who is calling, as the guard verified it; never the MCP bearer itself."""

    principal: Principal
    user_jwt: str | None  # the exchanged ss-tools user token (tools/list, tools/call)
    lang: Lang
    user_agent: str | None


def origin_of(url: str) -> str:
    """`scheme://host[:port]`, lowercased; empty for none ("null" included)."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else ""


def language(accept: str | None) -> Lang:
    """Russian or English, whichever `Accept-Language` prefers of the two; English without
    either (MCP clients rarely send one)."""
    best: tuple[float, Lang] | None = None
    for part in (accept or "").split(",")[:20]:
        m = _LANG.fullmatch(part)
        if m is None or m.group(1).lower() not in ("ru", "en"):
            continue
        try:
            q = float(m.group(2)) if m.group(2) else 1.0
        except ValueError:
            continue
        lang: Lang = "ru" if m.group(1).lower() == "ru" else "en"
        if q > 0 and (best is None or q > best[0]):
            best = (q, lang)
    return best[1] if best else "en"


def metadata_url(resource: str) -> str:
    """RFC 9728 §3.1: the well-known prefix between the resource's host and its path."""
    return str(build_resource_metadata_url(AnyHttpUrl(resource)))


class Guard:
    def __init__(self, app: ASGIApp, *, verifier: Verifier, exchange: TokenExchange,
                 calls: PerMinute, origins: frozenset[str], resource: str) -> None:
        self.app = app
        self.verifier = verifier
        self.exchange = exchange
        self.calls = calls
        self.origins = origins
        self.challenge = f'Bearer resource_metadata="{metadata_url(resource)}"'

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers") or []}
        origin = headers.get("origin")
        if origin is not None and origin_of(origin) not in self.origins:
            await error_response(403, ErrorCode.FORBIDDEN,
                                 "this origin may not call the MCP endpoint")(scope, receive, send)
            return
        raw = bearer(headers)
        try:
            principal = self.verifier.verify(raw)
        except TokenError as e:
            await self._unauthorized(scope, receive, send, raw is not None, e.cause)
            return
        body = await read_body(receive) if scope.get("method") == "POST" else b""
        method = _method(body)
        user_jwt = None
        try:
            if method == "tools/call":
                self.calls.admit(principal.sub)
            if method in NEEDS_USER_TOKEN:
                assert raw is not None
                user_jwt = await self.exchange.user_token(raw)
        except ExchangeRefused as e:
            await self._unauthorized(scope, receive, send, True, f"exchange_{e}")
            return
        except ExchangeUnavailable as e:
            log.warning("token exchange failed: %s", e)
            await error_response(503, ErrorCode.INTERNAL, str(e),
                                 {"Retry-After": "5"})(scope, receive, send)
            return
        except AgentChatError as e:
            retry = {"Retry-After": str(e.retry_after)} if e.retry_after else None
            await error_response(e.http_status, e.code, e.detail, retry)(scope, receive, send)
            return
        scope[SCOPE_KEY] = CallerContext(principal=principal, user_jwt=user_jwt,
                                         lang=language(headers.get("accept-language")),
                                         user_agent=headers.get("user-agent"))
        await self.app(scope, replay(body, receive), send)

    async def _unauthorized(self, scope: Scope, receive: Receive, send: Send, presented: bool,
                            cause: str) -> None:
        # RFC 6750 §3.1: no error code when no token was presented at all.
        challenge = self.challenge + (', error="invalid_token"' if presented else "")
        detail = "a token for this MCP endpoint is required" if not presented else \
            f"token refused: {cause}"
        await error_response(401, ErrorCode.UNAUTHORIZED, detail,
                             {"WWW-Authenticate": challenge})(scope, receive, send)


def _method(body: bytes) -> str | None:
    """The JSON-RPC method of a POST body, or None (the SDK answers a malformed one)."""
    if not body:
        return None
    try:
        message: Any = json.loads(body)
    except (ValueError, RecursionError):
        return None
    method = message.get("method") if isinstance(message, dict) else None
    return method if isinstance(method, str) else None
