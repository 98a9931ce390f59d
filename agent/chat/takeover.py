"""A run survives its replica (docs/protocol.md §4, "Takeover").

Every `run_takeover_poll_s`, and whenever the sweeper or a joiner finds a run without a
heartbeat, a replica claims the runs whose owner is gone (no heartbeat for `run_lost_s`) or
left (released by a draining replica): one UPDATE per batch (storage/takeovers.py) raises each
run's epoch, so its old owner, if it comes back, writes nothing more for it. The new owner
goes on with the run's turn from its last checkpoint (turn_starts.py `take_over`) under the
same run_id, its seq after the last stored one, `run_resumed` first (run_hub.py `resume`).
A run that cannot go on (its attempts used up, no token to resume it with, its turn settled
meanwhile, or its turn failing to start here) ends RUN_LOST with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from agentchat.agent.audit.trail import AuditTrail, taken_over
from agentchat.agent.chat.run_hub import RunHub
from agentchat.agent.chat.turn_starts import TurnStarts
from agentchat.agent.metrics import TAKEOVER_SECONDS, TAKEOVERS
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage import takeovers
from agentchat.agent.storage.db import Db
from agentchat.agent.storage.fencing import RunFence

log = logging.getLogger("agentchat.agent.chat.takeover")


class Takeover:
    def __init__(self, *, settings: AgentSettings, pool: Db, hub: RunHub,
                 starts: TurnStarts, audit: AuditTrail | None = None) -> None:
        self.settings = settings
        self.audit = audit
        self.pool = pool
        self.hub = hub
        self.starts = starts
        self.task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one settle at a time per replica

    async def settle(self) -> int:
        """Claim the due runs there is room for and go on with them; mark lost those no
        replica can go on with. The number taken over."""
        s, t = self.settings, self.settings.tuning
        if not t.run_takeover:
            await self.hub.mark_lost()
            return 0
        async with self._lock:
            keep = list(self.hub.live)
            for row in await takeovers.unresumable(self.pool, lost_s=t.run_lost_s,
                                                   max_attempts=t.run_max_attempts, keep=keep):
                if await self.hub.mark_lost([str(row["id"])], reason=str(row["reason"])):
                    TAKEOVERS.labels("lost").inc()
            room = s.max_live_runs - self.hub.running
            if self.hub.draining or room <= 0:
                return 0
            claimed = await takeovers.claim(self.pool, replica=self.hub.replica,
                                            lost_s=t.run_lost_s,
                                            max_attempts=t.run_max_attempts, keep=keep,
                                            limit=min(room, 50))
            for row in claimed:
                await self._go_on(row)
            return len(claimed)

    async def _go_on(self, row: dict[str, Any]) -> None:
        run_id = str(row["id"])
        try:
            last = await takeovers.turn_to_resume(self.pool, str(row["turn_id"]))
            if last is None or last["status"] != "running" or last["user_text"] is None:
                raise LookupError("its turn is gone or settled")
            # Sealed with its run (storage/sealing.py): another run's token does not open,
            # and the run is lost before any takeover row is audited.
            token = self.hub.seal.open(str(row["resume_token"]), run=run_id,
                                       conversation=str(row["conversation_id"]))
            await self._audit(row)
            turn = await self.starts.take_over(token, str(row["conversation_id"]),
                                               str(row["tab_id"]), last)
        except Exception:
            log.exception("run %s could not be resumed here; marked lost", run_id)
            TAKEOVERS.labels("lost").inc()
            with contextlib.suppress(Exception):
                await self.hub.mark_lost([run_id], reason="unresumable")
            return
        # No await before this: the turn's task runs from the next one, and its side effects
        # are fenced from its first step (storage/fencing.py), a replayed step's included.
        self.hub.resume(turn, row)
        TAKEOVERS.labels("resumed").inc()
        TAKEOVER_SECONDS.observe(float(row["unbeaten_s"] or 0.0))
        log.warning("took over run %s (attempt %s) after %.1f s without an owner", run_id,
                    row["attempt"], float(row["unbeaten_s"] or 0.0))

    async def _audit(self, row: dict[str, Any]) -> None:
        """A `takeover` row on each audited call the run had in flight, before the new attempt
        starts (so the record reads: takeover, then its one execution). A failed append
        is logged, not fatal: the run going on matters more than this note on it."""
        try:
            await taken_over(self.audit, conversation_id=str(row["conversation_id"]), detail={
                "run_id": str(row["id"]), "attempt": int(row["attempt"]),
                "replica": self.hub.replica, "after_seq": int(row["last_seq"] or 0)},
                fence=RunFence(str(row["id"]), int(row["epoch"]), self.pool))
        except Exception:
            log.exception("run %s: the takeover's audit rows were not appended", row["id"])

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tuning.run_takeover_poll_s)
            try:
                await self.settle()
            except Exception:  # the database is down: the next poll tries again
                log.debug("takeover poll failed", exc_info=True)

    def start(self) -> None:
        self.hub.on_stale = self.settle
        if self.settings.tuning.run_takeover and self.settings.tuning.run_events:
            self.task = asyncio.create_task(self._loop(), name="run-takeover")

    async def aclose(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
