"""The replica's background sweeper: four jobs on one timer, each named for what it does.

    settle_orphans  turns another process left behind when it died (kill -9, OOM), below
    cut_audit       the audit trail's retention (agent/audit/retention.py), when due
    expire_uploads  uploads unused for `upload_expiry_s` (agent/chat/attachments.py) deleted,
                    at least every tenth of it
    prune_calls     MCP calls finished or expired longer ago than their retention deleted,
                    with their approvals (CallRetention, below), when due


A running turn's process renews its conversation's lease every `lease_s / 3`, so a turn still
`running` with no live lease and not running here is an orphan. Two ways it is settled:

- The sweeper (every `lease_s`, in every replica) marks runs without a heartbeat lost
  (agent/chat/run_hub.py: their joiners get RUN_LOST), then orphans failed (`INTERNAL`) and their
  unfinished tool calls `error`, so history is consistent even if the user never returns. It
  leaves the checkpoint alone: it holds no user token, and the run may still be finished.
- The user's next submit (agent/chat/facade.py): `retry` finishes the interrupted run from its last
  checkpoint with the same idempotency keys, so a confirmed call runs exactly once; a new
  message first answers the dangling calls so the model never sees a call without a result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime, timedelta

from agentchat.agent.audit.retention import Retention
from agentchat.agent.chat.attachments import sweep_uploads
from agentchat.agent.chat.run_hub import RunHub
from agentchat.agent.chat.turn_task import TurnRunner
from agentchat.agent.chat.upload_book import UploadBook
from agentchat.agent.storage import gated_call_rows
from agentchat.agent.storage import turns as turn_records
from agentchat.agent.storage.db import Db

log = logging.getLogger("agentchat.agent.chat.sweeper")


class CallRetention:
    """Stored MCP calls (agent/storage/gated_call_rows.py) done, failed, denied or expired
    more than `days` ago go, at most every `interval_s` on each replica (0 days: kept), in
    batches of `batch` rows, each its own short transaction under a lock timeout, at most
    `max_batches` a pass: the next pass goes on. Replicas pruning at once skip each other's
    rows. The audit trail is not touched: it has its own retention."""

    def __init__(self, *, db: Db, days: float, interval_s: float, batch: int = 500,
                 max_batches: int = 20) -> None:
        self.db = db
        self.days = days
        self.interval_s = interval_s
        self.batch = batch
        self.max_batches = max_batches
        self._last: float | None = None

    async def maybe_prune(self) -> int | None:
        """The rows deleted, when a pass was due; None otherwise."""
        now = time.monotonic()
        if self.days <= 0 or (self._last is not None and now - self._last < self.interval_s):
            return None
        self._last = now
        before = datetime.now(UTC) - timedelta(days=self.days)
        deleted = 0
        for _ in range(self.max_batches):
            n = await gated_call_rows.prune(self.db, before=before, limit=self.batch)
            deleted += n
            if n < self.batch:
                break
        if deleted:
            log.info("deleted %s MCP calls older than %g days", deleted, self.days)
        return deleted


class Sweeper:
    def __init__(self, *, pool: Db, runner: TurnRunner, hub: RunHub, lease_s: float,
                 retention: Retention | None = None, uploads: UploadBook | None = None,
                 upload_expiry_s: float | None = None,
                 calls: CallRetention | None = None) -> None:
        self.pool = pool
        self.calls = calls
        self.uploads = uploads
        self.upload_expiry_s = upload_expiry_s
        self.retention = retention
        self.runner = runner
        self.hub = hub
        self.lease_s = lease_s
        self.task: asyncio.Task[None] | None = None

    async def settle_orphans(self) -> dict[str, int]:
        # Runs without a heartbeat first: taken over (agent/chat/takeover.py), or else their
        # turns fail as RUN_LOST, which retry completes.
        await self.hub.settle_stale()
        live = [t.turn_id for t in self.runner.active.values()]
        found = await turn_records.sweep_orphans(self.pool, live, grace_s=self.lease_s)
        if found["turns"]:
            log.warning("settled %s orphaned turns (%s tool calls)", found["turns"],
                        found["calls"])
        return {"turns": int(found["turns"]), "calls": int(found["calls"])}

    async def cut_audit(self) -> None:
        if self.retention is not None:
            try:
                await self.retention.maybe_cut()
            except Exception:  # the next interval tries again; orphans are not held up
                log.warning("audit retention failed; retrying at the next interval")

    async def expire_uploads(self) -> None:
        if self.uploads is None or self.upload_expiry_s is None:
            return
        try:
            if n := await asyncio.to_thread(sweep_uploads, self.uploads, self.upload_expiry_s):
                log.info("deleted %s expired uploads", n)
        except OSError:  # the upload folder unreadable: the next interval tries again
            log.warning("the upload sweep failed; retrying at the next interval")

    async def prune_calls(self) -> None:
        if self.calls is not None:
            try:
                await self.calls.maybe_prune()
            except Exception:  # a lock not had, the database away: the next interval
                log.warning("pruning MCP calls failed; retrying at the next interval")

    @property
    def interval(self) -> float:
        """Every `lease_s`; an upload lives at most about 10 % past its expiry, however long
        the lease."""
        if self.upload_expiry_s is None:
            return self.lease_s
        return min(self.lease_s, max(1.0, self.upload_expiry_s / 10))

    async def _loop(self) -> None:
        while True:
            # A failed sweep (database down) is retried at the next interval.
            with contextlib.suppress(Exception):
                await self.settle_orphans()
            await self.cut_audit()
            await self.expire_uploads()
            await self.prune_calls()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop(), name="sweeper")

    async def aclose(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
