"""A run that outlives its replica (docs/protocol.md §4, "Takeover"; agent/chat/takeover.py).

A run without a heartbeat for `lost_s`, or released by a draining replica (`replica` ''), is
claimed by one live replica: one UPDATE, on rows locked with SKIP LOCKED, raises its `epoch`
(the old owner's writes are fenced from then on, storage/runs.py `FENCE`) and its `attempt`,
and keeps the last stored seq it goes on from (`resumed_after`). A run that cannot go on (its
attempts used up, no token to resume it with, its turn settled meanwhile) is marked lost, with
the reason in its RUN_LOST event.
"""

from __future__ import annotations

from agentchat.agent.storage.db import Db, Row, fetch_all, fetch_one

# Runs a replica may claim: live in the table, but their owner is gone (stale) or left (released).
_DUE = """
r.status IN ('running', 'resuming')
AND (r.replica = '' OR r.heartbeat_at < now() - make_interval(secs => %(lost_s)s))
AND NOT (r.id = ANY(%(keep)s::text[]))
"""
# `was_beat`: the old owner's last heartbeat (or its release), so the new owner can tell how
# long the run went without one (agentchat_run_takeover_seconds).
CLAIM = f"""
WITH due AS (
    SELECT r.id, r.epoch, r.heartbeat_at FROM runs r JOIN turns t ON t.id = r.turn_id
     WHERE {_DUE}
       AND r.attempt < %(max_attempts)s AND r.resume_token IS NOT NULL
       AND t.status = 'running'
     ORDER BY r.heartbeat_at
     LIMIT %(limit)s
       FOR UPDATE OF r SKIP LOCKED)
UPDATE runs r
   SET replica = %(replica)s, epoch = r.epoch + 1, attempt = r.attempt + 1,
       status = 'resuming', heartbeat_at = now(), resumed_after = r.last_seq,
       stop_requested_at = NULL
  FROM due
 WHERE r.id = due.id AND r.epoch = due.epoch
RETURNING r.id, r.conversation_id, r.turn_id, r.kind, r.tab_id, r.epoch, r.attempt,
          r.last_seq, r.resume_token,
          extract(epoch FROM now() - due.heartbeat_at)::float8 AS unbeaten_s
"""
# Due runs no replica can go on with, and why.
UNRESUMABLE = f"""
SELECT r.id,
       CASE WHEN r.attempt >= %(max_attempts)s THEN 'attempts_used_up'
            ELSE 'unresumable' END AS reason
  FROM runs r LEFT JOIN turns t ON t.id = r.turn_id
 WHERE {_DUE}
   AND (r.attempt >= %(max_attempts)s OR r.resume_token IS NULL
        OR t.status IS DISTINCT FROM 'running')
"""
# A draining replica hands its live runs over: owner cleared, epoch raised (it writes nothing
# more for them), heartbeat now (from when the hand-over latency counts).
RELEASE = """
UPDATE runs SET replica = '', epoch = epoch + 1, heartbeat_at = now()
 WHERE id = ANY(%(ids)s::text[]) AND replica = %(replica)s
   AND status IN ('running', 'resuming')
RETURNING id
"""
# The turn a claimed run goes on with: its plan, and the user message it answers (a retry's
# turn has none of its own: the conversation's last one).
TURN_TO_RESUME = """
SELECT t.id, t.status, t.plan, m.id AS user_message_id, m.content AS user_text
  FROM turns t
  LEFT JOIN LATERAL (
      SELECT id, content FROM messages
       WHERE conversation_id = t.conversation_id AND role = 'user'
       ORDER BY (turn_id IS NOT DISTINCT FROM t.id) DESC, pos DESC LIMIT 1) m ON true
 WHERE t.id = %(id)s
"""


async def claim(db: Db, *, replica: str, lost_s: float, max_attempts: int, keep: list[str],
                limit: int) -> list[Row]:
    """Claim up to `limit` due runs for `replica`; their rows (with the new epoch)."""
    return await fetch_all(db, CLAIM, {"replica": replica, "lost_s": lost_s,
                                       "max_attempts": max_attempts, "keep": keep,
                                       "limit": limit})


async def unresumable(db: Db, *, lost_s: float, max_attempts: int, keep: list[str]
                      ) -> list[Row]:
    return await fetch_all(db, UNRESUMABLE, {"lost_s": lost_s, "max_attempts": max_attempts,
                                             "keep": keep})


async def release(db: Db, run_ids: list[str], replica: str) -> list[str]:
    rows = await fetch_all(db, RELEASE, {"ids": run_ids, "replica": replica})
    return [str(r["id"]) for r in rows]


async def turn_to_resume(db: Db, turn_id: str) -> Row | None:
    return await fetch_one(db, TURN_TO_RESUME, {"id": turn_id})
