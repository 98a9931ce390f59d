"""A caller's MCP tool list (`GatedCalls.tools_for`, agent/chat/gated_calls.py): the catalog
tools the sidecar lets them call in at least one environment. `/v1/permissions` answers for one
environment, so a list asks once per environment and once without, in parallel.

An MCP client lists its tools before each step, so a list is kept per (user, the token's sha256,
catalog revision) for `ttl_s` (≤ 5 s, the list result's `ttlMs`: a policy reload shows within
seconds; a new catalog or another token is another key at once), at most `size` lists, the
oldest dropped first; lists asked at once for the same key share one round of requests. A
failed round is kept by nobody: the next list asks again.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict

from agentchat.agent.chat.gated_outcomes import Caller
from agentchat.agent.gate.policy_client import PolicyClient
from agentchat.catalog import Catalog

Key = tuple[str, str, str]


class ToolLists:
    def __init__(self, policy: PolicyClient, *, ttl_s: float = 2.0, size: int = 10_000) -> None:
        self.policy = policy
        self.ttl_s = ttl_s
        self.size = size
        self._kept: OrderedDict[Key, tuple[float, frozenset[str]]] = OrderedDict()
        self._asking: dict[Key, asyncio.Future[frozenset[str]]] = {}

    async def allowed(self, caller: Caller, catalog: Catalog) -> frozenset[str]:
        """The names of the tools the caller may call somewhere (UNAUTHORIZED, or
        POLICY_UNAVAILABLE, as the sidecar's client raises them)."""
        key = (caller.sub, hashlib.sha256(caller.user_jwt.encode()).hexdigest(),
               catalog.revision)
        now = time.monotonic()
        kept = self._kept.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(self._ask(caller.user_jwt, catalog))
            self._asking[key] = asking
            asking.add_done_callback(lambda done: self._settle(key, now, done))
        # Shielded: one caller gone does not cancel the round the others wait for.
        return await asyncio.shield(asking)

    async def _ask(self, user_jwt: str, catalog: Catalog) -> frozenset[str]:
        envs: list[str | None] = [None, *catalog.environments]
        allowed = await asyncio.gather(*(self.policy.permissions(
            user_jwt=user_jwt, environment=env) for env in envs))
        return frozenset().union(*allowed)

    def _settle(self, key: Key, asked_at: float, done: asyncio.Future[frozenset[str]]) -> None:
        self._asking.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return
        if self.ttl_s <= 0 or self.size <= 0:
            return
        self._kept[key] = (asked_at + self.ttl_s, done.result())
        self._kept.move_to_end(key)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
