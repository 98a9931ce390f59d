"""Checkpoint pruning, driven by our conversations table (last activity, archive time).

- Threads idle longer than `idle_s` keep only their latest checkpoint
  (`AsyncPostgresSaver.aprune(strategy="keep_latest")`, one thread at a time under its lock).
- Threads inactive longer than `inactive_s`, or archived longer than `archived_s`, are deleted
  (`aprune(strategy="delete")` for the batch, then their conversation rows, which cascade to
  turns, messages, tool calls, confirmations and leases). Checkpoints go first: a crash in
  between leaves a conversation row that the next run finds again, never orphan checkpoints.
- A thread that runs (its per-conversation advisory lock is held: agentchat.db) or has a
  pending, unexpired card is never touched; both are re-checked once the lock is ours.
- Each rule has its own sargable query over its own index (migration 8), walked with a keyset
  cursor in index order, so a batch costs the same at 200k or 1M conversations and skipped
  threads are not revisited within a run: inactive past retention
  (`conversations_prune_activity`), archived past retention (`conversations_prune_archived`),
  idle with activity since their last compaction (`conversations_prune_uncompacted`; the
  `compacted_activity_at` column records a compaction, instead of probing checkpoints per row).
- A delete re-checks the rule under a row lock (`FOR UPDATE`) held until the rows are gone, so
  a restore or a new turn that commits first saves the thread, and one that comes second finds
  no row (a restore answers 404, never 200 for a thread that is then deleted).
- Compacting a thread also drops its `runs` (and so their events) except the newest one.
- A conversation with branches (an edit or a regenerate, docs/protocol.md §4) is never compacted:
  its branches' checkpoints go with it, when it is deleted.
- One pruner per database at a time: a session advisory lock (constants.PRUNER_LOCK).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import AsyncConnectionPool

from agentchat.db import release_conversation_lock, try_conversation_lock
from agentchat.errors import LocalError
from agentchat.operator.constants import PRUNER_LOCK

# Shared by every rule: a thread with a pending, unexpired card or a live lease (a turn that
# streams, or streamed within the lease period) is left alone. Both are index probes
# (confirmations_pending, the leases primary key) on the batch's rows only.
_FREE = """NOT EXISTS (SELECT 1 FROM confirmations f WHERE f.conversation_id = c.id
                   AND f.status = 'pending' AND f.expires_at > now())
  AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.conversation_id = c.id AND l.until > now())"""
_EXPIRED = """(c.last_activity_at < %(inactive_before)s
              OR (c.is_archived AND c.archived_at < %(archived_before)s))"""
_UNCOMPACTED = ("(c.compacted_activity_at IS NULL"
                " OR c.compacted_activity_at < c.last_activity_at)")

# One query per rule, each the exact shape of its index (migration 8): a range on the index's
# leading column, the keyset cursor as a row comparison, ORDER BY the index's columns.
SELECT_INACTIVE = f"""
SELECT c.id, c.last_activity_at AS k
FROM conversations c
WHERE c.last_activity_at < %(inactive_before)s
  AND (c.last_activity_at, c.id) > (%(after_ts)s, %(after_id)s)
  AND {_FREE}
ORDER BY c.last_activity_at, c.id
LIMIT %(limit)s
"""
SELECT_ARCHIVED = f"""
SELECT c.id, c.archived_at AS k
FROM conversations c
WHERE c.is_archived AND c.archived_at < %(archived_before)s
  AND (c.archived_at, c.id) > (%(after_ts)s, %(after_id)s)
  AND {_FREE}
ORDER BY c.archived_at, c.id
LIMIT %(limit)s
"""
# Idle, not yet past retention (those are the delete rules' own), used since last compacted.
SELECT_IDLE = f"""
SELECT c.id, c.last_activity_at AS k
FROM conversations c
WHERE {_UNCOMPACTED}
  AND c.last_activity_at < %(idle_before)s
  AND c.last_activity_at >= %(inactive_before)s
  AND (c.last_activity_at, c.id) > (%(after_ts)s, %(after_id)s)
  AND NOT (c.is_archived AND c.archived_at < %(archived_before)s)
  AND {_FREE}
ORDER BY c.last_activity_at, c.id
LIMIT %(limit)s
"""
# (rule, query, deletes?) in the order a run applies them: deletions first, so the idle rule
# never compacts a thread about to go.
RULES = (("inactive", SELECT_INACTIVE, True), ("archived", SELECT_ARCHIVED, True),
         ("idle", SELECT_IDLE, False))

# The rules again for threads whose advisory lock we now hold (a turn may have run meanwhile).
# FOR UPDATE: the rows stay locked until the delete commits, so a concurrent restore, archive
# or activity either commits first (and the re-check sees it) or waits and finds no row.
RECHECK = f"""
SELECT c.id, {_EXPIRED} AS expired
FROM conversations c
WHERE c.id = ANY(%(ids)s)
  AND (c.last_activity_at < %(idle_before)s OR {_EXPIRED})
  AND {_FREE}
