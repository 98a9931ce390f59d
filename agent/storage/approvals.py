"""Approvals by someone else (docs/protocol.md §11): a card whose policy mode is
`other`, and each approver's answer.

An approval's row is written with its card (`add_approval`, in the card's transaction; a
stored MCP call's, `add_gated_approval`, with the call: its card is the call's, read through
the `approval_cards` view, migration 15); its
answers are rows of their own, one per person (the primary key refuses a second). Its
effective status joins the card's: a card the requester cancelled (denied) is `cancelled`, one
past its expiry `expired`. The inbox lists, newest first and keyset-paged, the approvals whose
approver roles the caller holds as named (every environment, or `role@env` for the
approval's); who may answer is still the sidecar's to say, when they answer.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg

from agentchat.agent.storage.db import Db, Row, fetch_all, fetch_one

Conn = psycopg.AsyncConnection[Any]

ADD_APPROVAL = """
INSERT INTO approvals (approval_id, conversation_id, requester, tool, environment, args_digest,
                       approvers, quorum, rule, tab_id, expires_at, escalate_at)
SELECT %(approval_id)s, c.id, c.owner, %(tool)s, %(environment)s, %(args_digest)s,
       %(approvers)s, %(quorum)s, %(rule)s, %(tab)s, %(expires_at)s,
       CASE WHEN %(escalate_s)s::float8 > 0
            THEN now() + make_interval(secs => %(escalate_s)s::float8) END
  FROM conversations c WHERE c.id = %(conversation_id)s
ON CONFLICT (approval_id) DO NOTHING
RETURNING approval_id
"""

# The effective status: the approval's own once decided, else what became of its card.
STATUS = """CASE WHEN a.status <> 'pending' THEN a.status
            WHEN c.status = 'denied' THEN 'cancelled'
            WHEN c.status = 'expired' OR c.expires_at <= now() THEN 'expired'
            WHEN c.status = 'pending' THEN 'pending'
            ELSE c.status END"""

_SELECT = f"""
SELECT a.approval_id, a.conversation_id, a.requester, a.tool, a.environment, a.args_digest,
       a.approvers, a.quorum, a.rule, a.tab_id, a.status AS own_status, a.created_at,
       a.expires_at, a.decided_at, a.escalated_at, c.payload AS card, c.turn_id, c.call_id,
       c.gated, {STATUS} AS status,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                    'approver', x.approver, 'decision', x.decision, 'comment', x.comment,
                    'channel', x.channel, 'at', x.at) ORDER BY x.at)
                   FROM approval_answers x WHERE x.approval_id = a.approval_id), '[]')
           AS answers
  FROM approvals a JOIN approval_cards c ON c.confirm_id = a.approval_id
"""

# Approver roles held as named: `role` everywhere, `role@env` in the approval's environment.
_MAY_SEE = """EXISTS (SELECT 1 FROM jsonb_array_elements_text(a.approvers) r
                WHERE r = ANY(%(everywhere)s)
                   OR r || '@' || coalesce(a.environment, '') = ANY(%(scoped)s))"""

GET_APPROVAL = _SELECT + " WHERE a.approval_id = %(id)s"
LOCK_APPROVAL = _SELECT + " WHERE a.approval_id = %(id)s FOR UPDATE OF a"

INBOX = _SELECT + f"""
 WHERE a.requester <> %(me)s AND {_MAY_SEE}
   AND ({STATUS}) = ANY(%(statuses)s)
   AND (%(after_at)s::timestamptz IS NULL
        OR (a.created_at, a.approval_id) < (%(after_at)s::timestamptz, %(after_id)s))
 ORDER BY a.created_at DESC, a.approval_id DESC
 LIMIT %(limit)s
"""

ADD_ANSWER = """
INSERT INTO approval_answers (approval_id, approver, decision, comment, channel, decision_id,
                              grant_minutes)
VALUES (%(id)s, %(approver)s, %(decision)s, %(comment)s, %(channel)s, %(decision_id)s,
        %(grant_minutes)s)
ON CONFLICT DO NOTHING
RETURNING approver
"""
COUNT_APPROVALS = """
SELECT count(*) AS n, min(grant_minutes) AS grant_minutes,
       bool_and(grant_minutes IS NOT NULL) AS all_grant
  FROM approval_answers WHERE approval_id = %(id)s AND decision = 'approve'
"""

DECIDE = """
UPDATE approvals SET status = %(status)s, decided_at = now()
 WHERE approval_id = %(id)s AND status = 'pending'
