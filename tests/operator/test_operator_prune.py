"""Checkpoint pruning against the real PostgreSQL and the real LangGraph saver: directly,
then through the operator (kopf against kmock), and with the database unreachable."""

from __future__ import annotations

import asyncio
import operator
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from test_operator_kopf import NS, cluster, conditions, operator_factory, wait_for

from agentchat.db import conversation_lock, create_pool
from agentchat.operator.pruning import Retention, prune
from testkit.kube_emulator import KubeEmulator
from testkit.support import free_port

__all__ = ["cluster", "operator_factory"]  # fixtures re-used from the kopf tests

DAY = 86400.0
RETENTION = Retention(idle_s=3600, inactive_s=90 * DAY, archived_s=30 * DAY, batch_size=2)


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def _turn(state: State) -> dict[str, Any]:
    return {"messages": ["answer " + "x" * 200]}


def _gate(state: State) -> dict[str, Any]:
    # Like the agent's policy gate: the card is an interrupt, the side effect comes after it.
    answer = interrupt({"confirm_id": "card-1", "tool": "deploy"})
    return {"messages": [f"deploy {answer}"]}


def chat_graph(saver: AsyncPostgresSaver) -> Any:
    g = StateGraph(State)
    g.add_node("turn", _turn)
    g.add_edge(START, "turn")
    g.add_edge("turn", END)
    return g.compile(checkpointer=saver)


def card_graph(saver: AsyncPostgresSaver) -> Any:
    g = StateGraph(State)
    g.add_node("turn", _turn)
    g.add_node("gate", _gate)
    g.add_edge(START, "turn")
    g.add_edge("turn", "gate")
    g.add_edge("gate", END)
    return g.compile(checkpointer=saver)


