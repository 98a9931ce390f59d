"""Conversations for the REST API (PROTOCOL §9): create, list and search, rename, archive and
restore, and the idempotent append after a stream ends.

Every statement names the owner, so another user's conversation behaves exactly like a
missing one (NOT_FOUND) without a second query to tell them apart. The history with its
cards is in `history.py`.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg_pool import AsyncConnectionPool

from agentchat.agent.api import cursors
from agentchat.agent.storage.store import storage_errors
from agentchat.errors import AgentChatError, ErrorCode

COLUMNS = "c.id, c.title, c.created_at, c.last_activity_at, c.is_archived, c.archived_at"

CREATE = f"""
INSERT INTO conversations AS c (id, owner, title) VALUES (%(id)s, %(owner)s, %(title)s)
RETURNING {COLUMNS}
"""
GET_OWNED = f"SELECT {COLUMNS} FROM conversations c WHERE c.id = %(id)s AND c.owner = %(owner)s"
RENAME = f"""
UPDATE conversations c SET title = %(title)s WHERE c.id = %(id)s AND c.owner = %(owner)s
RETURNING {COLUMNS}
"""
# Archiving twice keeps the first archived_at; restoring clears both (DELETE is a soft delete).
ARCHIVE = f"""
UPDATE conversations c SET is_archived = true, archived_at = coalesce(c.archived_at, now())
 WHERE c.id = %(id)s AND c.owner = %(owner)s
RETURNING {COLUMNS}
"""
RESTORE = f"""
UPDATE conversations c SET is_archived = false, archived_at = NULL
 WHERE c.id = %(id)s AND c.owner = %(owner)s
