"""Retention of the trail: its own setting (`AGENTCHAT_AGENT_AUDIT_RETENTION_DAYS`), never the
checkpoint pruner's. The agent's orphan sweeper (agent/chat/sweeper.py) calls `maybe_cut` on
every pass and cuts at most every `audit_prune_interval_s` on each replica; replicas cutting at
once serialize on the audit lock and the second finds nothing to cut. `agentchat audit prune`
makes the same cut on demand.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from agentchat.agent.audit import store
from agentchat.agent.storage.db import Db

log = logging.getLogger("agentchat.agent.audit")


def cutoff(days: float, now: datetime | None = None) -> datetime:
    return (now or datetime.now(UTC)) - timedelta(days=days)


class Retention:
    def __init__(self, *, db: Db, days: float, interval_s: float) -> None:
        self.db = db
        self.days = days
        self.interval_s = interval_s
        self._last: float | None = None

    async def maybe_cut(self) -> dict[str, Any] | None:
        """The cut, when one is due (never with `days` 0: keep everything)."""
        if self.days <= 0:
            return None
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval_s:
            return None
        self._last = now
        done = await store.cut(self.db, cutoff(self.days))
        if done["deleted"]:
            log.info("audit retention: cut %s rows older than %g days (anchor at row %s)",
                     done["deleted"], self.days, done["anchor_seq"])
        return done
