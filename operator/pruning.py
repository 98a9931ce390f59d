"""Checkpoint pruning, driven by our conversations table (last activity, archive time).

- Threads idle longer than `idle_s` keep only their latest checkpoint
  (`AsyncPostgresSaver.aprune(strategy="keep_latest")`, one thread at a time under its lock).
- Threads inactive longer than `inactive_s`, or archived longer than `archived_s`, are deleted
  (`aprune(strategy="delete")` for the batch, then their conversation rows, which cascade to
  turns, messages, tool calls, confirmations and leases). Checkpoints go first: a crash in
  between leaves a conversation row that the next run finds again, never orphan checkpoints.
- A thread that runs (its per-conversation advisory lock is held: agentchat.db) or has a
  pending, unexpired card is never touched; both are re-checked once the lock is ours.
- Candidates are walked in (last_activity_at, id) order with a keyset cursor, so skipped
  threads are not revisited within a run.
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

# The candidate predicate; %(...)s are the cut-off times. `expired` = delete, else keep_latest.
_PENDING_CARD = """EXISTS (SELECT 1 FROM confirmations f WHERE f.conversation_id = c.id
                   AND f.status = 'pending' AND f.expires_at > now())"""
# A turn that streams (or streamed in the last lease period) holds a lease: leave it alone.
_ACTIVE_LEASE = """EXISTS (SELECT 1 FROM leases l WHERE l.conversation_id = c.id
                   AND l.until > now())"""
_EXPIRED = """(c.last_activity_at < %(inactive_before)s
              OR (c.is_archived AND c.archived_at < %(archived_before)s))"""
# keep_latest only where there is something to drop (more than one checkpoint).
_HAS_HISTORY = """(SELECT count(*) FROM (SELECT 1 FROM checkpoints k
                   WHERE k.thread_id = c.id LIMIT 2) s) > 1"""

SELECT_CANDIDATES = f"""
SELECT c.id, c.last_activity_at, {_EXPIRED} AS expired
FROM conversations c
WHERE (c.last_activity_at, c.id) > (%(after_ts)s, %(after_id)s)
  AND (c.last_activity_at < %(idle_before)s OR {_EXPIRED})
  AND NOT {_PENDING_CARD}
  AND NOT {_ACTIVE_LEASE}
  AND ({_EXPIRED} OR {_HAS_HISTORY})
ORDER BY c.last_activity_at, c.id
LIMIT %(limit)s
"""

# The same predicate for threads whose lock we now hold (a turn may have run meanwhile).
RECHECK = f"""
SELECT c.id, {_EXPIRED} AS expired
FROM conversations c
WHERE c.id = ANY(%(ids)s)
  AND (c.last_activity_at < %(idle_before)s OR {_EXPIRED})
  AND NOT {_PENDING_CARD}
  AND NOT {_ACTIVE_LEASE}
"""

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
            after: tuple[datetime, str] = (datetime.min.replace(tzinfo=UTC), "")
            while True:
                rows: list[Any] = await (await conn.execute(SELECT_CANDIDATES, {
                    **cut, "after_ts": after[0], "after_id": after[1],
                    "limit": retention.batch_size,
                })).fetchall()
                if not rows:
                    break
                after = (rows[-1]["last_activity_at"], rows[-1]["id"])
                report.batches += 1
                await _prune_batch(conn, saver, rows, cut, report, retention.pause_ratio)
                if len(rows) < retention.batch_size:
                    break
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s, %s)", PRUNER_LOCK)
    report.duration_s = time.monotonic() - started
    return report


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


async def _prune_batch(conn: psycopg.AsyncConnection[Any], saver: AsyncPostgresSaver,
                       rows: list[Any], cut: dict[str, Any], report: PruneReport,
                       pause_ratio: float) -> None:
    # Deletions: in chunks of DELETE_CHUNK threads (inactive for days, so the lock wait does
    # not matter); small transactions keep the WAL bursts that slow live turns short.
    late: list[str] = []
    expired_ids = [r["id"] for r in rows if r["expired"]]
    for i in range(0, len(expired_ids), DELETE_CHUNK):
        late += await _delete_chunk(conn, saver, expired_ids[i:i + DELETE_CHUNK], cut, report,
                                    pause_ratio)
    await _compact(conn, saver, [r["id"] for r in rows if not r["expired"]] + late, cut,
                   report, pause_ratio)


async def _delete_chunk(conn: psycopg.AsyncConnection[Any], saver: AsyncPostgresSaver,
                        ids: list[str], cut: dict[str, Any], report: PruneReport,
                        pause_ratio: float) -> list[str]:
    """Delete the threads that still qualify; return those now only idle (to compact)."""
    started = time.monotonic()
    locked, ok = await _lock_and_recheck(conn, ids, cut, report)
    try:
        expired = [r["id"] for r in ok if r["expired"]]
        if expired:
            before_ckpt, before_rows = await _count(conn, expired)
            await saver.aprune(expired, strategy="delete")
            await conn.execute(DELETE_CONVERSATIONS, (expired,))
            report.threads_deleted += len(expired)
            report.checkpoints_deleted += before_ckpt
            report.rows_deleted += before_rows
        # A thread that stopped qualifying for deletion but is still idle is compacted below.
        late = [r["id"] for r in ok if not r["expired"]]
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
            report.threads_compacted += 1
            report.checkpoints_deleted += before_ckpt - after_ckpt
            report.rows_deleted += before_rows - after_rows
        finally:
            for held in locked:
                await release_conversation_lock(conn, held)
        await _pause(started, pause_ratio)
