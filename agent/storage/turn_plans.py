"""A turn's planned steps (migration 14; docs/protocol.md §4, "Takeover"; agent/graph/plans.py).

A model step that proposed a write is stored, with the turn's model steps before it, by turn
and step, before its write runs; a run that goes on with the turn (a takeover) reads
its steps back. The store is fenced by the run's epoch in the same statement
(storage/fencing.py): a replica revived after a takeover stores no plan of its own, and the
first plan stored for a step is the step's (`ON CONFLICT DO NOTHING`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentchat.agent.storage.db import Db, fetch_one
from agentchat.agent.storage.fencing import OWNED, RunFence

# `stored`: a message already stored at `step` by another attempt (the statement's snapshot
# does not see its own insert), which is the step's plan then.
KEEP = f"""
WITH owned AS (SELECT {OWNED} AS ok),
kept AS (
    INSERT INTO turn_plans (turn_id, step, message)
    SELECT %(turn)s, s.step, s.message
      FROM jsonb_to_recordset(%(steps)s::jsonb) AS s(step integer, message jsonb), owned
     WHERE owned.ok
    ON CONFLICT (turn_id, step) DO NOTHING
    RETURNING 1)
SELECT owned.ok, p.message AS stored
  FROM owned LEFT JOIN turn_plans p ON p.turn_id = %(turn)s AND p.step = %(step)s
"""
STEP = "SELECT message FROM turn_plans WHERE turn_id = %(turn)s AND step = %(step)s"


async def keep(fence: RunFence, db: Db, turn_id: str, step: int,
               steps: Sequence[tuple[int, dict[str, Any]]]) -> dict[str, Any] | None:
    """Store the turn's `steps` (step, message dict) not stored yet, `step` the newest; the
    message stored at `step` before (another attempt's), else None. RunFenced, and nothing
    stored, once the run is another replica's."""
    # default=str: a provider's response metadata may hold a value JSON has no type for.
    rows = json.dumps([{"step": n, "message": m} for n, m in steps], ensure_ascii=False,
                      default=str)
    row = await fetch_one(db, KEEP, {"turn": turn_id, "step": step, "steps": rows,
                                     **fence.params()})
    if row is None or not row["ok"]:
        raise fence.refused()
    stored: dict[str, Any] | None = row["stored"]
    return stored


async def step(db: Db, turn_id: str, step: int) -> dict[str, Any] | None:
    """The message stored for the turn's `step`, if one is."""
    row = await fetch_one(db, STEP, {"turn": turn_id, "step": step})
    return None if row is None else dict(row["message"])
