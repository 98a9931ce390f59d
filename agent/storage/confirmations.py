"""Confirmation cards: the `confirm_required` payload of a paused call and how it was answered.

Answers are serialized per conversation by `agentchat.db.conversation_lock`: the /chat handler
passes the connection holding that lock, so exactly one of two racing answers resolves a card.
Storing a card is showing it: the turn (agent/chat/turn_task.py) appends the audit trail's card
row in the same transaction, once per card (`add_confirmation` says whether it was new).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from datetime import datetime
from typing import Any

import psycopg

from agentchat.agent.storage.db import Db, Row, fetch_one

INSERT_CONFIRMATION = """
INSERT INTO confirmations (confirm_id, conversation_id, turn_id, call_id, payload, expires_at)
VALUES (%(confirm_id)s, %(conversation_id)s, %(turn_id)s, %(call_id)s, %(payload)s,
        %(expires_at)s)
ON CONFLICT (confirm_id) DO NOTHING
RETURNING confirm_id
"""
PENDING_CONFIRMATION = """
SELECT *, expires_at <= now() AS expired FROM confirmations
 WHERE conversation_id = %(id)s AND status = 'pending'
 ORDER BY created_at LIMIT 1
"""
RESOLVE_CONFIRMATION = """
UPDATE confirmations SET status = %(status)s, resolved_at = now(),
       payload = coalesce(%(payload)s::jsonb, payload)
 WHERE confirm_id = %(confirm_id)s AND status = 'pending'
RETURNING confirm_id
"""
GET_CONFIRMATION = "SELECT * FROM confirmations WHERE confirm_id = %(confirm_id)s"


async def add_confirmation(db: Db, *, confirm_id: str, conversation_id: str, turn_id: str,
                           call_id: str, payload: dict[str, Any], expires_at: datetime) -> bool:
    """Store a card; False when it was stored before (a re-raised card is not a second one)."""
    row = await fetch_one(db, INSERT_CONFIRMATION, {
        "confirm_id": confirm_id, "conversation_id": conversation_id, "turn_id": turn_id,
        "call_id": call_id, "payload": json.dumps(payload, ensure_ascii=False),
        "expires_at": expires_at})
    return row is not None


async def get_confirmation(db: Db, confirm_id: str) -> Row | None:
    return await fetch_one(db, GET_CONFIRMATION, {"confirm_id": confirm_id})


async def pending_confirmation(db: Db, conversation_id: str) -> Row | None:
    """The conversation's oldest pending card, with `expired`."""
    return await fetch_one(db, PENDING_CONFIRMATION, {"id": conversation_id})


def send_resolve(conn: psycopg.AsyncConnection[Any], confirm_id: str, status: str,
                 payload: dict[str, Any] | None = None) -> Awaitable[psycopg.AsyncCursor[Row]]:
    """`resolve_confirmation`, sent (in a caller's pipeline): a row when it resolved the card.
    `payload`: the card as answered (a batched card's calls each with its `result`), kept so
    history and a resumed orphan read each call's answer."""
    return conn.execute(RESOLVE_CONFIRMATION, {
        "confirm_id": confirm_id, "status": status,
        "payload": None if payload is None else json.dumps(payload, ensure_ascii=False)})


async def resolve_confirmation(db: Db, confirm_id: str, status: str,
                               payload: dict[str, Any] | None = None) -> bool:
    """Resolve a pending card (`payload`: as answered, see `send_resolve`); False when
    someone else resolved it first."""
    row = await fetch_one(db, RESOLVE_CONFIRMATION, {
        "confirm_id": confirm_id, "status": status,
        "payload": None if payload is None else json.dumps(payload, ensure_ascii=False)})
    return row is not None
