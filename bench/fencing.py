"""What fencing a run's side effects costs (docs/protocol.md §4, "Takeover";
agent/storage/fencing.py, agent/graph/plans.py), each against PostgreSQL on the agent's pool:

- `epoch_check`: the epoch read right before each ss-tools request (`RunFence.verify`);
- `audit_append` against `audit_append_unfenced`: one row on the chain, by a run (its INSERT
  conditional on the epoch) and by the statement as it was before (no condition), the two
  interleaved in the same run;
- `plan_store`: a model step that plans a write, stored before the write runs (one statement,
  the turn's two earlier steps with it); `plan_replay`: a taken-over run reading a step back.

On a fresh migrated database (TEST_DATABASE_URL's server, else an embedded PostgreSQL), with
`--runs` live runs in `runs` and their turns and conversations.

    .venv/bin/python bench/fencing.py [--runs 200] [--samples 400]

Prints one JSON object on its last line: each one's p50 and p99 in ms, and the goals: the
epoch read under 1 ms at p50 (against a tool call's several), the fenced append within 0.5 ms
of the unfenced one at p50.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, message_to_dict

from agentchat.agent.audit import store as audit_store
from agentchat.agent.audit.store import CallRef
from agentchat.agent.storage import turn_plans
from agentchat.agent.storage.fencing import RunFence
from agentchat.db import create_pool, migrate_url
from common import scratch_database, summary

# The append as it was before the fence (commit 2dd6a9d's parent), the baseline.
UNFENCED = """
WITH rows AS (
    INSERT INTO audit_rows
    SELECT * FROM jsonb_populate_recordset(NULL::audit_rows, %(rows)s)
)
UPDATE audit_head SET seq = %(seq)s, hash = %(hash)s WHERE id
"""
SEED = (
    "INSERT INTO conversations (id, owner) SELECT c, 'alice' FROM unnest(%(ids)s::text[]) c",
    "INSERT INTO turns (id, conversation_id) SELECT c, c FROM unnest(%(ids)s::text[]) c",
    "INSERT INTO runs (id, conversation_id, turn_id, kind, tab_id, replica)"
    " SELECT c, c, c, 'message', 'tab', 'bench' FROM unnest(%(ids)s::text[]) c",
)


def step_message(n: int) -> dict[str, Any]:
    return message_to_dict(AIMessage(content="Обновляю датасет.", id=f"run-{n}", tool_calls=[{
        "name": "refresh_dataset", "args": {"dataset_id": n, "env_id": "ss-dev"},
        "id": f"call_{n:016x}_0", "type": "tool_call"}]))


async def timed(samples: int, op: Callable[[int], Awaitable[Any]]) -> list[float]:
    out = []
    for i in range(samples):
        started = time.perf_counter()
        await op(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


async def measure(url: str, runs: int, samples: int) -> dict[str, Any]:
    pool = create_pool(url, max_size=4)
    await pool.open(wait=True)
    ids = [str(uuid.uuid4()) for _ in range(runs)]
    async with pool.connection() as conn:
        for statement in SEED:
            await conn.execute(statement, {"ids": ids})
    fences = [RunFence(run_id=i, epoch=1, db=pool) for i in ids]

    def entry(i: int) -> audit_store.Entry:
        cid = ids[i % runs]
        ref = CallRef(cid, cid, f"call_{i}", "refresh_dataset", "ss-dev", "digest")
        return ref.entry("execution", {"outcome": "ok"})

    async def fenced_append(i: int) -> None:
        await audit_store.append(pool, [entry(i)], fences[i % runs])

    async def unfenced_append(i: int) -> None:
        async with pool.connection() as conn:
            async with conn.pipeline(), conn.transaction():
                placing = await audit_store.place(conn, [ids[i % runs]], [])
                statement = await audit_store.insert_rows(placing, [entry(i)], RunFence())
                assert statement is not None
                await conn.execute(UNFENCED, statement[1])

    async def store(i: int) -> None:
        turn = ids[i % runs]
        base = (i // runs) * 3
        steps = [(base + k, step_message(i)) for k in range(3)]
        await turn_plans.keep(fences[i % runs], pool, turn, base + 2, steps)

    async def replay(i: int) -> None:
        await turn_plans.step(pool, ids[i % runs], 2)

    async def check(i: int) -> None:
        await fences[i % runs].verify()

    found: dict[str, list[float]] = {"epoch_check": [], "audit_append": [],
                                     "audit_append_unfenced": [], "plan_store": [],
                                     "plan_replay": []}
    await timed(50, check)  # warm the pool and the plans
    for _ in range(4):  # interleaved rounds: a drift in the machine's load hits each alike
        found["epoch_check"] += await timed(samples // 4, check)
        found["audit_append_unfenced"] += await timed(samples // 4, unfenced_append)
        found["audit_append"] += await timed(samples // 4, fenced_append)
        found["plan_store"] += await timed(samples // 4, store)
        found["plan_replay"] += await timed(samples // 4, replay)
    await pool.close()
    return {name: summary(values, 3) for name, values in found.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--samples", type=int, default=400)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fencing-") as tmp, \
            scratch_database(Path(tmp)) as url:
        asyncio.run(migrate_url(url))
        got = asyncio.run(measure(url, args.runs, args.samples))
    goals = {"epoch_check_p50_under_1_ms": got["epoch_check"]["p50"] < 1.0,
             "fenced_append_p50_within_0_5_ms": got["audit_append"]["p50"]
             - got["audit_append_unfenced"]["p50"] <= 0.5}
    print(json.dumps({"bench": "fencing", "runs": args.runs, "samples": args.samples,
                      **got, "goals": goals}))


if __name__ == "__main__":
    main()