FOR UPDATE OF c
"""

# A compacted thread keeps only its newest run; older runs (and their events, by cascade) go.
DELETE_OLD_RUNS = """
DELETE FROM runs r WHERE r.conversation_id = %(id)s AND r.id <> (
    SELECT n.id FROM runs n WHERE n.conversation_id = %(id)s
    ORDER BY n.started_at DESC, n.id DESC LIMIT 1)
"""
MARK_COMPACTED = """
UPDATE conversations SET compacted_activity_at = last_activity_at WHERE id = %(id)s
"""
# A conversation with branches (docs/protocol.md §4, "Branches") is never compacted: keep_latest
# would drop every branch but the active one, so its checkpoints live as long as it does. It is
# marked as if compacted, so it leaves the idle index until it is used again.
FORKED = "SELECT forked_at IS NOT NULL AS forked FROM conversations WHERE id = %(id)s"

COUNT_ROWS = """
SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = ANY(%(ids)s)) AS checkpoints,
       (SELECT count(*) FROM checkpoint_blobs WHERE thread_id = ANY(%(ids)s)) AS blobs,
       (SELECT count(*) FROM checkpoint_writes WHERE thread_id = ANY(%(ids)s)) AS writes
"""

DELETE_CONVERSATIONS = "DELETE FROM conversations WHERE id = ANY(%s)"
DELETE_CHUNK = 25


@dataclass(frozen=True)
class Retention:
    idle_s: float
    inactive_s: float
    archived_s: float
    batch_size: int = 200
    # After each unit of work, sleep `pause_ratio` times as long as it took: the pruner then
    # uses at most 1/(1+ratio) of a core and of the database, so live turns keep their pace.
    pause_ratio: float = 0.0


@dataclass
class PruneReport:
    threads_compacted: int = 0
    threads_deleted: int = 0
    checkpoints_deleted: int = 0
    rows_deleted: int = 0  # checkpoints + blobs + writes
    skipped_busy: int = 0
    skipped_other: int = 0
    batches: int = 0
    duration_s: float = 0.0
    skipped_ids: list[str] = field(default_factory=list, repr=False)

    def to_status(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("skipped_ids")
        out["duration_s"] = round(self.duration_s, 3)
        return {_camel(k): v for k, v in out.items()}


class PrunerBusy(LocalError):
    """Another pruner holds this database's pruner lock."""


def _first_value(row: Any) -> Any:
    """A row's first column, whatever the connection's row factory."""
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


async def _count(conn: psycopg.AsyncConnection[Any], ids: list[str]) -> tuple[int, int]:
    row: Any = await (await conn.execute(COUNT_ROWS, {"ids": ids})).fetchone()
    return int(row["checkpoints"]), int(row["checkpoints"] + row["blobs"] + row["writes"])


async def prune(pool: AsyncConnectionPool, saver: AsyncPostgresSaver, retention: Retention,
                *, now: float | None = None) -> PruneReport:
    """One full pass over the candidates, in batches."""
    started = time.monotonic()
    now_dt = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    cut = {
        "idle_before": now_dt - timedelta(seconds=retention.idle_s),
        "inactive_before": now_dt - timedelta(seconds=retention.inactive_s),
        "archived_before": now_dt - timedelta(seconds=retention.archived_s),
    }
    report = PruneReport()
    async with pool.connection() as conn:
        got: Any = await (await conn.execute(
            "SELECT pg_try_advisory_lock(%s, %s) AS ok", PRUNER_LOCK)).fetchone()
        if not got["ok"]:
            raise PrunerBusy("another pruner is running on this database")
        try:
            for _rule, query, deletes in RULES:
                await _walk(conn, saver, query, deletes, cut, retention, report)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s, %s)", PRUNER_LOCK)
    report.duration_s = time.monotonic() - started
    return report


async def _walk(conn: psycopg.AsyncConnection[Any], saver: AsyncPostgresSaver, query: str,
                deletes: bool, cut: dict[str, Any], retention: Retention,
                report: PruneReport) -> None:
    """One rule's candidates, batch by batch, in its index's order (keyset cursor)."""
    after: tuple[datetime, str] = (datetime.min.replace(tzinfo=UTC), "")
    while True:
        rows: list[Any] = await (await conn.execute(query, {
            **cut, "after_ts": after[0], "after_id": after[1], "limit": retention.batch_size,
        })).fetchall()
        if not rows:
            return
        after = (rows[-1]["k"], rows[-1]["id"])
        report.batches += 1
        ids = [r["id"] for r in rows]
        if deletes:
            await _delete_batch(conn, saver, ids, cut, report, retention.pause_ratio)
        else:
            await _compact(conn, saver, ids, cut, report, retention.pause_ratio)
        if len(rows) < retention.batch_size:
            return


