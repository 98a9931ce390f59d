"""LangGraph's checkpointer as the agent builds it (agent/wiring.py `checkpointer`): one run's
checkpoint write that waits on the database does not stall every other run's checkpoints
(AsyncPostgresSaver's own lock made them one at a time: langchain-ai/langgraph#7259)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from langgraph.checkpoint.base import empty_checkpoint

from agentchat.agent.wiring import checkpointer
from agentchat.db import create_pool


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def test_a_waiting_checkpoint_write_does_not_stall_the_others(database_url: str) -> None:
    pool = create_pool(database_url, max_size=4)
    await pool.open(wait=True)
    try:
        saver = checkpointer(pool, 4)
        await saver.setup()
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": ["hello"]}
        checkpoint["channel_versions"] = {"messages": 1}
        async with await psycopg.AsyncConnection.connect(database_url) as other:
            # Another transaction keeps the blobs table from writers (readers go on).
            await other.execute("LOCK TABLE checkpoint_blobs IN EXCLUSIVE MODE")
            slow = asyncio.create_task(saver.aput(_config("slow"), checkpoint, {},
                                                  {"messages": 1}))
            await asyncio.sleep(0.5)
            assert not slow.done(), "the write waits on the database"
            # Another run's checkpoint read goes ahead meanwhile.
            assert await asyncio.wait_for(saver.aget_tuple(_config("other")), 5) is None
            await other.rollback()
        await asyncio.wait_for(slow, 10)
        stored = await saver.aget_tuple(_config("slow"))
        assert stored is not None and stored.checkpoint["channel_values"] == {
            "messages": ["hello"]}
    finally:
        await pool.close()
