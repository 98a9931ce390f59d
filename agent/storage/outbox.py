"""The approvals' notifications outbox (docs/protocol.md §11): a notification is a
row written in the same transaction as what it tells (a request, an answer), or by the
conditional update that marks an approval expired or escalated, so it is never lost and never
sent for something that did not happen. Any replica delivers it (`claim` leases due rows with
SKIP LOCKED), at least once; its id is in the body for the receiver's deduplication.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg

from agentchat.agent.storage.db import Db, Row, fetch_all

Conn = psycopg.AsyncConnection[Any]
CHANNELS = ["webhook", "email"]

ENQUEUE = """
INSERT INTO approval_outbox (id, approval_id, event, body, channels)
VALUES (%(id)s, %(approval_id)s, %(event)s, %(body)s, %(channels)s)
"""

# The body's fields from an approval and its card (the approver's answer added by the caller).
_BODY = """jsonb_build_object(
    'approval_id', a.approval_id, 'conversation_id', a.conversation_id,
    'requester', a.requester, 'tool_name', a.tool, 'title', c.payload->>'title',
    'prompt', c.payload->>'prompt', 'environment', a.environment,
    'risk', c.payload->>'risk', 'expires_at', a.expires_at,
    'approve_url', c.payload->'approval'->>'approve_url', 'args_digest', a.args_digest,
    'calls', c.payload->'calls')"""

# Approvals past their expiry or their escalation time, marked once (any replica, racing, marks
# each once: the update is conditional) and told in the same statement.
EXPIRE_DUE = f"""
WITH due AS (
    UPDATE approvals a SET expired_notified_at = now()
      FROM approval_cards c
     WHERE c.confirm_id = a.approval_id AND a.status = 'pending'
       AND a.expired_notified_at IS NULL AND c.expires_at <= now()
       AND c.status IN ('pending', 'expired')
    RETURNING a.approval_id, {_BODY} AS body
)
INSERT INTO approval_outbox (id, approval_id, event, body, channels)
SELECT gen_random_uuid()::text, approval_id, 'approval_expired', body, %(channels)s FROM due
RETURNING approval_id
"""
ESCALATE_DUE = f"""
WITH due AS (
    UPDATE approvals a SET escalated_at = now()
      FROM approval_cards c
     WHERE c.confirm_id = a.approval_id AND a.status = 'pending'
       AND a.escalated_at IS NULL AND a.escalate_at <= now()
       AND c.status = 'pending' AND c.expires_at > now()
    RETURNING a.approval_id, {_BODY} AS body
)
INSERT INTO approval_outbox (id, approval_id, event, body, channels)
SELECT gen_random_uuid()::text, approval_id, 'approval_escalated', body, %(channels)s FROM due
RETURNING approval_id
"""
BODY_OF = f"""
SELECT {_BODY} AS body FROM approvals a JOIN approval_cards c ON c.confirm_id = a.approval_id
 WHERE a.approval_id = %(id)s
"""

# Due rows leased for `lease_s` to this replica: another replica skips them meanwhile, and a
# replica that dies mid-delivery leaves them due again when the lease ends.
CLAIM = """
UPDATE approval_outbox SET next_at = now() + make_interval(secs => %(lease_s)s)
 WHERE id IN (SELECT id FROM approval_outbox
               WHERE delivered_at IS NULL AND next_at <= now()
               ORDER BY next_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING id, approval_id, event, body, channels, attempts
"""
DONE = """
UPDATE approval_outbox
   SET channels = %(left)s, attempts = attempts + %(failed)s, last_error = %(error)s,
       sent = sent || %(sent)s,
       delivered_at = CASE WHEN cardinality(%(left)s::text[]) = 0 THEN now() END,
       next_at = now() + make_interval(secs => %(retry_s)s)
 WHERE id = %(id)s
"""


async def enqueue(conn: Conn, approval_id: str, event: str,
                  extra: dict[str, Any] | None = None) -> str:
    """A notification of `event` about the approval, in the caller's transaction."""
    rows = await fetch_all(conn, BODY_OF, {"id": approval_id})
    body = {**(rows[0]["body"] if rows else {"approval_id": approval_id}), **(extra or {})}
    nid = str(uuid.uuid4())
    await conn.execute(ENQUEUE, {"id": nid, "approval_id": approval_id, "event": event,
                                 "body": json.dumps(body, default=str), "channels": CHANNELS})
    return nid


async def mark_due(db: Db) -> int:
    """Expired and escalated approvals told: how many."""
    expired = await fetch_all(db, EXPIRE_DUE, {"channels": CHANNELS})
    escalated = await fetch_all(db, ESCALATE_DUE, {"channels": CHANNELS})
    return len(expired) + len(escalated)


async def claim(db: Db, *, limit: int, lease_s: float) -> list[Row]:
    return await fetch_all(db, CLAIM, {"limit": limit, "lease_s": lease_s})


async def done(db: Db, nid: str, *, left: list[str], sent: list[dict[str, Any]],
               error: str | None, retry_s: float) -> None:
    await fetch_all(db, DONE + " RETURNING id", {
        "id": nid, "left": left, "failed": 1 if left else 0, "error": error,
        "sent": json.dumps(sent), "retry_s": retry_s})
