"""The one query helper every storage module uses.

`Db` is a pool or a connection: a function given the pool takes a connection for its one
statement; given a connection (one holding the conversation's advisory lock, or one a reader
runs several statements on), it runs there. This is `langgraph-checkpoint-postgres`'s
`get_connection()` habit. Taking a second pool connection while holding one deadlocks a busy
pool (bench/agent_scale.py: 200 conversations on 20 connections all timed out), so code that
holds a connection passes it.

A database outage becomes STORAGE_UNAVAILABLE (retryable) here, once for every statement.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import psycopg_pool

from agentchat.errors import AgentChatError, ErrorCode

Db = psycopg_pool.AsyncConnectionPool | psycopg.AsyncConnection[Any]
Row = dict[str, Any]

# The session ended by the server for idling in a transaction (`create_pool`: a replica frozen
# mid-transaction, revived) is an InternalError to psycopg, and an outage to us: retryable.
STORAGE_ERRORS = (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg.InterfaceError,
                  psycopg.errors.IdleInTransactionSessionTimeout)


@asynccontextmanager
async def storage_errors() -> AsyncIterator[None]:
    """Turn a database outage into STORAGE_UNAVAILABLE (retryable)."""
    try:
        yield
    except psycopg.errors.ProgramLimitExceeded:
        # An OperationalError too, but no outage: retrying cannot help (e.g. a value too big
        # for an index), so it is not STORAGE_UNAVAILABLE's "try again shortly".
        raise AgentChatError(ErrorCode.INTERNAL, "the record could not be stored") from None
    except STORAGE_ERRORS:
        raise AgentChatError(ErrorCode.STORAGE_UNAVAILABLE,
                             "the database is unreachable; try again shortly") from None


@asynccontextmanager
async def connection(db: Db) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """The given connection, or one from the pool for the block; outages become
    STORAGE_UNAVAILABLE for everything the block does."""
    async with storage_errors():
        if isinstance(db, psycopg_pool.AsyncConnectionPool):
            async with db.connection() as conn:
                yield conn
        else:
            yield db


async def fetch_one(db: Db, sql: str, params: dict[str, Any]) -> Row | None:
    """The statement's first row (None when it returns none or no rows)."""
    async with connection(db) as conn:
        cur = await conn.execute(sql, params)
        return await cur.fetchone() if cur.description else None


async def fetch_all(db: Db, sql: str, params: dict[str, Any]) -> list[Row]:
    async with connection(db) as conn:
        cur = await conn.execute(sql, params)
        rows: list[Row] = await cur.fetchall()
        return rows


async def execute(db: Db, sql: str, params: dict[str, Any]) -> None:
    async with connection(db) as conn:
        await conn.execute(sql, params)


def not_found() -> AgentChatError:
    """Missing and another user's conversation alike (nothing tells them apart)."""
    return AgentChatError(ErrorCode.NOT_FOUND, "no such conversation")
