"""LangGraph's checkpointer as the agent runs it (agent/graph/checkpoints.py): one run's
checkpoint write that waits on the database does not stall every other run's checkpoints
(AsyncPostgresSaver's own lock made them one at a time: langchain-ai/langgraph#7259); a thread
just created is read without a query until its first checkpoint is saved."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
from langgraph.checkpoint.base import empty_checkpoint

from agentchat.agent.graph.checkpoints import Checkpointer
from agentchat.db import create_pool


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def test_a_waiting_checkpoint_write_does_not_stall_the_others(database_url: str) -> None:
    pool = create_pool(database_url, max_size=4)
    await pool.open(wait=True)
    try:
        saver = Checkpointer(pool, 2)
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


async def test_a_new_thread_is_read_without_a_query_until_its_first_checkpoint(
        database_url: str) -> None:
    pool = create_pool(database_url, max_size=2)
    await pool.open(wait=True)
    try:
        saver = Checkpointer(pool, 1)
        await saver.setup()
        new, known, ended = (f"{name}-{uuid.uuid4()}" for name in ("new", "known", "ended"))
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": ["hello"]}
        checkpoint["channel_versions"] = {"messages": 1}
        saver.new_thread(new)
        async with await psycopg.AsyncConnection.connect(database_url) as other:
            # Readers of the checkpoints table wait behind this lock: a query would hang.
            await other.execute("LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")
            assert await asyncio.wait_for(saver.aget_tuple(_config(new)), 2) is None
            queried = asyncio.create_task(saver.aget_tuple(_config(known)))
            await asyncio.sleep(0.5)
            assert not queried.done(), "any other thread is read from the database"
            await other.rollback()
        assert await asyncio.wait_for(queried, 10) is None
        await saver.aput(_config(new), checkpoint, {}, {"messages": 1})
        stored = await saver.aget_tuple(_config(new))
        assert stored is not None and stored.checkpoint["channel_values"] == {
            "messages": ["hello"]}
        # A first run that ended without a checkpoint: the thread is read from the database.
        saver.new_thread(ended)
        saver.thread_done(ended)
        async with await psycopg.AsyncConnection.connect(database_url) as other:
            await other.execute("LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")
            read = asyncio.create_task(saver.aget_tuple(_config(ended)))
            await asyncio.sleep(0.5)
            assert not read.done(), "a thread whose first run ended is read from the database"
            await other.rollback()
        assert await asyncio.wait_for(read, 10) is None
    finally:
        await pool.close()
