"""Conversations: create, read, rename, archive and restore one; list and search a user's;
the title rule and the activity time the list is ordered by.

Every statement a user reaches with a conversation id names the owner, so another user's
conversation behaves exactly like a missing one (NOT_FOUND) without a second query to tell
them apart.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from agentchat.agent.storage.db import Db, Row, connection, fetch_all, fetch_one, not_found
from agentchat.db import conversation_lock

# Titles come from the first user message, cut to this many characters (a conversation
# started by /chat, an untitled one named by its first message, the REST append alike).
TITLE_CHARS = 120
MAX_ID_CHARS = 200

# The active branch's last message (docs/protocol.md §4, "Branches"): the conversation's `leaf_id`,
# else (rows stored before branches) its newest message, else '' (a branch's first message has
# parent ''). A new message's parent; `{cid}` is the statement's conversation id parameter.
TIP = """coalesce((SELECT leaf_id FROM conversations WHERE id = {cid}),
         (SELECT id FROM messages WHERE conversation_id = {cid} ORDER BY pos DESC LIMIT 1),
         '')"""

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


def title_from(text: str) -> str:
    """A conversation's title from its first user message."""
    return text[:TITLE_CHARS]


def storable_id(conversation_id: str) -> bool:
    """Whether a conversation could have this id (text columns hold no NUL)."""
    return 0 < len(conversation_id) <= MAX_ID_CHARS and "\x00" not in conversation_id


async def _owned(db: Db, sql: str, *, owner: str, conversation_id: str, **params: Any) -> Row:
    """Run an owner-scoped statement on one conversation; no row is NOT_FOUND."""
    if not storable_id(conversation_id):
        raise not_found()
    row = await fetch_one(db, sql, {"id": conversation_id, "owner": owner, **params})
    if row is None:
        raise not_found()
    return row


async def get_conversation(db: Db, *, owner: str, conversation_id: str) -> Row:
    """The owner's conversation; NOT_FOUND for a missing and another user's alike."""
    return await _owned(db, GET_OWNED, owner=owner, conversation_id=conversation_id)


async def create_conversation(db: Db, *, owner: str, title: str) -> Row:
    row = await fetch_one(db, CREATE, {"id": str(uuid.uuid4()), "owner": owner, "title": title})
    assert row is not None  # a fresh uuid4 never conflicts
    return row


async def rename_conversation(db: Db, *, owner: str, conversation_id: str, title: str) -> Row:
    return await _owned(db, RENAME, owner=owner, conversation_id=conversation_id, title=title)


async def archive_conversation(db: Db, *, owner: str, conversation_id: str) -> Row:
    return await _owned_locked(db, ARCHIVE, owner=owner, conversation_id=conversation_id)


async def restore_conversation(db: Db, *, owner: str, conversation_id: str) -> Row:
    return await _owned_locked(db, RESTORE, owner=owner, conversation_id=conversation_id)


async def _owned_locked(db: Db, sql: str, *, owner: str, conversation_id: str) -> Row:
    """`_owned` under the conversation's lock: the pruner decides and deletes under the same
    lock, so an archive or restore is wholly before a prune's check or after its delete."""
    if not storable_id(conversation_id):
        raise not_found()
    async with connection(db) as conn, conversation_lock(conn, conversation_id):
        return await _owned(conn, sql, owner=owner, conversation_id=conversation_id)


def list_query(*, searching: bool, include_archived: bool, after: bool) -> str:
    return (LIST + ("" if include_archived else LIVE_ONLY) + (AFTER if after else "")
            + (MATCHES if searching else "") + ORDER)


async def list_conversations(
    db: Db, *, owner: str, limit: int, after: tuple[datetime, str] | None = None,
    q: str | None = None, include_archived: bool = False,
) -> tuple[list[Row], tuple[datetime, str] | None]:
    """One page of the owner's conversations after the key `after` (last_activity_at, id),
    and the key of the next page (None at the end)."""
    params: dict[str, Any] = {"owner": owner, "limit": limit + 1, "q": (q or "").strip()}
    if after is not None:
        params["after_ts"], params["after_id"] = after
    sql = list_query(searching=bool(params["q"]), include_archived=include_archived,
                     after=after is not None)
    rows = await fetch_all(db, sql, params)
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, (page[-1]["last_activity_at"], page[-1]["id"])
