"""Benchmark: prune 2,000 threads of 10 turns each while a writer keeps running chat turns.

The threads are written with the real `AsyncPostgresSaver` (each turn adds a user message and
a ~1.3 KB answer, so the state grows like a chat's). Half are past retention (deleted), half
idle (keep only the latest checkpoint). The writer runs turns on its own threads, each under
the per-conversation lock, exactly as the agent does. The pruner runs in its own process, as
the operator would.

Baseline in the same run: the same writer for the same time without pruning.
Goals: writer p99 with pruning <= 2x baseline; no lock wait over 100 ms.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \
        .venv/bin/python bench/prune_checkpoints.py [--threads 2000] [--turns 10]

Scale mode (`--conversations N`, issue 23): the candidate queries on a table of N
conversations in the steady state (each with one checkpoint, already compacted; copies of a
real checkpoint row), plus 400 real candidates (200 past retention, 200 idle with history)
written with the saver. It measures, on the same database and machine:

- before: migration 8's indexes dropped and the old single candidate query (ORDER BY
  (last_activity_at, id), a checkpoint probe per row), EXPLAIN ANALYZE of its first batch;
- after: migration 8's indexes, each rule's query, EXPLAIN ANALYZE of its first batch, and
  the real `prune()` over the candidates (batches, total seconds, seconds per batch).

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \
        .venv/bin/python bench/prune_checkpoints.py --conversations 200000

Goal: per-batch time flat in the table size (compare 200k and 1M).

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import operator
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph

from agentchat.db import conversation_lock, create_pool, migrate
from common import scratch_database

ANSWER = "ответ " * 220  # ~1.3 KB


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def _answer(state: State) -> dict[str, Any]:
    return {"messages": [ANSWER]}


def graph(saver: AsyncPostgresSaver) -> Any:
    g = StateGraph(State)
    g.add_node("model", _answer)
    g.add_edge(START, "model")
    g.add_edge("model", END)
    return g.compile(checkpointer=saver)


def _cfg(tid: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": tid}}


async def seed(url: str, threads: int, turns: int) -> None:
    pool = create_pool(url, min_size=8, max_size=8, timeout=60)
    await pool.open(wait=True)
    now = datetime.now(UTC)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(threads):
        queue.put_nowait(i)

    async def worker() -> None:
        # One saver per worker: a saver serializes its own calls behind an asyncio.Lock.
        g = graph(AsyncPostgresSaver(pool))  # type: ignore[arg-type]
        while not queue.empty():
            i = queue.get_nowait()
            tid = f"old-{i}"
            active = now - timedelta(days=120 if i % 2 else 2)
            async with pool.connection() as conn:
                await conn.execute("INSERT INTO conversations (id, owner, last_activity_at)"
                                   " VALUES (%s, 'bench', %s)", (tid, active))
            for t in range(turns):
                await g.ainvoke({"messages": [f"question {t} " + "x" * 150]}, _cfg(tid))

    await asyncio.gather(*(worker() for _ in range(8)))
    await pool.close()


async def writer(url: str, stop: asyncio.Event, lat: list[float], waits: list[float]) -> None:
    """Chat turns on 20 live threads, each under the conversation lock (like the agent)."""
    pool = create_pool(url, min_size=4, max_size=4)
    await pool.open(wait=True)
    saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
    g = graph(saver)
    tids = [f"live-{uuid.uuid4().hex[:8]}" for _ in range(20)]
    async with pool.connection() as conn:
        for tid in tids:
            await conn.execute("INSERT INTO conversations (id, owner) VALUES (%s, 'w')", (tid,))
    i = 0
    async with pool.connection() as lock_conn:
        while not stop.is_set():
            tid = tids[i % len(tids)]
            i += 1
            t0 = time.perf_counter()
            async with conversation_lock(lock_conn, tid):
                waits.append(time.perf_counter() - t0)
                await g.ainvoke({"messages": ["q " + "y" * 150]}, _cfg(tid))
                async with pool.connection() as conn:
                    await conn.execute("UPDATE conversations SET last_activity_at = now()"
                                       " WHERE id = %s", (tid,))
            lat.append(time.perf_counter() - t0)
    await pool.close()


def _prune_process(url: str, batch: int, pause: float, out: Any) -> None:
    from agentchat.operator.pruning import Retention, prune

    async def run() -> dict[str, Any]:
        pool = create_pool(url, min_size=2, max_size=3)
        await pool.open(wait=True)
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        report = await prune(pool, saver, Retention(idle_s=3600, inactive_s=90 * 86400,
                                                    archived_s=30 * 86400, batch_size=batch,
                                                    pause_ratio=pause))
        await pool.close()
        return report.to_status()

    out.put(asyncio.run(run()))


async def total_rows(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT (SELECT count(*) FROM checkpoints) + (SELECT count(*)"
                                 " FROM checkpoint_blobs) + (SELECT count(*) FROM"
                                 " checkpoint_writes)")
        row = await cur.fetchone()
        return int(row[0])  # type: ignore[index]


# The candidate query before issue 23 (operator/pruning.py at ea9a5e8), for the "before" column.
OLD_SELECT_CANDIDATES = """
SELECT c.id, c.last_activity_at,
  (c.last_activity_at < %(inactive_before)s
   OR (c.is_archived AND c.archived_at < %(archived_before)s)) AS expired
