"""LangGraph's PostgreSQL checkpointer as the agent runs it: `AsyncPostgresSaver` on the shared
pool, with two changes, each measured at a burst of 200 submits (bench/HISTORY.md, "The next
session").

- Its operations run concurrently. AsyncPostgresSaver puts every checkpoint read and write
  under one `asyncio.Lock` per instance, which a single shared connection needs and a pool
  does not (langchain-ai/langgraph#7259; the fix, #7269, is not released): 200 runs took their
  checkpoints one at a time. Here the lock is a semaphore of `concurrency` (the workaround in
  that issue; the agent gives half the pool), each operation on a connection of its own. No
  limit at all (the pool's only) measured worse on a busy event loop: 200 runs' checkpoint
  writes queued on the pool itself cost more CPU than on the semaphore.
- A conversation this replica has just created has no checkpoint: the read LangGraph makes
  when its first run starts is answered without a query. At a burst of new conversations that
  read was half the statements queued on the pool before the first token.
- A thread's checkpoints are fenced (docs/protocol.md §4, "Takeover"): the running turn
  registers a guard per thread (agent/chat/turn_task.py) that raises once its run belongs to
  another replica, so a paused-then-revived replica never saves over the new owner's thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import AsyncConnectionPool


class Checkpointer(AsyncPostgresSaver):
    def __init__(self, pool: AsyncConnectionPool[Any], concurrency: int) -> None:
        super().__init__(pool)
        self.lock = asyncio.Semaphore(max(1, concurrency))  # type: ignore[assignment]
        self._new: set[str] = set()
        self.guards: dict[str, Callable[[], Awaitable[None]]] = {}  # thread_id -> fence

    def new_thread(self, thread_id: str) -> None:
        """`thread_id` was created a moment ago, here: it has no checkpoint until one is
        saved, or until `thread_done` (its first run ended without one)."""
        self._new.add(thread_id)

    def thread_done(self, thread_id: str) -> None:
        self._new.discard(thread_id)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config.get("configurable") or {}
        if conf.get("thread_id") in self._new and not conf.get("checkpoint_id"):
            return None
        return await super().aget_tuple(config)

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions
                   ) -> RunnableConfig:
        thread = str((config.get("configurable") or {}).get("thread_id"))
        guard = self.guards.get(thread)
        if guard is not None:
            await guard()
        # Before the write: a read while it is under way queries, and finds it or nothing.
        self._new.discard(thread)
        return await super().aput(config, checkpoint, metadata, new_versions)
