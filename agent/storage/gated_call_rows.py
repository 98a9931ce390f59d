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

from agentchat.agent.storage.db import Db, Row, fetch_all, fetch_one

# What its requester sees of a call's status.
STATUS = """CASE WHEN status = 'pending' AND expires_at <= now() THEN 'expired'
                 ELSE status END"""
COLUMNS = f"""call_id, owner, tool, environment, arguments, args_digest, ask, card, client,
       {STATUS} AS status, decision_id, result, error, created_at, expires_at"""

ADD = """
INSERT INTO gated_calls (call_id, owner, channel, tool, environment, arguments, args_digest,
                         ask, card, client, expires_at)
VALUES (%(call_id)s, %(owner)s, %(channel)s, %(tool)s, %(environment)s, %(arguments)s,
        %(args_digest)s, %(ask)s, %(card)s, %(client)s, %(expires_at)s)
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
FINISH = """
UPDATE gated_calls SET status = %(status)s, result = %(result)s, error = %(error)s,
       finished_at = now()
 WHERE call_id = %(id)s AND status = 'running'
"""


async def add(db: Db, *, call_id: str, owner: str, tool: str, environment: str | None,
              arguments: dict[str, Any], args_digest: str, ask: str, card: dict[str, Any],
              client: dict[str, Any], expires_at: datetime, channel: str = "mcp") -> None:
    await fetch_all(db, ADD + " RETURNING call_id", {
        "call_id": call_id, "owner": owner, "channel": channel, "tool": tool,
        "environment": environment, "arguments": Jsonb(arguments), "args_digest": args_digest,
        "ask": ask, "card": json.dumps(card, default=str), "client": Jsonb(client),
        "expires_at": expires_at})


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