RETURNING {COLUMNS}
"""

# The list is assembled from these fixed fragments (never from input), newest activity first
# on the (owner, last_activity_at DESC, id DESC) indexes; the live-only form matches the
# partial index conversations_owner_live.
LIST = f"SELECT {COLUMNS} FROM conversations c WHERE c.owner = %(owner)s"
LIVE_ONLY = " AND NOT c.is_archived"
AFTER = " AND (c.last_activity_at, c.id) < (%(after_ts)s, %(after_id)s)"
# `russian` stems Russian and English alike (see migration 1). Message text is matched on
# each conversation's vocabulary (migration 5, `owner_search`): words anywhere in the
# conversation, a phrase as its words; the cost grows with the caller's conversations that
# use the words, never with how many messages repeat them or with other users' data.
MATCHES = """
 AND (to_tsvector('russian'::regconfig, c.title)
          @@ websearch_to_tsquery('russian'::regconfig, %(q)s)
      OR c.id IN (SELECT owner_search(%(owner)s, %(q)s)))"""
ORDER = " ORDER BY c.last_activity_at DESC, c.id DESC LIMIT %(limit)s"

MESSAGE_COLUMNS = "id, conversation_id, turn_id, role, content, partial, created_at"
GET_MESSAGE = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = %(id)s"
# One statement: the message, the conversation's activity, and its title when it has none
# yet (titles come from the first user message, as for a conversation started by /chat).
APPEND = f"""
WITH ins AS (
    INSERT INTO messages (id, conversation_id, role, content)
    VALUES (%(id)s, %(conversation_id)s, %(role)s, %(content)s)
    ON CONFLICT (id) DO NOTHING
    RETURNING {MESSAGE_COLUMNS}
), touched AS (
    UPDATE conversations
       SET last_activity_at = now(),
           title = CASE WHEN title = '' AND %(role)s = 'user' THEN left(%(content)s, 120)
                        ELSE title END
     WHERE id = %(conversation_id)s AND EXISTS (SELECT 1 FROM ins)
)
SELECT * FROM ins
"""

MAX_ID_CHARS = 200


def not_found() -> AgentChatError:
    return AgentChatError(ErrorCode.NOT_FOUND, "no such conversation")


def storable_id(conversation_id: str) -> bool:
    """Whether a conversation could have this id (text columns hold no NUL)."""
    return 0 < len(conversation_id) <= MAX_ID_CHARS and "\x00" not in conversation_id


async def _row(pool: AsyncConnectionPool, sql: str,
               params: dict[str, Any]) -> dict[str, Any] | None:
    async with storage_errors(), pool.connection() as conn:
        cur = await conn.execute(sql, params)  # type: ignore[arg-type]
        row: dict[str, Any] | None = await cur.fetchone()  # type: ignore[assignment]
        return row


async def _owned_change(pool: AsyncConnectionPool, sql: str, *, owner: str,
                        conversation_id: str, **params: Any) -> dict[str, Any]:
    if not storable_id(conversation_id):
        raise not_found()
    row = await _row(pool, sql, {"id": conversation_id, "owner": owner, **params})
    if row is None:
        raise not_found()
    return row


async def get_conversation(*, pool: AsyncConnectionPool, owner: str,
                           conversation_id: str) -> dict[str, Any]:
    return await _owned_change(pool, GET_OWNED, owner=owner, conversation_id=conversation_id)


async def create_conversation(*, pool: AsyncConnectionPool, owner: str,
                              title: str) -> dict[str, Any]:
    row = await _row(pool, CREATE, {"id": str(uuid.uuid4()), "owner": owner, "title": title})
    assert row is not None  # a fresh uuid4 never conflicts
    return row


async def rename_conversation(*, pool: AsyncConnectionPool, owner: str, conversation_id: str,
                              title: str) -> dict[str, Any]:
    return await _owned_change(pool, RENAME, owner=owner, conversation_id=conversation_id,
                               title=title)


async def archive_conversation(*, pool: AsyncConnectionPool, owner: str,
                               conversation_id: str) -> dict[str, Any]:
    return await _owned_change(pool, ARCHIVE, owner=owner, conversation_id=conversation_id)


async def restore_conversation(*, pool: AsyncConnectionPool, owner: str,
                               conversation_id: str) -> dict[str, Any]:
    return await _owned_change(pool, RESTORE, owner=owner, conversation_id=conversation_id)


def list_query(*, searching: bool, include_archived: bool, after: bool) -> str:
    return (LIST + ("" if include_archived else LIVE_ONLY) + (AFTER if after else "")
            + (MATCHES if searching else "") + ORDER)


async def list_conversations(*, pool: AsyncConnectionPool, owner: str, limit: int,
                             cursor: str | None, q: str | None,
                             include_archived: bool) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the owner's conversations and the cursor of the next (None at the end)."""
    params: dict[str, Any] = {"owner": owner, "limit": limit + 1, "q": (q or "").strip()}
    if cursor:
        params["after_ts"], params["after_id"] = cursors.decode_conversation_key(cursor)
    sql = list_query(searching=bool(params["q"]), include_archived=include_archived,
                     after=bool(cursor))
    async with storage_errors(), pool.connection() as conn:
        cur = await conn.execute(sql, params)  # type: ignore[arg-type]
        rows: list[dict[str, Any]] = await cur.fetchall()  # type: ignore[assignment]
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, cursors.conversation_key(page[-1]["last_activity_at"], page[-1]["id"])


async def append_message(*, pool: AsyncConnectionPool, owner: str, conversation_id: str,
                         message_id: str, role: str,
                         content: str) -> tuple[dict[str, Any], bool]:
    """Store a message unless its id is already stored; returns it and whether it is new.

    The id is the client's, or the final event's `message_id` (the stored assistant answer),
    so posting the answer a stream ended with never duplicates it.
    """
    conv = await get_conversation(pool=pool, owner=owner, conversation_id=conversation_id)
    if conv["is_archived"]:
        raise AgentChatError(ErrorCode.CONVERSATION_ARCHIVED,
                             "the conversation is archived; restore it first")
    params = {"id": message_id, "conversation_id": conversation_id, "role": role,
              "content": content}
    row = await _row(pool, APPEND, params)
    if row is not None:
        return row, True
    existing = await _row(pool, GET_MESSAGE, {"id": message_id})
    if existing is None or existing["conversation_id"] != conversation_id:
        # The id is taken elsewhere; say nothing about where (it may be another user's).
        raise AgentChatError(ErrorCode.INVALID_REQUEST,
                             "that message id is already used; choose another")
    return existing, False
