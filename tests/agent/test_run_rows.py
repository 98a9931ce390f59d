"""The run writer's one transaction (agent/storage/runs.py `write`) with a run that has no row:
its conversation was deleted before the run's first batch, or with the run's row after it.
Its events are not stored and nothing fails: every other run's events in the same batches
are stored (a foreign-key error would have dropped them all, batch after batch)."""

from __future__ import annotations

from typing import Any

import psycopg

from agentchat.agent.storage import conversations
from agentchat.agent.storage import runs as store
from agentchat.db import CONNECTION_KWARGS


def _event(seq: int) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "metadata": {"type": "stream_token",
                                                              "seq": seq}}


def _progress(run_id: str, seq: int) -> store.Progress:
    return store.Progress(run_id, [(seq, _event(seq))], seq, 1, None)


async def test_a_run_without_a_row_costs_no_other_run_its_events(database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, **CONNECTION_KWARGS) as conn:
        kept = await conversations.create_conversation(conn, owner="alice", title="kept")
        doomed = await conversations.create_conversation(conn, owner="bob", title="doomed")
        run = {"turn_id": "t", "kind": "message", "tab_id": "tab", "replica": "r1"}
        await store.write(conn, [store.RunRecord("run-doomed", doomed["id"], **run)],
                          [_progress("run-doomed", 1)])
        await conn.execute("DELETE FROM conversations WHERE id = %s", (doomed["id"],))
        # A batch with a new run of a conversation already gone, one whose row went with its
        # conversation, and a live run: twice.
        fenced = await store.write(
            conn, [store.RunRecord("run-kept", kept["id"], **run),
                   store.RunRecord("run-late", doomed["id"], **run)],
            [_progress("run-kept", 1), _progress("run-late", 1), _progress("run-doomed", 2)])
        assert fenced == []
        await store.write(conn, [], [_progress("run-kept", 2), _progress("run-late", 2),
                                     _progress("run-doomed", 3)])
        cur = await conn.execute("SELECT run_id, seq FROM run_events ORDER BY run_id, seq")
        assert [(r["run_id"], r["seq"]) for r in await cur.fetchall()] == [
            ("run-kept", 1), ("run-kept", 2)]
        cur = await conn.execute("SELECT id, last_seq FROM runs")
        assert await cur.fetchall() == [{"id": "run-kept", "last_seq": 2}]
