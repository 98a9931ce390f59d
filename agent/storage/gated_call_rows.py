"""Calls from outside a chat that wait for a person (`gated_calls`, migration 15): an MCP
call's card asked inline or on the page, or its approval by someone else
(agent/chat/gated_calls.py).

Every statement names the owner, so nobody else learns that a call exists. A call runs once:
`claim` moves it from pending to running in one conditional update, which one answer wins (a
replayed inline answer, a page confirmation racing it, a second approver); `finish` records
its end. A pending call past its expiry reads as `expired`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from agentchat.agent.storage.db import Db, Row, connection, fetch_all, fetch_one

# The owners' locks while a call is stored (pg_advisory_xact_lock's first key; the others:
# agentchat/db.py, agent/audit/store.py, operator/constants.py).
OWNER_LOCK_NS = 0x41430004

# What its requester sees of a call's status.
STATUS = """CASE WHEN status = 'pending' AND expires_at <= now() THEN 'expired'
                 ELSE status END"""
COLUMNS = f"""call_id, owner, tool, environment, arguments, args_digest, ask, card, client,
       {STATUS} AS status, decision_id, result, error, created_at, expires_at"""

# A user's calls waiting for a person, at most `cap` (an expired one does not count): the
# count is in the INSERT, after the owner's transaction lock (LOCK_OWNER), so two replicas
# storing the same user's calls at once count each other's. No row: over the quota.
LOCK_OWNER = "SELECT pg_advisory_xact_lock(%(ns)s, hashtext(%(owner)s))"
ADD = """
INSERT INTO gated_calls (call_id, owner, channel, tool, environment, arguments, args_digest,
                         ask, card, client, expires_at)
SELECT %(call_id)s, %(owner)s, %(channel)s, %(tool)s, %(environment)s, %(arguments)s,
       %(args_digest)s, %(ask)s, %(card)s::jsonb, %(client)s, %(expires_at)s
 WHERE (SELECT count(*) FROM gated_calls WHERE owner = %(owner)s AND status = 'pending'
           AND expires_at > now()) < %(cap)s
RETURNING call_id
"""
# Seconds until the owner's first pending call expires (and frees a place).
FREED_IN = """
SELECT ceil(extract(epoch FROM min(expires_at) - now()))::int AS s FROM gated_calls
 WHERE owner = %(owner)s AND status = 'pending' AND expires_at > now()
"""
GET = f"SELECT {COLUMNS} FROM gated_calls WHERE call_id = %(id)s AND owner = %(owner)s"
# The approvals' own reads (agent/chat/approvals.py has already checked who may act).
GET_ANY = f"SELECT {COLUMNS} FROM gated_calls WHERE call_id = %(id)s"
PENDING = f"""
SELECT {COLUMNS} FROM gated_calls
 WHERE owner = %(owner)s AND status = 'pending' AND expires_at > now()
 ORDER BY created_at DESC LIMIT %(limit)s
"""
# One answer wins: the call must still be pending, unexpired, for these arguments (`asks`:
# the cards this answer may settle).
CLAIM = f"""
UPDATE gated_calls SET status = %(to)s, answered_at = now(), decision_id = %(decision_id)s
 WHERE call_id = %(id)s AND owner = %(owner)s AND status = 'pending'
   AND expires_at > now() AND args_digest = %(digest)s AND ask = ANY(%(asks)s)
RETURNING {COLUMNS}
"""
# Finished (done, failed, denied) or expired calls older than `before`, a batch at a time,
# oldest first (gated_calls_created); a row another transaction holds is skipped, not waited
# for. Their approvals follow (a trigger, migration 16); the audit trail keeps its own.
PRUNE = """
WITH gone AS (
  DELETE FROM gated_calls WHERE call_id IN (
    SELECT call_id FROM gated_calls
     WHERE created_at < %(before)s
       AND (status IN ('done', 'failed', 'denied')
            OR (status = 'pending' AND expires_at <= now()))
       AND COALESCE(finished_at, answered_at, expires_at) < %(before)s
     ORDER BY created_at LIMIT %(limit)s
     FOR UPDATE SKIP LOCKED)
  RETURNING 1)
SELECT count(*) AS n FROM gone
"""
FINISH = """
UPDATE gated_calls SET status = %(status)s, result = %(result)s, error = %(error)s,
       finished_at = now()
 WHERE call_id = %(id)s AND status = 'running'
"""


async def add(db: Db, *, call_id: str, owner: str, tool: str, environment: str | None,
              arguments: dict[str, Any], args_digest: str, ask: str, card: dict[str, Any],
              client: dict[str, Any], expires_at: datetime, cap: int,
              channel: str = "mcp") -> bool:
    """Store the call, in the caller's transaction; False (nothing stored) when its owner has
    `cap` calls pending already."""
    await fetch_all(db, LOCK_OWNER + " AS locked", {"ns": OWNER_LOCK_NS, "owner": owner})
    return await fetch_one(db, ADD, {
        "call_id": call_id, "owner": owner, "channel": channel, "tool": tool,
        "environment": environment, "arguments": Jsonb(arguments), "args_digest": args_digest,
        "ask": ask, "card": json.dumps(card, default=str), "client": Jsonb(client),
        "expires_at": expires_at, "cap": cap}) is not None


async def freed_in(db: Db, owner: str) -> int:
    """Seconds until one of the owner's pending calls expires (at least 1)."""
    row = await fetch_one(db, FREED_IN, {"owner": owner})
    return max(1, int(row["s"] or 1)) if row is not None else 1


async def prune(db: Db, *, before: datetime, limit: int, lock_timeout_ms: int = 1000) -> int:
    """One batch of finished or expired calls older than `before` deleted; how many. A lock
    not had within `lock_timeout_ms` (a migration's, a busy approval) gives up: an
    AgentChatError (STORAGE_UNAVAILABLE), and the next pass tries again."""
    async with connection(db) as conn, conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
        row = await fetch_one(conn, PRUNE, {"before": before, "limit": limit})
    return int(row["n"]) if row is not None else 0


async def get(db: Db, call_id: str, owner: str) -> Row | None:
    """The call, for its owner only."""
    return await fetch_one(db, GET, {"id": call_id, "owner": owner})


async def get_any(db: Db, call_id: str) -> Row | None:
    return await fetch_one(db, GET_ANY, {"id": call_id})


async def pending(db: Db, owner: str, limit: int = 100) -> list[Row]:
    return await fetch_all(db, PENDING, {"owner": owner, "limit": limit})


async def claim(db: Db, *, call_id: str, owner: str, args_digest: str, asks: list[str],
                to: str = "running", decision_id: str | None = None) -> Row | None:
    """Settle a pending call (`to`: running, or denied); None when another answer won, it
    expired, or it is not this owner's, these arguments' or this kind of card's."""
    return await fetch_one(db, CLAIM, {"id": call_id, "owner": owner, "digest": args_digest,
                                       "asks": asks, "to": to, "decision_id": decision_id})


async def finish(db: Db, call_id: str, status: str, result: Any = None,
                 error: str | None = None) -> None:
    """A running call's end: done (with ss-tools' answer) or failed."""
    await fetch_all(db, FINISH + " RETURNING call_id", {
        "id": call_id, "status": status, "error": error,
        "result": None if result is None else Jsonb(result)})
