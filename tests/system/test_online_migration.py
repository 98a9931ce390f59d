"""Migrations run by `agentchat migrate` (the chart's hook Job) while the old release serves
(issue 37 item 5), on a real PostgreSQL.

A database at migration 7 with 20,000 conversations, four writers updating and inserting
conversations all along, and an old pod's transaction that holds a lock on `conversations` for
HOLD_S when the migration starts. Migration 8 (a column, three indexes built concurrently) under
`--lock-timeout-ms 300`: its ALTER TABLE gives up after 300 ms and is retried, so no writer
waits for the old transaction behind it; the schema ends complete with valid indexes. The same
world without a lock timeout (`--lock-timeout-ms 0`, what the first form of migration 8 did)
queues every writer behind the ALTER until the old transaction ends: the test can tell.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from agentchat.db import CONNECTION_KWARGS, REQUIRED_SCHEMA, schema_version
from agentchat.migrations import MIGRATIONS
from testkit.stack import running_stack
from testkit.support import create_database, drop_database

HOLD_S = 4.0
LOCK_TIMEOUT_MS = 300
ROWS = 20_000


@pytest.fixture
def at_migration_7(pg_server: str) -> Iterator[str]:
    url = create_database(pg_server)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE agentchat_migrations ("
                     " v integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
        for version in range(8):
            entry = MIGRATIONS[version]
            assert isinstance(entry, str)
            conn.execute(entry)  # type: ignore[arg-type]
            conn.execute("INSERT INTO agentchat_migrations (v) VALUES (%s)", (version,))
        conn.execute("INSERT INTO conversations (id, owner) SELECT 'c' || g, 'u' || (g %% 50)"
                     " FROM generate_series(1, %s) g", (ROWS,))
    yield url
    drop_database(pg_server, url)


async def _writer(url: str, stop: asyncio.Event, waits: list[float]) -> None:
    async with await psycopg.AsyncConnection.connect(url, **CONNECTION_KWARGS) as conn:
        n = 0
        while not stop.is_set():
            n += 1
            started = time.monotonic()
            if n % 2:
                await conn.execute("UPDATE conversations SET last_activity_at = now()"
                                   " WHERE id = %s", (f"c{n * 37 % ROWS + 1}",))
            else:
                await conn.execute("INSERT INTO conversations (id, owner) VALUES (%s, 'w')",
                                   (uuid.uuid4().hex,))
            waits.append(time.monotonic() - started)
            await asyncio.sleep(0.01)


async def _old_pod(url: str, holding: asyncio.Event) -> None:
    """An old replica's transaction that read `conversations` and is still open."""
    async with await psycopg.AsyncConnection.connect(url, **CONNECTION_KWARGS) as conn:
        async with conn.transaction():
            await conn.execute("SELECT count(*) FROM conversations WHERE owner = 'u1'")
            holding.set()
            await asyncio.sleep(HOLD_S)


async def _migrate_under_load(url: str, lock_timeout_ms: int) -> tuple[list[float], Any]:
    stop, holding, waits = asyncio.Event(), asyncio.Event(), []  # type: ignore[var-annotated]
    writers = [asyncio.create_task(_writer(url, stop, waits)) for _ in range(4)]
    old = asyncio.create_task(_old_pod(url, holding))
    await holding.wait()
    await asyncio.sleep(0.3)
    env = {**os.environ, "DATABASE_URL": url, "AGENTCHAT_MODE": "production"}
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "agentchat.cli", "migrate",
                         "--lock-timeout-ms", str(lock_timeout_ms)],
        env=env, capture_output=True, text=True, timeout=120)
    await old
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.gather(*writers)
    return waits, done


async def test_migration_8_never_holds_writers_beyond_its_lock_timeout(at_migration_7: str
                                                                       ) -> None:
    waits, done = await _migrate_under_load(at_migration_7, LOCK_TIMEOUT_MS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"applied {len(MIGRATIONS) - 8} migration(s)" in done.stdout
    # The ALTER met the old transaction and stepped back at least once.
    assert "was not free within 300 ms" in done.stderr, done.stderr[-3000:]
    assert len(waits) > 100
    # Liveness bound: a writer may wait behind the ALTER for its lock timeout, never for the
    # old transaction (HOLD_S); generous for a loaded 2-core machine.
    assert max(waits) < HOLD_S / 2, sorted(waits)[-5:]
    async with await psycopg.AsyncConnection.connect(at_migration_7, **CONNECTION_KWARGS) as c:
        assert await schema_version(c) == REQUIRED_SCHEMA
        cur = await c.execute(
            "SELECT c.relname AS name, i.indisvalid AS valid FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname LIKE 'conversations_prune%'")
        indexes = {r["name"]: r["valid"] for r in await cur.fetchall()}  # type: ignore[index]
        assert indexes == {"conversations_prune_activity": True,
                           "conversations_prune_archived": True,
                           "conversations_prune_uncompacted": True}


async def test_without_a_lock_timeout_writers_queue_behind_the_old_transaction(
        at_migration_7: str) -> None:
    waits, done = await _migrate_under_load(at_migration_7, 0)
    assert done.returncode == 0, done.stderr[-3000:]
    assert max(waits) > HOLD_S / 2, sorted(waits)[-5:]


def test_migrate_check_says_whether_the_schema_is_enough(at_migration_7: str) -> None:
    env = {**os.environ, "DATABASE_URL": at_migration_7}
    run = [sys.executable, "-m", "agentchat.cli", "migrate"]
    older = subprocess.run([*run, "--check"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert older.returncode == 1
    assert f"at migration 7, this version needs {REQUIRED_SCHEMA}" in older.stderr
    assert subprocess.run(run, env=env, capture_output=True, timeout=120).returncode == 0
    done = subprocess.run([*run, "--check"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and f"at migration {REQUIRED_SCHEMA}" in done.stdout


def test_the_agent_refuses_an_older_schema_and_serves_a_newer_one(
        tmp_path: Path, pg_server: str, migrated_template: str, at_migration_7: str) -> None:
    url = create_database(pg_server, template=migrated_template)
    checked = {"AGENTCHAT_MIGRATE_ON_START": "false", "AGENTCHAT_SCHEMA_WAIT_S": "2"}
    try:
        with running_stack(tmp_path / "data", url) as stack:
            # The release's Job has not run (the database is at migration 7): no start.
            stack.database_url = at_migration_7
            with pytest.raises(RuntimeError, match="exited"):
                stack.start_agent(**checked)
            assert "this version needs" in stack.data_dir.joinpath(
                f"agent-{len(stack.agents)}.log").read_text()
            # A later release migrated further (expand-only): this version serves it.
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("INSERT INTO agentchat_migrations (v) VALUES (%s)",
                             (REQUIRED_SCHEMA + 1,))
            stack.database_url = url
            agent = stack.start_agent(**checked)
            assert httpx.get(agent.url + "/readyz", timeout=10).status_code == 200
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT max(v) FROM agentchat_migrations").fetchone()
            assert row is not None and row[0] == REQUIRED_SCHEMA + 1  # nothing migrated back
    finally:
        drop_database(pg_server, url)