FROM conversations c
WHERE (c.last_activity_at, c.id) > (%(after_ts)s, %(after_id)s)
  AND (c.last_activity_at < %(idle_before)s OR (c.last_activity_at < %(inactive_before)s
       OR (c.is_archived AND c.archived_at < %(archived_before)s)))
  AND NOT EXISTS (SELECT 1 FROM confirmations f WHERE f.conversation_id = c.id
                  AND f.status = 'pending' AND f.expires_at > now())
  AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.conversation_id = c.id AND l.until > now())
  AND ((c.last_activity_at < %(inactive_before)s
        OR (c.is_archived AND c.archived_at < %(archived_before)s))
       OR (SELECT count(*) FROM (SELECT 1 FROM checkpoints k
           WHERE k.thread_id = c.id LIMIT 2) s) > 1)
ORDER BY c.last_activity_at, c.id
LIMIT %(limit)s
"""
NEW_INDEXES = ("conversations_prune_activity", "conversations_prune_archived",
               "conversations_prune_uncompacted")

# N steady-state conversations: idle 2-80 days (not past the 90-day retention), already
# compacted, one in 50 archived recently (within the 30-day retention), each with one
# checkpoint copied from a real one.
BULK_CONVERSATIONS = """
INSERT INTO conversations (id, owner, last_activity_at, is_archived, archived_at,
                           compacted_activity_at)
SELECT 'bulk-' || i, 'u' || (i %% 5000), a, i %% 50 = 0,
       CASE WHEN i %% 50 = 0 THEN now() - interval '1 day' END, a
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT now() - interval '2 days'
                     - ((i::float8 / %(n)s) * interval '78 days') AS a) t
"""
BULK_CHECKPOINTS = """
INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
                         checkpoint, metadata)
SELECT 'bulk-' || i, k.checkpoint_ns, k.checkpoint_id, NULL, k.type, k.checkpoint, k.metadata
FROM generate_series(1, %(n)s) AS i,
     (SELECT * FROM checkpoints WHERE thread_id = 'cand-0'
      ORDER BY checkpoint_id DESC LIMIT 1) k
