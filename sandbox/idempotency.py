"""`Idempotency-Key` for write and destructive calls: same key, same result, executed once.

A key is bound to the first request's fingerprint (operation, arguments and user): the same
fingerprint gets the stored status and body again; a different one is refused (422). A second
request with a key whose first request is still running waits for it, then replays. Only
executed calls are stored: an injected gateway failure never reached the backend, so a retry
with the same key still executes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

MAX_KEY_LENGTH = 255


@dataclass(frozen=True)
class StoredResponse:
    fingerprint: str
    status: int
    body: dict[str, Any]


def fingerprint(operation: str, args: dict[str, Any], user: str) -> str:
    return json.dumps([operation, args, user], sort_keys=True, ensure_ascii=False)


class IdempotencyStore:
    def __init__(self) -> None:
        self._done: dict[str, StoredResponse] = {}
        # key -> (lock, requests holding or waiting for it); dropped when the last one leaves.
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """The per-key lock a request holds from lookup to store (serializes one key only)."""
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0 and self._locks.get(key, (None,))[0] is lock:
                del self._locks[key]

    def get(self, key: str) -> StoredResponse | None:
        return self._done.get(key)

    def put(self, key: str, response: StoredResponse) -> None:
        self._done[key] = response

    def clear(self) -> None:
        # Locks in use stay: their holders finish and drop them.
        self._done.clear()
