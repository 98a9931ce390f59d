"""What a replica does about turns another process left behind when it died (kill -9, OOM).

A running turn's process renews its conversation's lease every `lease_s / 3`, so a turn still
`running` with no live lease and not running here is an orphan. Two ways it is settled:

- The sweeper (every `lease_s`, in every replica) marks runs without a heartbeat lost
  (agent/chat/runs.py: their joiners get RUN_LOST), then orphans failed (`INTERNAL`) and their
  unfinished tool calls `error`, so history is consistent even if the user never returns. It
  leaves the checkpoint alone: it holds no user token, and the run may still be finished.
- The user's next submit (`ChatService`): `retry` finishes the interrupted run from its last
  checkpoint with the same idempotency keys, so a confirmed call runs exactly once; a new
  message first answers the dangling calls so the model never sees a call without a result.

The sweeper also applies the audit trail's retention (agent/audit/retention.py), when due, and
deletes uploads unused for `upload_expiry_s` (agent/chat/uploads.py), at least every tenth of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from agentchat.agent.audit.retention import Retention
from agentchat.agent.chat.runs import RunHub
from agentchat.agent.chat.turns import TurnRunner
from agentchat.agent.chat.uploads import sweep_uploads
from agentchat.agent.storage import turns as turn_records
from agentchat.agent.storage.db import Db

log = logging.getLogger("agentchat.agent.chat.recovery")


class OrphanSweeper:
    def __init__(self, *, pool: Db, runner: TurnRunner, hub: RunHub, lease_s: float,
                 retention: Retention | None = None,
                 upload_expiry_s: float | None = None) -> None:
        self.pool = pool
        self.upload_expiry_s = upload_expiry_s
        self.retention = retention
        self.runner = runner
        self.hub = hub
        self.lease_s = lease_s
        self.task: asyncio.Task[None] | None = None

    async def sweep(self) -> dict[str, int]:
        # Runs without a heartbeat first: their turns fail as RUN_LOST, which retry completes.
        await self.hub.mark_lost()
        live = [t.turn_id for t in self.runner.active.values()]
        found = await turn_records.sweep_orphans(self.pool, live, grace_s=self.lease_s)
        if found["turns"]:
            log.warning("settled %s orphaned turns (%s tool calls)", found["turns"],
                        found["calls"])
        return {"turns": int(found["turns"]), "calls": int(found["calls"])}

    async def _loop(self) -> None:
        while True:
            # A failed sweep (database down) is retried at the next interval.
            with contextlib.suppress(Exception):
                await self.sweep()
            if self.retention is not None:
                try:
                    await self.retention.maybe_cut()
                except Exception:  # the next interval tries again; orphans are not held up
                    log.warning("audit retention failed; retrying at the next interval")
            interval = self.lease_s
            if self.upload_expiry_s is not None:
                try:
                    if n := await asyncio.to_thread(sweep_uploads, self.upload_expiry_s):
                        log.info("deleted %s expired uploads", n)
                except OSError:  # the upload folder unreadable: the next interval tries again
                    log.warning("the upload sweep failed; retrying at the next interval")
                # An upload lives at most about 10 % past its expiry, however long the lease.
                interval = min(interval, max(1.0, self.upload_expiry_s / 10))
            await asyncio.sleep(interval)

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop(), name="orphan-sweeper")

    async def aclose(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
