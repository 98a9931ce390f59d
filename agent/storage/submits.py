"""A submit's rows before its turn starts, in one transaction (docs/architecture.md, "One turn,
through the modules"): the conversation (its owner inside the SQL), the tab's lease, what could
stand in the way, and, when nothing does, the turn and its user message.

    a new conversation    START_CONVERSATION: one statement (a fresh id has nothing to settle)
    a message             `begin_message`: the conversation's lock (transaction-scoped), then
                          OPEN_AND_START, pipelined: one round trip. It takes the lease and
                          reports what stands in the way (a pending card, an unfinished last
                          turn, a run live on another replica); the turn and the message are
                          inserted only when nothing does, else the caller settles that and
                          asks again
    a card's answer, a    `open_for_action`: the lock, then OPEN (the same checks and the
    retry                 conversation's last turn), in the transaction the caller goes on with

The lock is `agentchat.db`'s per-conversation advisory lock (the pruner takes it too); its
transaction-scoped form is released at commit, so no statement is needed to let it go. Every
statement names the owner: another user's conversation is NOT_FOUND, never fetched.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from agentchat.agent.storage.conversations import storable_id
from agentchat.agent.storage.db import Db, Row, connection, execute, not_found
from agentchat.db import CONVERSATION_LOCK_NS, conversation_lock_key
from agentchat.errors import AgentChatError, ErrorCode

# A message without a conversation id, in one statement: the new conversation (titled after
# the message), its lease for the submitting tab, the turn and the user message.
START_CONVERSATION = """
WITH conv AS (
    INSERT INTO conversations (id, owner, title, leaf_id)
    VALUES (%(id)s, %(owner)s, %(title)s, %(message_id)s)
    RETURNING id
), lease AS (
    INSERT INTO leases (conversation_id, session_id, until)
    SELECT id, %(tab)s, now() + make_interval(secs => %(secs)s) FROM conv
), turn AS (
    INSERT INTO turns (id, conversation_id, plan) SELECT %(turn_id)s, id, %(plan)s FROM conv
    RETURNING id, conversation_id
)
INSERT INTO messages (id, conversation_id, turn_id, role, content, parent_id)
SELECT %(message_id)s, conversation_id, id, 'user', %(content)s, '' FROM turn
"""

LOCK = "SELECT pg_advisory_xact_lock(%(ns)s, %(key)s)"

# The checks every submit on an existing conversation makes, under its lock: the owner's
# conversation, the tab's lease (taken when free, expired or already the tab's), the pending
# card, the last turn, and runs of it live on another replica.
_CHECKS = """
conv AS (
    SELECT id, is_archived FROM conversations WHERE id = %(id)s AND owner = %(owner)s
), lease AS (
    INSERT INTO leases (conversation_id, session_id, until)
    SELECT id, %(tab)s, now() + make_interval(secs => %(secs)s) FROM conv WHERE NOT is_archived
    ON CONFLICT (conversation_id) DO UPDATE
       SET session_id = EXCLUDED.session_id, until = EXCLUDED.until
     WHERE leases.until < now() OR leases.session_id = EXCLUDED.session_id
    RETURNING conversation_id
), pending AS (
    SELECT *, expires_at <= now() AS expired FROM confirmations
     WHERE conversation_id = (SELECT id FROM conv) AND status = 'pending'
     ORDER BY created_at LIMIT 1
), last AS (
    SELECT t.id, t.status, t.plan, m.id AS user_message_id, m.content AS user_text
      FROM turns t JOIN messages m ON m.turn_id = t.id AND m.role = 'user'
     WHERE t.conversation_id = (SELECT id FROM conv)
     -- the active branch's last turn first (docs/protocol.md §4, "Branches": after a branch switch
     -- it is not the newest), else the newest
     ORDER BY (t.id = (SELECT turn_id FROM messages WHERE id = (
                  SELECT leaf_id FROM conversations WHERE id = (SELECT id FROM conv))))
                  DESC NULLS LAST,
              t.started_at DESC, m.pos DESC LIMIT 1
), elsewhere AS (
    SELECT id, tab_id, heartbeat_at < now() - make_interval(secs => %(lost_s)s) AS stale
      FROM runs
     WHERE conversation_id = (SELECT id FROM conv) AND status = 'running'
       AND replica <> %(replica)s
)"""
_REPORT = """
       (SELECT count(*) FROM conv) = 1 AS found,
       coalesce((SELECT is_archived FROM conv), false) AS archived,
       (SELECT count(*) FROM lease) = 1 AS leased,
       (SELECT to_jsonb(p) FROM pending p) AS pending,
       (SELECT to_jsonb(last) FROM last) AS last,
       coalesce((SELECT jsonb_agg(to_jsonb(e)) FROM elsewhere e), '[]') AS elsewhere"""

OPEN = "WITH" + _CHECKS + "\nSELECT" + _REPORT

# ... and, when nothing stands in the way, the turn, its user message and a title for a
# conversation that has none, in the same statement.
OPEN_AND_START = "WITH" + _CHECKS + """, clear AS (
    SELECT 1 FROM lease
     WHERE NOT EXISTS (SELECT 1 FROM pending) AND NOT EXISTS (SELECT 1 FROM elsewhere)
       AND (%(last_settled)s
            OR coalesce((SELECT status FROM last), 'completed') NOT IN ('running', 'failed'))
), tip AS (
    SELECT coalesce((SELECT leaf_id FROM conversations WHERE id = (SELECT id FROM conv)),
                    (SELECT id FROM messages WHERE conversation_id = %(id)s
                      ORDER BY pos DESC LIMIT 1)) AS id
), turn AS (
    -- The turn's branch (docs/protocol.md §4, "Branches"): a fork's is its own first message; else
    -- the branch of the turn that wrote the tip, else the conversation's first message (rows stored
    -- before).
    INSERT INTO turns (id, conversation_id, plan)
    SELECT %(turn_id)s, %(id)s, %(plan)s::jsonb || jsonb_build_object('branch',
           CASE WHEN %(fork)s THEN %(message_id)s ELSE coalesce(
               (SELECT t.plan->>'branch' FROM messages m JOIN turns t ON t.id = m.turn_id
                 WHERE m.id = (SELECT id FROM tip)),
               (SELECT id FROM messages WHERE conversation_id = %(id)s AND role = 'user'
                 ORDER BY pos LIMIT 1),
               %(message_id)s) END)
      FROM clear RETURNING id, plan->>'branch' AS branch
), message AS (
    INSERT INTO messages (id, conversation_id, turn_id, role, content, parent_id)
    SELECT %(message_id)s, %(id)s, id, 'user', %(content)s,
           CASE WHEN %(fork)s THEN %(parent)s ELSE coalesce((SELECT id FROM tip), '') END
      FROM turn
), titled AS (
    UPDATE conversations
       SET title = CASE WHEN title = '' THEN %(title)s ELSE title END, leaf_id = %(message_id)s,
           forked_at = CASE WHEN %(fork)s THEN coalesce(forked_at, now()) ELSE forked_at END
     WHERE id = (SELECT %(id)s::text FROM turn)
)
SELECT (SELECT count(*) FROM turn) = 1 AS started, (SELECT branch FROM turn) AS branch,
""" + _REPORT


@dataclass(frozen=True)
class Opened:
    """What a submit found on its conversation (OPEN's report)."""

    pending: Row | None  # the pending card's row (`expired`: past its expires_at)
    last: Row | None  # the last turn: id, status, plan, user_message_id, user_text
    elsewhere: list[Row]  # runs live on another replica: id, tab_id, stale
    started: bool = False  # OPEN_AND_START inserted the turn and the message
    branch: str | None = None  # the started turn's branch (docs/protocol.md §4, "Branches")

    @property
    def unfinished(self) -> bool:
        """The last turn is running (we hold the lease: nobody runs it) or failed: its dangling
        calls are answered before the next message (ChatTurns.settle_orphan)."""
        return self.last is not None and self.last["status"] in ("running", "failed")


def _opened(row: Row | None) -> Opened:
    """The report as `Opened`, or the error a user gets for it."""
    if row is None or not row["found"]:
        raise not_found()
    if row["archived"]:
        raise AgentChatError(ErrorCode.CONVERSATION_ARCHIVED,
                             "the conversation is archived; restore it first")
    if not row["leased"]:
        raise AgentChatError(ErrorCode.CONVERSATION_BUSY,
                             "the conversation is open in another tab")
    pending = row["pending"]
    if pending is not None:  # as the confirmations module reads it: a datetime, not JSON's text
        pending = {**pending, "created_at": datetime.fromisoformat(pending["created_at"])}
    return Opened(pending=pending, last=row["last"], elsewhere=row["elsewhere"],
                  started=bool(row.get("started")), branch=row.get("branch"))


@asynccontextmanager
async def _locked(db: Db, conversation_id: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection for a transaction the caller begins (BEGIN, then the conversation's LOCK)
    and commits; on any error it is rolled back, so no pooled connection keeps one open."""
    if not storable_id(conversation_id):
        raise not_found()
    async with connection(db) as conn:
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.execute("ROLLBACK")
            raise


def _lock_params(conversation_id: str) -> dict[str, Any]:
    return {"ns": CONVERSATION_LOCK_NS, "key": conversation_lock_key(conversation_id)}


async def start_conversation(db: Db, *, conversation_id: str, owner: str, title: str, tab: str,
                             lease_s: float, turn_id: str, plan: dict[str, Any],
                             message_id: str, content: str) -> None:
    """A new conversation with its lease, its first turn and that turn's user message."""
    await execute(db, START_CONVERSATION, {
        "id": conversation_id, "owner": owner, "title": title, "tab": tab, "secs": lease_s,
        "turn_id": turn_id, "plan": json.dumps(plan), "message_id": message_id,
        "content": content})


async def begin_message(db: Db, *, conversation_id: str, owner: str, tab: str, lease_s: float,
                        replica: str, lost_s: float, turn_id: str, plan: dict[str, Any],
                        message_id: str, content: str, title: str,
                        last_settled: bool = False, fork: bool = False,
                        parent: str = "") -> Opened:
    """A message on an existing conversation: its turn and user message stored when nothing
    stands in the way (`Opened.started`), in one transaction and one round trip. `fork`: an
    edit or a regenerate (docs/protocol.md §4, "Branches"), whose message follows `parent` ('' for
    none) on a new branch; otherwise it follows the active branch's tip. Either becomes the new
    tip."""
    params = {"id": conversation_id, "owner": owner, "tab": tab, "secs": lease_s,
              "replica": replica, "lost_s": lost_s, "turn_id": turn_id,
              "plan": json.dumps(plan), "message_id": message_id, "content": content,
              "title": title, "last_settled": last_settled, "fork": fork, "parent": parent}
    async with _locked(db, conversation_id) as conn:
        # One round trip: the pipeline sends BEGIN, the lock, the statement and the COMMIT,
        # and syncs once, at its end.
        async with conn.pipeline():
            await conn.execute("BEGIN")
            await conn.execute(LOCK, _lock_params(conversation_id))
            cur = await conn.execute(OPEN_AND_START, params)
            await conn.execute("COMMIT")
        row = await cur.fetchone()
    return _opened(row)


@dataclass
class Action:
    """A card's answer or a retry in its transaction: the connection (holding the lock), what
    OPEN found, and the statements to send with the COMMIT (`then`), whose results nobody
    waits for: they cost no round trip of their own."""

    conn: psycopg.AsyncConnection[Any]
    opened: Opened
    tail: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def then(self, sql: str, params: dict[str, Any]) -> None:
        self.tail.append((sql, params))


@asynccontextmanager
async def open_for_action(db: Db, *, conversation_id: str, owner: str, tab: str,
                          lease_s: float, replica: str, lost_s: float) -> AsyncIterator[Action]:
    """A card's answer or a retry: the conversation opened under its lock (BEGIN, the lock and
    OPEN in one round trip), in a transaction the block goes on with; when the block ends, its
    `then` statements and the COMMIT go in one more (an error rolls it all back)."""
    params = {"id": conversation_id, "owner": owner, "tab": tab, "secs": lease_s,
              "replica": replica, "lost_s": lost_s}
    async with _locked(db, conversation_id) as conn:
        async with conn.pipeline():
            await conn.execute("BEGIN")
            await conn.execute(LOCK, _lock_params(conversation_id))
            cur = await conn.execute(OPEN, params)
        action = Action(conn, _opened(await cur.fetchone()))
        yield action
        async with conn.pipeline():
            for sql, values in action.tail:
                await conn.execute(sql, values)
            await conn.execute("COMMIT")
