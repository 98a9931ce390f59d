"""The caller's ss-tools user token, by OAuth 2.0 Token Exchange (RFC 8693) of their MCP token.

An MCP client's token is issued for this endpoint's resource (RFC 8707) and never leaves the
agent for ss-tools or the sidecar (the MCP spec's "no token passthrough"): the agent, as a
confidential client (`AGENTCHAT_AGENT_SERVICE_CLIENT_ID` and its secret, HTTP Basic),
exchanges it at the issuer's token endpoint for a user token of the same person, which its
calls carry as a chat turn's do (docs/protocol.md §7, §12). Kept by sha256 of the MCP token
(never the token) until `REFRESH_MARGIN_S` before the exchanged one expires, so a client's
calls pay one exchange per token; concurrent first calls share one exchange.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass

import httpx
import jwt

from agentchat.errors import ErrorCode, LocalError

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
# An exchanged token is used until this long before it expires (a call takes seconds).
REFRESH_MARGIN_S = 30.0
TIMEOUT_S = 5.0


class ExchangeRefused(LocalError):
    """The issuer refused the MCP token (RFC 6749 `invalid_grant`…): the caller is not
    authenticated, 401."""

    CODE = ErrorCode.UNAUTHORIZED


class ExchangeUnavailable(LocalError):
    """The issuer did not answer, or answered nonsense: our outage, never the caller's."""

    CODE = ErrorCode.INTERNAL


@dataclass(frozen=True)
class Exchanged:
    token: str
    use_until: float  # time.time() after which a new exchange is made


class TokenExchange:
    def __init__(self, *, url: str, client_id: str, client_secret: str | None,
                 audience: str, http: httpx.AsyncClient, max_size: int = 10_000) -> None:
        self.url = url
        self.auth = httpx.BasicAuth(client_id, client_secret or "")
        self.audience = audience  # the user tokens' audience: what is asked for
        self.http = http
        self.max_size = max_size
        self._cache: dict[bytes, Exchanged] = {}
        self._inflight: dict[bytes, asyncio.Future[Exchanged]] = {}
        self.exchanges = 0  # made, for the metrics and tests

    async def user_token(self, mcp_token: str) -> str:
        """The caller's ss-tools user token; ExchangeRefused or ExchangeUnavailable."""
        key = hashlib.sha256(mcp_token.encode()).digest()
        hit = self._cache.get(key)
        if hit is not None and hit.use_until > time.time():
            return hit.token
        pending = self._inflight.get(key)
        if pending is not None:
            return (await asyncio.shield(pending)).token
        future: asyncio.Future[Exchanged] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            got = await self._exchange(mcp_token)
            self._keep(key, got)
            future.set_result(got)
            return got.token
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: a lone caller's failure is not "never retrieved"
            raise
        finally:
            del self._inflight[key]

    def _keep(self, key: bytes, got: Exchanged) -> None:
        if len(self._cache) >= self.max_size:
            now = time.time()
            for stale in [k for k, v in self._cache.items() if v.use_until <= now] or \
                    list(self._cache)[: max(1, self.max_size // 10)]:
                del self._cache[stale]
        self._cache[key] = got

    async def _exchange(self, mcp_token: str) -> Exchanged:
        self.exchanges += 1
        form = {"grant_type": GRANT, "subject_token": mcp_token,
                "subject_token_type": ACCESS_TOKEN, "audience": self.audience,
                "requested_token_type": ACCESS_TOKEN}
        try:
            resp = await self.http.post(self.url, data=form, auth=self.auth, timeout=TIMEOUT_S)
        except httpx.HTTPError:
            raise ExchangeUnavailable("the issuer's token exchange did not answer") from None
        if resp.status_code == 400:
            raise ExchangeRefused(_error_of(resp))
        if resp.status_code != 200:
            # 401 invalid_client is our configuration, not the caller's token.
            raise ExchangeUnavailable(f"the issuer's token exchange answered "
                                      f"{resp.status_code} ({_error_of(resp)})")
        try:
            body = resp.json()
            token = str(body["access_token"])
            exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
        except (ValueError, KeyError, TypeError, jwt.PyJWTError):
            raise ExchangeUnavailable("the issuer's token exchange answered no token") from None
        expires = float(exp) if isinstance(exp, int | float) else \
            time.time() + float(body.get("expires_in") or 0)
        return Exchanged(token=token, use_until=expires - REFRESH_MARGIN_S)


def _error_of(resp: httpx.Response) -> str:
    try:
        return str(resp.json().get("error") or "error")[:64]
    except ValueError:
        return "error"
