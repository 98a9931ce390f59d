"""Where the agent's service JWT comes from (docs/protocol.md §8).

- a file (the operator's Secret mounted as a folder), re-read when it changes;
- or the ss-tools endpoint `POST /api/auth/service-token`, refreshed before expiry;
- or, in dev mode with neither configured, minted locally from the data folder's key ring.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import jwt

from agentchat.agent.settings import AgentSettings
from agentchat.errors import AgentChatError, ErrorCode
from agentchat.keys import ensure_ring, sign_service_token


def _expiry(token: str) -> float:
    try:
        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return 0.0
    return float(exp) if isinstance(exp, int | float) else 0.0


class ServiceTokenProvider:
    def __init__(self, settings: AgentSettings, http: httpx.AsyncClient) -> None:
        self.settings = settings
        self.http = http
        self._token: str | None = None
        self._expires = 0.0
        self._file_stamp: tuple[int, int] | None = None
        self._lock = asyncio.Lock()

    @property
    def source(self) -> str:
        if self.settings.service_token_file:
            return "file"
        if self.settings.service_token_url:
            return "endpoint"
        return "dev-keys"

    def invalidate(self) -> None:
        """Forget the cached token (the sidecar or API refused it, e.g. during a rotation)."""
        self._token = None
        self._file_stamp = None

    async def get(self) -> str:
        margin = self.settings.tuning.service_token_refresh_margin_s
        if self.source == "file":
            return self._from_file(Path(self.settings.service_token_file or ""))
        if self._token and time.time() < self._expires - margin:
            return self._token
        async with self._lock:
            if self._token and time.time() < self._expires - margin:
                return self._token
            token = await self._fetch() if self.source == "endpoint" else self._mint()
            self._token, self._expires = token, _expiry(token)
            return token

    def _from_file(self, path: Path) -> str:
        try:
            st = os.stat(path)
        except OSError:
            raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE,
                                 "the service token file is missing") from None
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp != self._file_stamp or self._token is None:
            self._token = path.read_text().strip()
            self._file_stamp = stamp
        return self._token

    async def _fetch(self) -> str:
        try:
            resp = await self.http.post(
                self.settings.service_token_url or "",
                json={"client_id": self.settings.service_client_id,
                      "client_secret": self.settings.service_client_secret},
                timeout=5.0,
            )
            resp.raise_for_status()
            return str(resp.json()["access_token"])
        except (httpx.HTTPError, KeyError, ValueError):
            raise AgentChatError(ErrorCode.POLICY_UNAVAILABLE,
                                 "cannot obtain a service token") from None

    def _mint(self) -> str:
        if not self.settings.is_dev:
            raise AgentChatError(ErrorCode.INTERNAL, "no service token source is configured")
        ring = ensure_ring(self.settings.keys_dir, self.settings.jwks_path)
        return sign_service_token(ring, issuer=self.settings.service_issuer,
                                  audience=self.settings.service_audience,
                                  lifetime_s=self.settings.service_token_lifetime_s)
