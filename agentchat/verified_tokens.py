"""Verified tokens, cached by sha256(token) so the hot path skips the signature check (the
policy sidecar's two tokens on every decision; the agent's user token, which a submit shows on
each of its Gradio requests and again to /chat).

An entry lives until min(exp, the configured TTL) and only while the JWKS it was verified
against is unchanged (a rotation re-verifies at once). Failures are never cached: a refused
token costs a full verification every time, so a fixed-up key set is seen immediately.
The cache holds digests, never tokens.
"""

from __future__ import annotations

import hashlib
import time
from typing import Protocol

from agentchat.identity import Principal, TokenVerifier


class Verifier(Protocol):
    """What callers of a verifier use: a token's principal, or TokenError."""

    def verify(self, token: str | None) -> Principal: ...


class CachedVerifier:
    def __init__(self, verifier: TokenVerifier, *, ttl_s: float, max_size: int) -> None:
        self.verifier = verifier
        self.ttl_s = ttl_s
        self.max_size = max_size
        self._cache: dict[bytes, tuple[Principal, float, int]] = {}
        self.hits = 0
        self.misses = 0

    def verify(self, token: str | None) -> Principal:
        """The token's principal; raises TokenError (with its cause) when refused."""
        if not token or self.max_size == 0:
            return self.verifier.verify(token)
        key = hashlib.sha256(token.encode()).digest()
        jwks = self.verifier.jwks
        jwks.keys()  # the cheap stat: picks up a rotated key set before the cache is trusted
        now = time.time()
        hit = self._cache.get(key)
        if hit is not None and hit[1] > now and hit[2] == jwks.revision:
            self.hits += 1
            return hit[0]
        self.misses += 1
        principal = self.verifier.verify(token)
        exp = principal.claims.get("exp")
        until = now + self.ttl_s
        if isinstance(exp, int | float):
            until = min(until, float(exp))
        if until > now:
            if len(self._cache) >= self.max_size:
                # Drop the oldest entries (dicts keep insertion order); cheaper than an LRU.
                for stale in list(self._cache)[: max(1, self.max_size // 10)]:
                    del self._cache[stale]
            self._cache[key] = (principal, until, jwks.revision)
        return principal

    def clear(self) -> None:
        self._cache.clear()