"""


def _cutoffs() -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"idle_before": now - timedelta(hours=1),
            "inactive_before": now - timedelta(days=90),
            "archived_before": now - timedelta(days=30),
            "after_ts": datetime.min.replace(tzinfo=UTC), "after_id": "", "limit": 200}


async def _explain(conn: Any, query: str, params: dict[str, Any]) -> dict[str, Any]:
    rows = await (await conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query,
                                     params)).fetchall()
    top = rows[0]["QUERY PLAN"][0]
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans") or []:
            walk(child)

    walk(top["Plan"])
    scans = [f"{n['Node Type']}" + (f" {n['Index Name']}" if n.get("Index Name") else "")
             for n in nodes if n.get("Relation Name") == "conversations"]
    probes = max((n.get("Actual Loops", 0) for n in nodes
                  if n.get("Relation Name") == "checkpoints"), default=0)
    return {"ms": round(top["Execution Time"], 2), "rows": top["Plan"].get("Actual Rows"),
            "conversations_scan": scans, "checkpoint_probes": probes,
            "shared_buffers_read": top["Plan"].get("Shared Hit Blocks", 0)
            + top["Plan"].get("Shared Read Blocks", 0)}


async def scale(args: argparse.Namespace) -> dict[str, Any]:
    from agentchat.operator.pruning import RULES, Retention, prune

    n = args.conversations
    with tempfile.TemporaryDirectory(prefix="prune-scale-") as tmp, \
            scratch_database(Path(tmp)) as url:
        async with await psycopg.AsyncConnection.connect(
                url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
            await migrate(conn)
            await AsyncPostgresSaver(conn).setup()  # type: ignore[arg-type]
        t0 = time.perf_counter()
        pool = create_pool(url, min_size=4, max_size=6, timeout=60)
        await pool.open(wait=True)
        now = datetime.now(UTC)

        async def candidate(i: int) -> None:
            g = graph(AsyncPostgresSaver(pool))  # type: ignore[arg-type]
            tid = f"cand-{i}"
            active = now - timedelta(days=120 if i % 2 else 3)
            async with pool.connection() as c:
                await c.execute("INSERT INTO conversations (id, owner, last_activity_at)"
                                " VALUES (%s, 'bench', %s)", (tid, active))
            for t in range(3):
                await g.ainvoke({"messages": [f"question {t}"]}, _cfg(tid))

        for start in range(0, 400, 8):
            await asyncio.gather(*(candidate(i) for i in range(start, start + 8)))
        async with pool.connection() as conn:
            await conn.execute(BULK_CONVERSATIONS, {"n": n})
            await conn.execute(BULK_CHECKPOINTS, {"n": n})
            await conn.execute("VACUUM ANALYZE conversations")
            await conn.execute("VACUUM ANALYZE checkpoints")
        seed_s = time.perf_counter() - t0
        print(f"seeded {n} + 400 candidates in {seed_s:.1f}s", file=sys.stderr)

        cut = _cutoffs()
        async with pool.connection() as conn:
            after = {rule: await _explain(conn, query, cut) for rule, query, _ in RULES}
            # Before: the old query on the schema before migration 8's indexes (same data).
            async with conn.transaction():
                for index in NEW_INDEXES:
                    await conn.execute(f"DROP INDEX {index}")
                before = await _explain(conn, OLD_SELECT_CANDIDATES, cut)
                raise psycopg.Rollback()  # the indexes come back untouched

        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        report = await prune(pool, saver, Retention(idle_s=3600, inactive_s=90 * 86400,
                                                    archived_s=30 * 86400, batch_size=200,
                                                    pause_ratio=0.0))
        await pool.close()
    status = report.to_status()
    return {
        "benchmark": "prune_checkpoints_scale", "conversations": n, "candidates": 400,
        "seed_seconds": round(seed_s, 1),
        "before_first_batch": before,
        "after_first_batch": after,
        "after_prune": {"batches": status["batches"], "seconds": status["durationS"],
                        "seconds_per_batch": round(status["durationS"]
                                                   / max(status["batches"], 1), 3),
                        "threads_deleted": status["threadsDeleted"],
                        "threads_compacted": status["threadsCompacted"],
                        "rows_deleted": status["rowsDeleted"]},
    }


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 2 else max(values)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="prune-bench-") as tmp, \
            scratch_database(Path(tmp)) as url:
        async with await psycopg.AsyncConnection.connect(
                url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
            await migrate(conn)
            await AsyncPostgresSaver(conn).setup()  # type: ignore[arg-type]
        t0 = time.perf_counter()
        await seed(url, args.threads, args.turns)
        seed_s = time.perf_counter() - t0
        print(f"seeded {args.threads}x{args.turns} in {seed_s:.1f}s", file=sys.stderr)

        # Baseline: the writer alone.
        base_lat: list[float] = []
        base_wait: list[float] = []
        stop = asyncio.Event()
        task = asyncio.create_task(writer(url, stop, base_lat, base_wait))
        await asyncio.sleep(args.baseline_s)
        stop.set()
        await task

        # The same writer while the pruner runs in its own process.
        rows_before = await total_rows(url)
        lat: list[float] = []
        waits: list[float] = []
        stop = asyncio.Event()
        task = asyncio.create_task(writer(url, stop, lat, waits))
        await asyncio.sleep(1.0)  # the writer is warm before pruning starts
        out: Any = multiprocessing.get_context("spawn").Queue()
        proc = multiprocessing.get_context("spawn").Process(
            target=_prune_process, args=(url, args.batch, args.pause_ratio, out))
        t0 = time.perf_counter()
        proc.start()
        report = await asyncio.to_thread(out.get)
        prune_s = time.perf_counter() - t0
        await asyncio.to_thread(proc.join)
        stop.set()
        await task
        rows_deleted = rows_before - await total_rows(url)

    base_p99, prune_p99 = p99(base_lat) * 1000, p99(lat) * 1000
    max_wait = max(waits) * 1000
    return {
        "benchmark": "prune_checkpoints", "threads": args.threads, "turns": args.turns,
        "seed_seconds": round(seed_s, 1), "prune_seconds": round(prune_s, 2),
        # The pruner's own count (the writer adds rows meanwhile) over its own run time
        # (prune_seconds includes starting the process).
        "rows_deleted": report["rowsDeleted"],
        "rows_deleted_per_s": round(report["rowsDeleted"] / report["durationS"]),
        "net_rows_removed": rows_deleted,
        "pause_ratio": args.pause_ratio, "report": report,
        "writer_turns_baseline": len(base_lat), "writer_turns_pruning": len(lat),
        "writer_p99_ms_baseline": round(base_p99, 1), "writer_p99_ms_pruning": round(prune_p99, 1),
        "writer_p99_ratio": round(prune_p99 / base_p99, 2),
        "writer_max_lock_wait_ms": round(max_wait, 2),
        "goals_met": prune_p99 <= 2 * base_p99 and max_wait <= 100,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--baseline-s", type=float, default=15.0)
    # The operator's default (AGENTCHAT_OPERATOR_TUNING__PRUNE_PAUSE_RATIO); 0 = flat out.
    parser.add_argument("--pause-ratio", type=float, default=1.0)
    parser.add_argument("--conversations", type=int, default=0,
                        help="scale mode: the candidate queries on this many conversations")
    cli = parser.parse_args()
    result = asyncio.run(scale(cli) if cli.conversations else main(cli))
    print(json.dumps(result))