def cfg(tid: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": tid}}


async def seed(conn: psycopg.AsyncConnection[Any], saver: AsyncPostgresSaver) -> None:
    now = datetime.now(UTC)
    chat = chat_graph(saver)
    rows = {  # id: (last activity, archived at)
        "idle": (now - timedelta(days=2), None),
        "fresh": (now - timedelta(minutes=5), None),
        "old": (now - timedelta(days=100), None),
        "archived": (now - timedelta(days=40), now - timedelta(days=35)),
        "running": (now - timedelta(days=2), None),
        "card": (now - timedelta(days=2), None),
        "expired-card": (now - timedelta(days=2), None),
    }
    for tid, (active, archived) in rows.items():
        await conn.execute(
            "INSERT INTO conversations (id, owner, last_activity_at, is_archived, archived_at)"
            " VALUES (%s, 'alice', %s, %s, %s)", (tid, active, archived is not None, archived))
        await conn.execute("INSERT INTO messages (id, conversation_id, role, content)"
                           " VALUES (%s, %s, 'user', 'hi')", (f"m-{tid}", tid))
        graph = card_graph(saver) if "card" in tid else chat
        for i in range(3 if "card" not in tid else 1):
            await graph.ainvoke({"messages": [f"q{i}"]}, cfg(tid))
    for tid, expires in (("card", now + timedelta(minutes=5)),
                         ("expired-card", now - timedelta(minutes=1))):
        await conn.execute(
            "INSERT INTO confirmations (confirm_id, conversation_id, call_id, payload,"
            " expires_at) VALUES (%s, %s, 'call-1', '{}', %s)", (f"c-{tid}", tid, expires))


async def checkpoints(conn: psycopg.AsyncConnection[Any]) -> dict[str, int]:
    rows = await (await conn.execute(
        "SELECT thread_id, count(*) AS n FROM checkpoints GROUP BY thread_id")).fetchall()
    return {r["thread_id"]: r["n"] for r in rows}  # type: ignore[call-overload,index]


async def test_prune_keeps_cards_and_running_threads(database_url: str) -> None:
    pool = create_pool(database_url, max_size=4)
    await pool.open(wait=True)
    try:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        async with pool.connection() as conn, pool.connection() as turn_conn:
            await seed(conn, saver)
            before = await checkpoints(conn)
            idle_state = (await chat_graph(saver).aget_state(cfg("idle"))).values
            assert before["idle"] > 1
            # A turn is running on "running": it holds the conversation lock.
            async with conversation_lock(turn_conn, "running"):
                report = await prune(pool, saver, RETENTION)
            after = await checkpoints(conn)

            assert report.threads_deleted == 2 and report.threads_compacted == 2
            assert report.skipped_busy == 1
            assert report.rows_deleted > report.checkpoints_deleted > 0
            assert "old" not in after and "archived" not in after
            ids = {r["id"] for r in await (await conn.execute(  # type: ignore[index]
                "SELECT id FROM conversations")).fetchall()}
            assert ids == {"idle", "fresh", "running", "card", "expired-card"}
            left = await (await conn.execute(
                "SELECT count(*) AS n FROM messages WHERE conversation_id IN ('old','archived')"
            )).fetchone()
            assert left["n"] == 0  # type: ignore[index]
            assert after["idle"] == 1 and after["expired-card"] == 1
            assert (await chat_graph(saver).aget_state(cfg("idle"))).values == idle_state
            for untouched in ("fresh", "running", "card"):
                assert after[untouched] == before[untouched], untouched

            # The pending card is still answerable: resume runs the gate to its end.
            graph = card_graph(saver)
            state = await graph.aget_state(cfg("card"))
            assert state.tasks and state.tasks[0].interrupts
            result = await graph.ainvoke(Command(resume="confirmed"), cfg("card"))
            assert result["messages"][-1] == "deploy confirmed"

            # The turn on "running" has ended: the next run compacts it, then nothing is left.
            again = await prune(pool, saver, RETENTION)
            assert (again.threads_deleted, again.threads_compacted) == (0, 1)
            assert (await checkpoints(conn))["running"] == 1
            last = await prune(pool, saver, RETENTION)
            assert (last.threads_deleted, last.threads_compacted) == (0, 0)
    finally:
        await pool.close()


def test_operator_prunes_through_the_spec(cluster: KubeEmulator, operator_factory: Any,
                                          database_url: str) -> None:
    async def setup() -> None:
        async with await psycopg.AsyncConnection.connect(
                database_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
            saver = AsyncPostgresSaver(conn)  # type: ignore[arg-type]
            await saver.setup()
            await seed(conn, saver)

    asyncio.run(setup())
    cluster.create_secret(NS, "chat-db", {"url": database_url})
    cluster.create_agentchat(NS, "chat", {
        "database": {"secretRef": {"name": "chat-db"}},
        "checkpoints": {"keepLatestAfterIdleHours": 1, "batchSize": 3},
    })
    operator_factory()
    cond = wait_for("Pruned", lambda: conditions(cluster, "chat").get("Pruned"))
    assert cond["status"] == "True", cond
    status = cluster.agentchat(NS, "chat")["status"]["prune"]
    assert status["threadsDeleted"] == 2 and status["threadsCompacted"] == 3
    assert status["rowsDeleted"] > 0 and status["lastRunAt"] and status["nextRunAt"]
    assert any(e["reason"] == "Pruned" for e in cluster.events(NS))
    # Due-checked: the next run is an hour away, so further ticks leave the status alone.
    time.sleep(1.5)
    assert cluster.agentchat(NS, "chat")["status"]["prune"]["lastRunAt"] == status["lastRunAt"]


def test_unreachable_database_is_reported_and_retried(cluster: KubeEmulator,
                                                      operator_factory: Any,
                                                      tmp_path: Path) -> None:
    url = f"postgresql://agent:s3cret-pw@127.0.0.1:{free_port()}/nowhere?connect_timeout=1"
    cluster.create_secret(NS, "chat-db", {"url": url})
    cluster.create_agentchat(NS, "chat", {"database": {"secretRef": {"name": "chat-db"}}})
    operator_factory()

    def failed_twice() -> bool:
        obj = cluster.agentchat(NS, "chat") or {}
        return int(((obj.get("status") or {}).get("prune") or {}).get("failures") or 0) >= 2

    wait_for("two failed attempts", failed_twice, timeout=60)
    cond = conditions(cluster, "chat")["Pruned"]
    assert cond["status"] == "False" and cond["reason"] == "StorageUnavailable"
    assert "STORAGE_UNAVAILABLE" in cond["message"]
    warnings = [e for e in cluster.events(NS) if e["reason"] == "PruneFailed"]
    assert warnings and all(e["type"] == "Warning" for e in warnings)
    # The URL's password never leaves the operator: not in status, Events or the log.
    assert "s3cret-pw" not in cluster.dump()
    assert "s3cret-pw" not in "".join(p.read_text() for p in tmp_path.glob("operator-*.log"))
    # Keys and token are unaffected by the database outage.
    assert conditions(cluster, "chat")["Ready"]["status"] == "True"


# --- pruning that scales (issue 23, item 7) ------------------------------------------------


async def _open(database_url: str) -> tuple[Any, AsyncPostgresSaver]:
    pool = create_pool(database_url, max_size=6)
    await pool.open(wait=True)
    saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
    await saver.setup()
    return pool, saver


async def _add_runs(conn: psycopg.AsyncConnection[Any], tid: str, n: int) -> list[str]:
    """n runs of the conversation, oldest first, two events each."""
    now = datetime.now(UTC)
    ids = []
    for i in range(n):
        rid = f"{tid}-run-{i}"
        await conn.execute(
            "INSERT INTO runs (id, conversation_id, turn_id, kind, tab_id, replica, status,"
            " started_at) VALUES (%s, %s, %s, 'message', 'tab', 'r1', 'completed', %s)",
            (rid, tid, f"t{i}", now - timedelta(days=3) + timedelta(minutes=i)))
        for seq in (1, 2):
            await conn.execute("INSERT INTO run_events (run_id, seq, event) VALUES (%s, %s,"
                               " '{}')", (rid, seq))
        ids.append(rid)
    return ids


async def test_compaction_keeps_only_the_newest_run_and_is_not_repeated(
        database_url: str) -> None:
    pool, saver = await _open(database_url)
    try:
        async with pool.connection() as conn:
            await seed(conn, saver)
            runs = await _add_runs(conn, "idle", 3)
            fresh_runs = await _add_runs(conn, "fresh", 2)
            report = await prune(pool, saver, RETENTION)
            assert report.threads_compacted == 3  # idle, running, expired-card
            kept = await (await conn.execute(
                "SELECT r.id, count(e.seq) AS events FROM runs r LEFT JOIN run_events e"
                " ON e.run_id = r.id GROUP BY r.id ORDER BY r.id")).fetchall()
            assert {r["id"]: r["events"] for r in kept} == {  # type: ignore[call-overload,index]
                runs[-1]: 2, fresh_runs[0]: 2, fresh_runs[1]: 2}
            orphan = await (await conn.execute(
                "SELECT count(*) AS n FROM run_events WHERE run_id = ANY(%s)",
                (runs[:-1],))).fetchone()
            assert orphan["n"] == 0  # type: ignore[index]

            # Recorded in the row: the next run does not visit the compacted threads at all.
            again = await prune(pool, saver, RETENTION)
            assert (again.threads_compacted, again.batches) == (0, 0)
            # A new turn (activity after the compaction) makes the thread a candidate again.
            await chat_graph(saver).ainvoke({"messages": ["back"]}, cfg("idle"))
            await conn.execute("UPDATE conversations SET last_activity_at = now() - interval"
                               " '1 day' WHERE id = 'idle'")
            assert (await checkpoints(conn))["idle"] > 1
            third = await prune(pool, saver, RETENTION)
            assert third.threads_compacted == 1
            assert (await checkpoints(conn))["idle"] == 1
    finally:
        await pool.close()


SCALE_SEED = """
INSERT INTO conversations (id, owner, last_activity_at, is_archived, archived_at,
                           compacted_activity_at)
SELECT 'bulk-' || i, 'u' || (i %% 500), a, i %% 50 = 0, CASE WHEN i %% 50 = 0 THEN a END,
       -- every idle thread already compacted but the newest few: the steady state
       CASE WHEN i > 200 THEN a END
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT now() - interval '2 days' - (i || ' minutes')::interval AS a) t
"""


async def test_every_rule_query_walks_its_index(database_url: str) -> None:
    """EXPLAIN on a table of 30,000 conversations: each rule's query is an index scan of its
    own index (no sequential scan of conversations, no sort), so a batch reads about
    batch-size rows whatever the table's size."""
    from agentchat.operator import pruning

    async with await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        await conn.execute(SCALE_SEED, {"n": 30000})
        await conn.execute("ANALYZE conversations")
        now = datetime.now(UTC)
        params = {"idle_before": now - timedelta(hours=1),
                  "inactive_before": now - timedelta(days=10),
                  "archived_before": now - timedelta(days=5),
                  "after_ts": datetime.min.replace(tzinfo=UTC), "after_id": "", "limit": 200}
        expected = {"inactive": "conversations_prune_activity",
                    "archived": "conversations_prune_archived",
                    "idle": "conversations_prune_uncompacted"}
        for rule, query, _ in pruning.RULES:
            rows = await (await conn.execute("EXPLAIN (FORMAT JSON) " + query,
                                             params)).fetchall()
            plan = rows[0]["QUERY PLAN"][0]["Plan"]  # type: ignore[index]
            nodes = list(_nodes(plan))
            scans = [n for n in nodes if n.get("Relation Name") == "conversations"]
            assert len(scans) == 1, (rule, nodes)
            assert scans[0]["Node Type"] in ("Index Scan", "Index Only Scan"), (rule, scans)
            assert scans[0]["Index Name"] == expected[rule], (rule, scans)
            assert not [n for n in nodes if n["Node Type"] == "Sort"], rule


def _nodes(plan: dict[str, Any]) -> Any:
    yield plan
    for child in plan.get("Plans") or []:
        yield from _nodes(child)


class _SlowDeleteSaver(AsyncPostgresSaver):
    """The real saver, pausing inside the delete of "archived" so a restore can race it."""

    deleting: asyncio.Event
    proceed: asyncio.Event

    async def aprune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
        if strategy == "delete" and "archived" in thread_ids:
            self.deleting.set()
            await self.proceed.wait()
        await super().aprune(thread_ids, strategy=strategy)


async def test_a_restore_racing_a_prune_never_returns_200_for_a_deleted_thread(
        database_url: str) -> None:
    from agentchat.agent.storage.conversations import restore_conversation
    from agentchat.errors import AgentChatError

    pool, _ = await _open(database_url)
    saver = _SlowDeleteSaver(pool)  # type: ignore[arg-type]
    saver.deleting, saver.proceed = asyncio.Event(), asyncio.Event()
    try:
        async with pool.connection() as conn:
            await seed(conn, saver)

        async def restore() -> bool:
            try:
                await restore_conversation(pool, owner="alice", conversation_id="archived")
            except AgentChatError:
                return False  # 404
            return True  # 200

        # The restore arrives while the pruner deletes "archived": it waits for the delete.
        pruning = asyncio.create_task(prune(pool, saver, RETENTION))
        await asyncio.wait_for(saver.deleting.wait(), 30)
        assert "archived" in await _deleting(pool)  # its row is locked during the delete
        racing = asyncio.create_task(restore())
        await asyncio.sleep(0.5)
        saver.proceed.set()
        await pruning
        restored = await racing
        async with pool.connection() as conn:
            row = await (await conn.execute(
                "SELECT count(*) AS n FROM conversations WHERE id = 'archived'")).fetchone()
        exists = row["n"] == 1  # type: ignore[index]
        assert restored == exists, (restored, exists)
        assert not exists  # the delete had the row lock first: the restore found nothing

        # And many races at random moments: a 200 always means the thread is still there.
        for i in range(10):
            async with pool.connection() as conn:
                tid = f"race-{i}"
                await conn.execute(
                    "INSERT INTO conversations (id, owner, last_activity_at, is_archived,"
                    " archived_at) VALUES (%s, 'alice', now() - interval '40 days', true,"
                    " now() - interval '35 days')", (tid,))
            fast = AsyncPostgresSaver(pool)  # type: ignore[arg-type]

            async def restore_one(tid: str = tid, delay: float = i * 0.003) -> bool:
                await asyncio.sleep(delay)
                try:
                    await restore_conversation(pool, owner="alice", conversation_id=tid)
                except AgentChatError:
                    return False
                return True

            ok, _report = await asyncio.gather(restore_one(), prune(pool, fast, RETENTION))
            async with pool.connection() as conn:
                row = await (await conn.execute(
                    "SELECT count(*) AS n FROM conversations WHERE id = %s", (tid,))).fetchone()
            assert ok == (row["n"] == 1), (tid, ok)  # type: ignore[index]
    finally:
        await pool.close()


async def _deleting(pool: Any) -> set[str]:
    """The conversations whose rows the pruner holds locked right now."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT id FROM conversations FOR UPDATE SKIP LOCKED")).fetchall()
        free = {r["id"] for r in rows}
        every = {r["id"] for r in await (await conn.execute(
            "SELECT id FROM conversations")).fetchall()}
    return every - free


def test_the_operator_never_migrates(cluster: KubeEmulator, operator_factory: Any,
                                     empty_database_url: str) -> None:
    """Migrations are the agent's (one place with DDL rights): on a database it has not
    migrated yet, the pruner reports SchemaNotReady and creates nothing."""
    cluster.create_secret(NS, "chat-db", {"url": empty_database_url})
    cluster.create_agentchat(NS, "chat", {"database": {"secretRef": {"name": "chat-db"}}})
    operator_factory()
    cond = wait_for("Pruned", lambda: conditions(cluster, "chat").get("Pruned"))
    assert cond["status"] == "False" and cond["reason"] == "SchemaNotReady", cond
    assert "migration -1" in cond["message"]

    async def tables() -> list[str]:
        async with await psycopg.AsyncConnection.connect(empty_database_url) as conn:
            rows = await (await conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).fetchall()
            return [r[0] for r in rows]

    assert asyncio.run(tables()) == []
    # Keys and token are unaffected (the other timer may report after the pruner).
    wait_for("Ready", lambda: conditions(cluster, "chat").get("Ready", {}).get(
        "status") == "True")


async def test_a_conversation_with_branches_keeps_its_checkpoints(database_url: str) -> None:
    """Issue 35: a branch is a fork of an older checkpoint, so compacting to the newest would
    take every other branch with it. A forked conversation is marked compacted (not visited
    again) and keeps every checkpoint; the others are compacted as before."""
    pool, saver = await _open(database_url)
    try:
        async with pool.connection() as conn:
            await seed(conn, saver)
            # What an edit or a regenerate records on its conversation (storage/submits.py).
            await conn.execute("UPDATE conversations SET forked_at = now() WHERE id = 'idle'")
            before = await checkpoints(conn)
            assert before["idle"] > 1 and before["expired-card"] > 1
            report = await prune(pool, saver, RETENTION)
            after = await checkpoints(conn)
            assert after["idle"] == before["idle"]  # every branch's checkpoints kept
            assert after["expired-card"] == 1  # an unforked one is compacted as before
            again = await prune(pool, saver, RETENTION)
            assert (again.threads_compacted, again.batches) == (0, 0)  # not visited again
            assert report.threads_deleted == 2
    finally:
        await pool.close()
