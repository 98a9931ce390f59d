"""`action: "join"` (docs/protocol.md §4, "Runs"): a run's events after `last_seq`, then live.

A run live on this replica is followed in memory (agent/chat/run_hub.py). Any other run is read
from PostgreSQL and followed there: a joiner waits for the run's notification on one LISTEN
connection per replica (`RunListener`), or polls every `join_poll_s` where LISTEN is off
(`join_listen=false`, e.g. behind a transaction-pooling PgBouncer). Waits are bounded either
way (a missed notification costs at most `NOTIFY_BOUND_S`), and a joiner that finds its run
without a heartbeat marks it lost, so a dead replica's run ends with RUN_LOST.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from agentchat.agent.chat.events import text_after, with_text
from agentchat.agent.chat.live_run import TERMINAL, event_type, join_expired
from agentchat.agent.chat.run_hub import RunHub
from agentchat.agent.settings import AgentSettings
from agentchat.agent.storage import conversations
from agentchat.agent.storage import runs as store
from agentchat.agent.storage.db import Db
from agentchat.db import CONNECTION_KWARGS, resolve_database_url
from agentchat.errors import AgentChatError, ErrorCode

log = logging.getLogger("agentchat.agent.chat.join")
NOTIFY_BOUND_S = 2.0
LIVE = ("running", "resuming")  # a run's statuses while it goes on (resuming: taken over)


class RunListener:
    """One LISTEN connection for the replica's joiners, opened at the first remote join and
    re-opened after a failure; joiners wait on it with a bound, so a gap only slows them."""

    def __init__(self, settings: AgentSettings) -> None:
        self.url = settings.tuning.listen_url or resolve_database_url(settings)
        self.enabled = settings.tuning.join_listen
        self.poll_s = settings.tuning.join_poll_s
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self.connected = False

    async def wait(self, run_id: str) -> None:
        """Until the run is notified, or the bound passes."""
        if not self.enabled:
            await asyncio.sleep(self.poll_s)
            return
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen(), name="run-listener")
        event = asyncio.Event()
        self._waiters.setdefault(run_id, set()).add(event)
        try:
            bound = NOTIFY_BOUND_S if self.connected else self.poll_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), bound)
        finally:
            waiting = self._waiters.get(run_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[run_id]

    async def _listen(self) -> None:
        while True:  # once opened, kept (one connection per replica), re-opened after a failure
            try:
                async with await psycopg.AsyncConnection.connect(
                        self.url, **CONNECTION_KWARGS) as conn:
                    await conn.execute(f"LISTEN {store.CHANNEL}")
                    self.connected = True
                    async for note in conn.notifies():
                        for event in self._waiters.get(note.payload, ()):
                            event.set()
            except (psycopg.Error, OSError) as e:
                log.warning("LISTEN %s failed (%s); joiners poll meanwhile", store.CHANNEL,
                            type(e).__name__)
            self.connected = False
            await asyncio.sleep(1.0)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


async def join(hub: RunHub, listener: RunListener, pool: Db, *, owner: str,
               conversation_id: str, run_id: str | None,
               last_seq: int) -> AsyncIterator[dict[str, Any]]:
    """The owner's run's events after `last_seq`; errors as docs/protocol.md §4 names them."""
    lost_s = hub.settings.tuning.run_lost_s
    # The owner in the SQL: another user's conversation is NOT_FOUND; an archived one is fine.
    await conversations.get_conversation(pool, owner=owner, conversation_id=conversation_id)
    row = await store.find_run(pool, owner=owner, conversation_id=conversation_id,
                               run_id=run_id, lost_s=lost_s)
    local = hub.live.get(str(row["id"])) if row is not None else None
    if row is None and run_id is not None:
        local = hub.live.get(run_id)  # not yet stored (the writer's first batch is due)
        local = local if local and local.conversation_id == conversation_id else None
    if row is None and local is None:
        raise AgentChatError(ErrorCode.NO_RUN, "there is no run to join")
    if local is not None and row is not None and int(row["epoch"]) != local.epoch:
        # Taken over while this replica was paused, before its writer noticed: what it holds
        # is stale, and the run is followed where PostgreSQL says it is.
        hub.fence(local)
        local = None
    if local is not None and local.after_seq is not None and last_seq < local.after_seq:
        local = None  # taken over here: the events before the takeover are in PostgreSQL
    if local is not None:
        if local.after_seq is not None and last_seq > local.after_seq:
            last_seq = local.after_seq  # beyond what was stored before the takeover
        if last_seq > local.last_seq and local.done:
            raise AgentChatError(ErrorCode.INVALID_REQUEST, "last_seq is beyond the run")
        async for message in local.follow(last_seq):
            yield message
        return
    assert row is not None
    after = row["resumed_after"]
    if after is not None and last_seq > after and row["status"] != "lost":
        # Taken over: the dead replica may have sent events it never stored. The client
        # gets `run_resumed` again and drops what it holds beyond `after_seq`.
        last_seq = int(after)
    if row["status"] == "lost" and last_seq >= row["last_seq"]:
        # Its RUN_LOST took the seq after the last one stored, which the client may already
        # have had (the dead replica sent events it never stored): say so all the same.
        last_seq = row["last_seq"] - 1
    elif last_seq > row["last_seq"] and row["status"] not in LIVE:
        raise AgentChatError(ErrorCode.INVALID_REQUEST, "last_seq is beyond the run")
    if last_seq < row["first_kept_seq"] - 1:
        raise join_expired()
    async for message in _follow_stored(hub, listener, pool, str(row["id"]), last_seq,
                                        int(row["first_kept_seq"]), int(row["last_seq"])):
        yield message


async def _follow_stored(hub: RunHub, listener: RunListener, pool: Db, run_id: str,
                         cursor: int, first_kept: int, stored: int
                         ) -> AsyncIterator[dict[str, Any]]:
    """Rows are read from the first kept one, so the answer each event is sent with can be
    rebuilt from the stored deltas (events.text_after); only those after `cursor` are sent.
    A takeover while we follow (a `run_resumed` after the `stored` seq) is sent even when the
    client's `cursor` was beyond it (events its dead replica sent but never stored), and
    everything after it."""
    lost_s = hub.settings.tuning.run_lost_s
    read, text = first_kept - 1, ""
    while True:
        rows = await store.events_after(pool, run_id, read)
        for r in rows:
            seq, event = r["seq"], r["event"]
            if seq != read + 1 and seq <= cursor and "_base" not in event:
                raise join_expired()  # trimmed while we read: the answer cannot be rebuilt
            read, text = seq, text_after(text, event)
            if seq <= cursor and seq > stored and event_type(event) == "run_resumed":
                cursor = seq - 1
            if seq <= cursor:
                continue
            if seq != cursor + 1:  # trimmed while we read: the client reloads history
                raise join_expired()
            cursor = seq
            yield with_text(event, text)
            if event_type(event) in TERMINAL:
                return
        if rows:
            continue
        state = await store.run_state(pool, run_id, lost_s)
        if state is None:  # pruned with its conversation
            raise AgentChatError(ErrorCode.NO_RUN, "the run is gone")
        if state["status"] not in LIVE:
            if cursor < state["last_seq"]:
                continue  # its last events were stored with the status: read them
            if state["status"] == "lost":
                # Marked lost while we followed it, at a seq the client already had (events
                # its replica sent but never stored): its RUN_LOST is still this stream's end.
                for r in await store.events_after(pool, run_id, state["last_seq"] - 1):
                    yield with_text(r["event"], text)  # RUN_LOST: an error, its own content
            return
        if state["stale"]:
            await hub.settle_stale()  # taken over (by this replica, perhaps), or lost
            continue
        await listener.wait(run_id)
