"""The pool's check (agentchat/db.py): a connection idle for CHECKED_AFTER_S or more is
checked before it is handed out, so one the server dropped is replaced without the caller
seeing it; one handed back a moment ago goes out unchecked (issue 21: the check was a third of
all round trips under load), so a connection killed within that moment fails one statement,
and the pool replaces it for the next."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from agentchat import db
from agentchat.agent.storage.db import connection
from agentchat.errors import AgentChatError, ErrorCode


async def _pid(pool: Any) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT pg_backend_pid() AS pid")
        row = await cur.fetchone()
        return int(row["pid"])


async def _kill(url: str, pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as other:
        await other.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_a_connection_dropped_while_idle_is_replaced_unseen(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    window = 0.3
    monkeypatch.setattr(db, "CHECKED_AFTER_S", window)
    pool = db.create_pool(database_url, max_size=1)
    await pool.open(wait=True)
    try:
        first = await _pid(pool)
        await _kill(database_url, first)
        await asyncio.sleep(window + 0.2)
        assert await _pid(pool) != first  # checked, found dead, replaced: no error
    finally:
        await pool.close()


async def test_a_connection_back_a_moment_ago_goes_out_unchecked(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db, "CHECKED_AFTER_S", 30.0)  # the kill lands well within it
    pool = db.create_pool(database_url, max_size=1)
    await pool.open(wait=True)
    try:
        first = await _pid(pool)
        await _kill(database_url, first)
        with pytest.raises(psycopg.OperationalError):
            await _pid(pool)
        # the pool saw it broken when it came back and made a new one
        assert await _pid(pool) != first
    finally:
        await pool.close()


async def test_a_transaction_left_idle_is_ended_and_reads_as_an_outage(database_url: str) -> None:
    """With `idle_in_transaction_s` (the agent's pool), PostgreSQL ends a session that waits
    inside a transaction (a process frozen there): the conversation's lock it held is free for
    others at once, the process's next statement is STORAGE_UNAVAILABLE (retryable, not
    INTERNAL), and the pool replaces the connection."""
    pool = db.create_pool(database_url, max_size=1, idle_in_transaction_s=0.3)
    await pool.open(wait=True)
    try:
        first = await _pid(pool)
        with pytest.raises(AgentChatError) as caught:
            async with connection(pool) as conn, db.conversation_lock(conn, "c-frozen"):
                await asyncio.sleep(1.0)  # frozen: nothing sent for longer than the bound
                async with await psycopg.AsyncConnection.connect(
                        database_url, **db.CONNECTION_KWARGS) as other:
                    assert await db.try_conversation_lock(other, "c-frozen")
                await conn.execute("SELECT 1")
        assert caught.value.code is ErrorCode.STORAGE_UNAVAILABLE
        assert await _pid(pool) != first
    finally:
        await pool.close()