async def _lock_and_recheck(
    conn: psycopg.AsyncConnection[Any], ids: list[str], cut: dict[str, Any],
    report: PruneReport,
) -> tuple[list[str], list[Any]]:
    """Lock what is free, then keep the locked threads that still qualify."""
    locked: list[str] = []
    for tid in ids:
        if await try_conversation_lock(conn, tid):
            locked.append(tid)
        else:
            report.skipped_busy += 1
            report.skipped_ids.append(tid)
    if not locked:
        return locked, []
    rows: list[Any] = await (await conn.execute(RECHECK, {**cut, "ids": locked})).fetchall()
    report.skipped_other += len(locked) - len(rows)
    return locked, rows


async def _pause(started: float, ratio: float) -> None:
    if ratio > 0:
        await asyncio.sleep((time.monotonic() - started) * ratio)


async def _delete_batch(conn: psycopg.AsyncConnection[Any], saver: AsyncPostgresSaver,
                        ids: list[str], cut: dict[str, Any], report: PruneReport,
                        pause_ratio: float) -> None:
    # In chunks of DELETE_CHUNK threads (inactive for days, so the lock wait does not
    # matter); small transactions keep the WAL bursts that slow live turns short.
    late: list[str] = []
    for i in range(0, len(ids), DELETE_CHUNK):
        late += await _delete_chunk(conn, saver, ids[i:i + DELETE_CHUNK], cut, report,
                                    pause_ratio)
    # A thread that stopped qualifying for deletion (a restore) but is still idle.
    await _compact(conn, saver, late, cut, report, pause_ratio)


async def _delete_chunk(conn: psycopg.AsyncConnection[Any], saver: AsyncPostgresSaver,
                        ids: list[str], cut: dict[str, Any], report: PruneReport,
                        pause_ratio: float) -> list[str]:
    """Delete the threads that still qualify; return those now only idle (to compact)."""
    started = time.monotonic()
    locked: list[str] = []
    late: list[str] = []
    try:
        # The row locks of the re-check are held until the conversations are deleted.
        async with conn.transaction():
            locked, ok = await _lock_and_recheck(conn, ids, cut, report)
            expired = [r["id"] for r in ok if r["expired"]]
            late = [r["id"] for r in ok if not r["expired"]]
            if expired:
                before_ckpt, before_rows = await _count(conn, expired)
                # Checkpoints first (the saver's own connection): a failure after this leaves
                # conversation rows that the next run finds again, never orphan checkpoints.
                await saver.aprune(expired, strategy="delete")
                await conn.execute(DELETE_CONVERSATIONS, (expired,))
                report.threads_deleted += len(expired)
                report.checkpoints_deleted += before_ckpt
                report.rows_deleted += before_rows
    finally:
        for tid in locked:
            await release_conversation_lock(conn, tid)
    await _pause(started, pause_ratio)
    return late


async def _compact(conn: psycopg.AsyncConnection[Any], saver: AsyncPostgresSaver,
                   ids: list[str], cut: dict[str, Any], report: PruneReport,
                   pause_ratio: float) -> None:
    # One thread at a time under its own lock, so a returning user waits for one thread's
    # prune at most, not the batch's.
    for tid in ids:
        started = time.monotonic()
        locked, ok = await _lock_and_recheck(conn, [tid], cut, report)
        try:
            if not ok:
                continue
            forked = await (await conn.execute(FORKED, {"id": tid})).fetchone()
            if forked and _first_value(forked):
                await conn.execute(MARK_COMPACTED, {"id": tid})
                continue
            before_ckpt, before_rows = await _count(conn, [tid])
            try:
                await saver.aprune([tid], strategy="keep_latest")
            except (NotImplementedError, psycopg.errors.SerializationFailure,
                    psycopg.errors.DeadlockDetected):
                # A DeltaChannel thread (keep_latest cannot prune it) or a concurrent change:
                # left for the next run.
                report.skipped_other += 1
                report.skipped_ids.append(tid)
                continue
            after_ckpt, after_rows = await _count(conn, [tid])
            await conn.execute(DELETE_OLD_RUNS, {"id": tid})
            await conn.execute(MARK_COMPACTED, {"id": tid})
            report.threads_compacted += 1
            report.checkpoints_deleted += before_ckpt - after_ckpt
            report.rows_deleted += before_rows - after_rows
        finally:
            for held in locked:
                await release_conversation_lock(conn, held)
        await _pause(started, pause_ratio)