RETURNING approval_id
"""

# The bucket names a status filter stands for.
STATUS_FILTERS = {"pending": ["pending"], "expired": ["expired"],
                  "answered": ["approved", "denied", "cancelled"]}


async def add_approval(db: Db, *, approval_id: str, conversation_id: str, card: dict[str, Any],
                       rule: dict[str, Any], tab: str, expires_at: datetime) -> bool:
    """The approval of a card, once (False: stored before)."""
    approval = card["approval"]
    return await fetch_one(db, ADD_APPROVAL, {
        "approval_id": approval_id, "conversation_id": conversation_id,
        "tool": card["tool_name"], "environment": card.get("env_context"),
        "args_digest": approval["args_digest"], "approvers": json.dumps(approval["approvers"]),
        "quorum": approval["quorum"], "rule": json.dumps(rule), "tab": tab,
        "expires_at": expires_at,
        "escalate_s": float(rule.get("escalate_after_s") or 0)}) is not None


# A stored call's approval (agent/chat/gated_calls.py): its own id, its requester named.
ADD_GATED_APPROVAL = """
INSERT INTO approvals (approval_id, conversation_id, requester, tool, environment, args_digest,
                       approvers, quorum, rule, tab_id, expires_at, escalate_at)
VALUES (%(approval_id)s, %(approval_id)s, %(requester)s, %(tool)s, %(environment)s,
        %(args_digest)s, %(approvers)s, %(quorum)s, %(rule)s, NULL, %(expires_at)s,
        CASE WHEN %(escalate_s)s::float8 > 0
             THEN now() + make_interval(secs => %(escalate_s)s::float8) END)
ON CONFLICT (approval_id) DO NOTHING
RETURNING approval_id
"""


async def add_gated_approval(db: Db, *, approval_id: str, requester: str, card: dict[str, Any],
                             rule: dict[str, Any], expires_at: datetime) -> bool:
    """The approval of a stored call (its id the call's), once."""
    approval = card["approval"]
    return await fetch_one(db, ADD_GATED_APPROVAL, {
        "approval_id": approval_id, "requester": requester, "tool": card["tool_name"],
        "environment": card.get("env_context"), "args_digest": approval["args_digest"],
        "approvers": json.dumps(approval["approvers"]), "quorum": approval["quorum"],
        "rule": json.dumps(rule), "expires_at": expires_at,
        "escalate_s": float(rule.get("escalate_after_s") or 0)}) is not None


async def get_approval(db: Db, approval_id: str, *, lock: bool = False) -> Row | None:
    return await fetch_one(db, LOCK_APPROVAL if lock else GET_APPROVAL, {"id": approval_id})


def may_see(row: Row, roles: tuple[tuple[str, str | None], ...]) -> bool:
    """The inbox's filter for one row (the same rule as `_MAY_SEE`)."""
    held = {r if e is None else f"{r}@{e}" for r, e in roles}
    env = row.get("environment") or ""
    return any(r in held or f"{r}@{env}" in held for r in row["approvers"])


async def inbox(db: Db, *, me: str, roles: tuple[tuple[str, str | None], ...], status: str,
                limit: int, after: tuple[datetime, str] | None) -> list[Row]:
    return await fetch_all(db, INBOX, {
        "me": me, "everywhere": [r for r, e in roles if e is None],
        "scoped": [f"{r}@{e}" for r, e in roles if e is not None],
        "statuses": STATUS_FILTERS[status], "limit": limit,
        "after_at": after[0] if after else None, "after_id": after[1] if after else ""})


async def add_answer(conn: Conn, *, approval_id: str, approver: str, decision: str,
                     comment: str, channel: str, decision_id: str | None,
                     grant_minutes: int | None = None) -> tuple[int, int | None] | None:
    """The approver's answer; None when they answered before. Else the approvals so far, and
    the grant they ask together (every approval asked one: the shortest), if any."""
    row = await fetch_one(conn, ADD_ANSWER, {
        "id": approval_id, "approver": approver, "decision": decision, "comment": comment,
        "channel": channel, "decision_id": decision_id, "grant_minutes": grant_minutes})
    if row is None:
        return None
    counted = await fetch_one(conn, COUNT_APPROVALS, {"id": approval_id})
    if counted is None:
        return 0, None
    grant = counted["grant_minutes"] if counted["all_grant"] else None
    return int(counted["n"]), grant


async def decide(conn: Conn, approval_id: str, status: str) -> bool:
    return await fetch_one(conn, DECIDE, {"id": approval_id, "status": status}) is not None


async def context_of(db: Db, row: Row) -> Row | None:
    """The requester's message of the approval's turn."""
    return await fetch_one(db, """
        SELECT m.content AS message FROM messages m
         WHERE m.turn_id = %(turn)s AND m.role = 'user' ORDER BY m.pos LIMIT 1""",
                           {"turn": row["turn_id"]})
