"""Runs (docs/protocol.md §4, "Runs"): every streaming submit is a run whose events can be
rejoined, on this replica from memory and on any replica from PostgreSQL.

A run's pump reads its turn's events, their text coalesced at the hub's flush interval as the
turn writes it (turn_text.py, a backlog joined by events.coalesce), gives each a
`seq` and its `run_id`, and keeps it: in memory for the submit's own stream and joiners
here, and for the writer, which stores every live run's new events in one statement per
round trip (so a busy replica writes bigger batches, not more of them), heartbeats the live
runs, and notifies joiners elsewhere. A dropped connection only ends its follower; the run
goes on.

A run has one owner at a time, fenced by its `epoch` (docs/protocol.md §4, "Takeover"): the
writer stores a batch only for runs whose epoch is still ours, the heartbeat only beats runs
still ours, and a run found to be another replica's is stopped here without a word written
(its turn's records and checkpoints ask `Run`'s guard first). The turn's side effects beyond
our own tables (ss-tools requests, audit rows, planned steps) are fenced in PostgreSQL by the
run's `RunFence` (agent/storage/fencing.py), filled in here. A draining replica fences the runs
that outlive the drain here first, then releases them; agent/chat/takeover.py is the other side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from agentchat import heap
from agentchat.agent.chat.events import coalesce, to_kept
from agentchat.agent.chat.live_run import STATUS_AFTER, TERMINAL, Run, lost_event_texts
from agentchat.agent.chat.turn_task import Turn
from agentchat.agent.metrics import EVENT_GAP, LIVE_RUNS, SATURATED
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage import runs as store
from agentchat.agent.storage import takeovers
from agentchat.agent.storage.db import Db
from agentchat.agent.storage.fencing import RunFenced
from agentchat.agent.storage.sealing import TokenSeal
from agentchat.errors import AgentChatError, ErrorCode

log = logging.getLogger("agentchat.agent.chat.run_hub")
class RunHub:
    """This replica's live runs, their pumps, and the one writer that stores them."""

    def __init__(self, *, settings: AgentSettings, pool: Db) -> None:
        self.settings = settings
        self.seal = TokenSeal.of(settings.resume_key, settings.resume_key_file,
                                 settings.service_client_secret)
        self.pool = pool
        self.replica = settings.tuning.replica or f"{socket.gethostname()}-{os.getpid()}"
        self.live: dict[str, Run] = {}
        self.draining = False
        self._dirty = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self.running = 0  # runs whose pump has not ended (the cap; agentchat_live_runs)
        self._trim: asyncio.TimerHandle | None = None
        self.trims = 0  # idle trims done (tests)
        # What a replica does about runs without a heartbeat (the sweeper, a joiner): set to
        # the takeover (agent/chat/takeover.py); without one they are marked lost.
        self.on_stale: Callable[[], Awaitable[Any]] | None = None

    # -- admission ------------------------------------------------------------------------------

    def admit(self) -> None:
        """Before anything of a submit is stored: a draining or full replica takes no run.
        A pending idle trim is called off here, not when the run starts: a full collection
        then would stall the turn starts of a burst (it did, in bench/agent_scale.py)."""
        self._cancel_trim()
        if self.draining:
            SATURATED.inc()
            raise AgentChatError(ErrorCode.AGENT_SATURATED,
                                 "this agent replica is shutting down; try again")
        if self.running >= self.settings.max_live_runs:
            SATURATED.inc()
            raise AgentChatError(ErrorCode.AGENT_SATURATED,
                                 "this agent replica is at its limit of live runs; try again")

    # -- a run ----------------------------------------------------------------------------------

    def start(self, turn: Turn, kind: str, early: list[dict[str, Any]]) -> Run:
        """The run of a started turn: `early` events first (a card's resolution), then the
        turn's, coalesced."""
        # Verified now: a run made this instant is ours (no replica can claim it before
        # RUN_LOST_S without a heartbeat), so its turn's first records ask PostgreSQL nothing.
        run = Run(run_id=str(uuid.uuid4()), conversation_id=turn.conversation_id,
                  turn_id=turn.turn_id, tab_id=turn.tab, kind=kind,
                  max_events=self.settings.tuning.run_events_max,
                  token=turn.runtime.user_jwt if turn.runtime.keep_token else None,
                  verified_at=time.monotonic())
        return self._launch(run, turn, early)

    def resume(self, turn: Turn, claimed: dict[str, Any]) -> Run:
        """A run taken over (takeover.py): the same run_id, its seq going on after the last
        stored one, `run_resumed` first; its answer so far starts again."""
        after = int(claimed["last_seq"])
        run = Run(run_id=str(claimed["id"]), conversation_id=turn.conversation_id,
                  turn_id=turn.turn_id, tab_id=turn.tab, kind=str(claimed["kind"]),
                  max_events=self.settings.tuning.run_events_max, first_seq=after + 1,
                  written_seq=after, recorded=True, based_seq=after + 1,
                  epoch=int(claimed["epoch"]), verified_at=time.monotonic(),
                  after_seq=after)
        early = [{"type": "run_resumed", "attempt": int(claimed["attempt"]),
                  "after_seq": after}]
        return self._launch(run, turn, early)

    def _launch(self, run: Run, turn: Turn, early: list[dict[str, Any]]) -> Run:
        run.stop = turn.task.cancel if turn.task is not None else None
        side = turn.fence
        side.run_id, side.epoch, side.db = run.run_id, run.epoch, self.pool
        # A takeover goes on with a turn its earlier attempt began: the steps stored before a
        # write ran are replayed, not asked of the model again (agent/graph/plans.py).
        side.replay = run.after_seq is not None

        def halt() -> None:  # no side effect more; the turn stops at its next one
            run.fenced = True
            turn.fenced = True

        def fence() -> None:
            halt()
            if turn.task is not None:
                turn.task.cancel()

        async def guard() -> None:
            await self._owned(run)

        run.fence, run.halt, turn.guard = fence, halt, guard
        turn.out.flush_s = self.flush_interval
        self.live[run.run_id] = run

        def add(event: dict[str, Any]) -> None:
            if event["type"] == "stream_token":
                run.text += event["token"]
            run.append(to_kept(event, run.last_seq + 1, run.conversation_id, run.run_id,
                               turn.runtime.lang))
            now = time.monotonic()  # per coalesced event, never per model token
            if run.last_at:
                EVENT_GAP.observe(now - run.last_at)
            run.last_at = now
            self._dirty.set()

        async def pump() -> None:
            status = "cancelled"  # no last event: the turn was stopped
            try:
                for event in early:
                    add(event)
                async for event in coalesce(turn.queue):
                    add(event)
                    if event["type"] in TERMINAL:
                        status = STATUS_AFTER[event["type"]]
                        break
            finally:
                run.finish(status)
                self._dirty.set()

        task = asyncio.create_task(pump(), name=f"run-{run.run_id}")
        self._pumps.add(task)
        self.running += 1
        self._cancel_trim()
        LIVE_RUNS.inc()
        task.add_done_callback(self._pump_ended)
        if self.settings.tuning.run_events:
            self._ensure_writer()
        else:
            task.add_done_callback(lambda _: self.live.pop(run.run_id, None))
        return run

    async def _owned(self, run: Run) -> None:
        """Raise RunFenced unless the run is still ours: PostgreSQL is asked when the writer
        has not confirmed it within half a heartbeat (a replica paused for longer asks)."""
        if run.fenced:
            raise RunFenced(run.run_id)
        if time.monotonic() - run.verified_at < self.settings.tuning.run_heartbeat_s / 2:
            return
        epoch = await store.epoch_of(self.pool, run.run_id)
        if epoch is not None and epoch != run.epoch:
            self.fence(run)
            raise RunFenced(run.run_id)
        run.verified_at = time.monotonic()

    def fence(self, run: Run) -> None:
        """Another replica owns the run now (its writer or a joiner found a newer epoch
        stored): its turn stops here and nothing more is stored."""
        if not run.fenced:
            log.warning("run %s belongs to another replica now; stopped here", run.run_id)
        run.fenced = True
        self.live.pop(run.run_id, None)
        if run.fence is not None:
            run.fence()

    def stop(self, run_id: str) -> bool:
        """Cancel a live run's turn here, as a Gradio cancel of its submit would."""
        run = self.live.get(run_id)
        if run is None or run.done or run.stop is None:
            return False
        run.stop()
        return True

    def flush_interval(self) -> float:
        """The coalescing interval now: fixed, or with adaptive coalescing long enough that
        the live runs together send about `flush_events_per_s` stream_tokens a second."""
        base = self.settings.tuning.flush_interval_s
        rate = self.settings.tuning.flush_events_per_s
        return max(base, self.running / rate) if rate > 0 else base

    def _pump_ended(self, task: asyncio.Task[None]) -> None:
        # A done callback: runs even for a pump cancelled before it started.
        self._pumps.discard(task)
        self.running -= 1
        LIVE_RUNS.dec()
        if self.running == 0 and self.settings.tuning.idle_trim_s > 0 and not self.draining:
            self._trim = asyncio.get_running_loop().call_later(self.settings.tuning.idle_trim_s,
                                                               self._idle_trim)

    def _cancel_trim(self) -> None:
        if self._trim is not None:
            self._trim.cancel()
            self._trim = None

    def _idle_trim(self) -> None:
        """No run live for idle_trim_s: the runs' cyclic garbage collected now rather than at
        the next full collection, and the heap glibc keeps after it handed back to the OS (a
        burst of 200 streams left ~60 MB of RSS otherwise). Runs on the loop: nothing is
        streaming, and a trim of the whole heap takes milliseconds."""
        self._trim = None
        heap.trim()
        self.trims += 1

    # -- the writer -----------------------------------------------------------------------------

    def _ensure_writer(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_loop(), name="run-writer")

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        beat_at = loop.time() + self.settings.tuning.run_heartbeat_s
        while self.live:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(),
                                       max(0.0, beat_at - loop.time()))
            self._dirty.clear()
            try:
                await self.flush()
                if loop.time() >= beat_at:
                    beat_at = loop.time() + self.settings.tuning.run_heartbeat_s
                    # Only runs already stored: one made while the flush above awaited
                    # has no row yet, and a beat would take it for another replica's.
                    running = [r.run_id for r in self.live.values()
                               if not r.done and r.recorded]
                    if running:
                        stops, gone = await store.heartbeat(self.pool, running, self.replica)
                        for run_id in stops:
                            self.stop(run_id)  # asked on another replica (Stop by run_id)
                        now = time.monotonic()
                        for run_id in running:
                            if (run := self.live.get(run_id)) is not None:
                                if run_id in gone:
                                    self.fence(run)
                                else:
                                    run.verified_at = now
            except AgentChatError:  # the database is down: keep the events, try again
                log.warning("storing run events failed; retrying")
                await asyncio.sleep(0.5)
                self._dirty.set()
            except Exception:  # a bug must not stop every run's writes for good
                log.exception("the run writer failed; retrying")
                await asyncio.sleep(0.5)
                self._dirty.set()

    async def flush(self) -> None:
        """Store what the writer has not yet stored, in one transaction."""
        runs = list(self.live.values())
        new = [store.RunRecord(r.run_id, r.conversation_id, r.turn_id, r.kind, r.tab_id,
                               self.replica, self.seal.seal(r.token, run=r.run_id,
                                                            conversation=r.conversation_id))
               for r in runs if not r.recorded]
        progress, marks, bases = [], [], []
        for r in runs:
            # A run halted at a drain keeps its events, never an end: it is released as live.
            last, done = r.last_seq, r.done and not r.fenced
            if last <= r.written_seq and (not done or r.status_written):
                continue
            start = max(r.written_seq + 1, r.first_seq)
            events = [(m["metadata"]["seq"], m) for m in r.events[start - r.first_seq:]]
            if r.first_seq > r.based_seq:
                # Trimmed: the first kept row carries the answer before it, so a replay
                # from PostgreSQL can rebuild every later event's content.
                if events and events[0][0] == r.first_seq:
                    events[0] = (r.first_seq, {**events[0][1], "_base": r.base()})
                else:
                    bases.append((r.run_id, r.first_seq, r.base()))
            # A taken-over run keeps the rows stored before it (its memory starts after
            # them): only a trim of its own moves the oldest kept seq.
            kept = r.first_seq if r.first_seq > (r.after_seq or 0) + 1 else 1
            progress.append(store.Progress(r.run_id, events, last, kept,
                                           r.status if done else None, r.epoch))
            marks.append((r, last, done, r.first_seq))
        if not new and not progress:
            return
        fenced: list[str] = []
        try:
            fenced = await store.write(self.pool, new, progress, bases)
        except (AgentChatError, psycopg.Error) as e:
            if isinstance(e, AgentChatError) and e.code is ErrorCode.STORAGE_UNAVAILABLE:
                raise  # an outage: the writer keeps the events and tries again
            # Rows that can never be stored (e.g. the conversation was pruned meanwhile):
            # dropped rather than retried forever. The live streams go on from memory.
            log.error("dropping a batch of run events that cannot be stored: %s",
                      type(e).__name__)
        now = time.monotonic()
        for r in runs:
            r.recorded = True
            r.token = None
            if r.run_id in fenced:
                self.fence(r)
        for r, last, done, first in marks:
            r.verified_at = now
            r.written_seq = last
            r.based_seq = first
            if done:
                r.status_written = True
        for r in runs:
            if r.status_written and r.written_seq >= r.last_seq:
                self.live.pop(r.run_id, None)

    # -- the end --------------------------------------------------------------------------------

    async def settle_stale(self) -> None:
        """Runs without a heartbeat: taken over (`on_stale`), else marked lost."""
        if self.on_stale is not None:
            await self.on_stale()
        else:
            await self.mark_lost()

    async def mark_lost(self, run_ids: list[str] | None = None,
                        reason: str = "replica_stopped") -> list[str]:
        """Runs without a heartbeat (or exactly `run_ids`) become lost; their ids."""
        content, detail = lost_event_texts(reason)
        # Our own live runs are alive whatever their heartbeat says (an outage just ended).
        keep = [] if run_ids is not None else list(self.live)
        rows = await store.mark_lost(self.pool, lost_s=self.settings.tuning.run_lost_s,
                                     content=content, detail=detail, run_ids=run_ids,
                                     keep=keep, reason=reason)
        if rows:
            log.warning("marked %s runs lost", len(rows))
        return [str(r["id"]) for r in rows]

    async def abandon(self) -> list[str]:
        """At shutdown, after the drain: the live runs halted here first (no ss-tools request,
        audit row or record more: a run released before that could act here and on its new
        owner at once), what is left stored, then the runs released so another replica goes
        on with them at once (with takeovers off: marked lost, so their joiners learn it now
        rather than after `run_lost_s`). Their turns stop here without a record."""
        if not self.settings.tuning.run_events:
            return []
        running = [r for r in self.live.values() if not r.done]
        for r in running:
            if r.halt is not None:
                r.halt()
        with contextlib.suppress(AgentChatError):
            await self.flush()
        ids = [r.run_id for r in running]
        out: list[str] = []
        if ids:
            with contextlib.suppress(AgentChatError):
                out = (await takeovers.release(self.pool, ids, self.replica)
                       if self.settings.tuning.run_takeover else await self.mark_lost(ids))
            for r in running:
                self.fence(r)
        return out

    async def aclose(self) -> None:
        for task in [*self._pumps, *([self._writer] if self._writer else [])]:
            task.cancel()
        for task in [*self._pumps, *([self._writer] if self._writer else [])]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
