"""A conversation as a tree of messages (docs/protocol.md §4, "Branches"): the active branch, the
alternatives of a message, where an edit or a regenerate forks, what the abandoned branch already
executed, and the switch to another branch.

Each message names the one before it on its branch (`parent_id`; '' for a branch's first
message). Rows stored before branches have NULL there: they continue the line before them
(by `pos`), and the first fork of such a conversation writes their parents down. The
conversation's `leaf_id` is its active branch's last message. Every read names the owner
(`get_conversation`) before it reads a message: another user's is NOT_FOUND.
"""

from __future__ import annotations

from typing import Any

from agentchat.agent.storage.conversations import TIP, get_conversation
from agentchat.agent.storage.db import Db, Row, connection, execute, fetch_all, fetch_one
from agentchat.errors import AgentChatError, ErrorCode

# From a message up to its branch's first one (oldest first). A NULL parent is a row stored
# before branches: the message before it by `pos` is its parent.
CHAIN = f"""
WITH RECURSIVE chain AS (
    SELECT m.id, m.parent_id, m.role, m.pos, m.turn_id, 0 AS depth
      FROM messages m
     WHERE m.conversation_id = %(id)s
       AND m.id = coalesce(%(leaf)s, {TIP.format(cid="%(id)s")})
    UNION ALL
    SELECT p.id, p.parent_id, p.role, p.pos, p.turn_id, c.depth + 1
      FROM chain c CROSS JOIN LATERAL (
          SELECT id, parent_id, role, pos, turn_id FROM messages
           WHERE conversation_id = %(id)s
             AND CASE WHEN c.parent_id IS NULL THEN pos < c.pos ELSE id = c.parent_id END
           ORDER BY pos DESC LIMIT 1) p
)
SELECT id, parent_id, role, pos, turn_id FROM chain ORDER BY depth DESC
"""
# The alternatives of the given parents' children, in the order they were written.
SIBLINGS = """
SELECT parent_id, array_agg(id ORDER BY pos) AS ids FROM messages
 WHERE conversation_id = %(id)s AND parent_id = ANY(%(parents)s)
 GROUP BY parent_id HAVING count(*) > 1
"""
# Rows stored before branches get their parent written down (the line they continue).
MATERIALIZE = """
UPDATE messages m SET parent_id = l.prev
  FROM (SELECT id, coalesce(lag(id) OVER (ORDER BY pos), '') AS prev
          FROM messages WHERE conversation_id = %(id)s) l
 WHERE m.id = l.id AND m.conversation_id = %(id)s AND m.parent_id IS NULL
"""
MESSAGE = """
SELECT m.id, m.role, m.content, m.parent_id, m.turn_id, t.plan
  FROM messages m LEFT JOIN turns t ON t.id = m.turn_id
 WHERE m.conversation_id = %(id)s AND m.id = %(mid)s
"""
# From a message down to a leaf, always by its newest child: the branch "through" it.
DESCEND = """
WITH RECURSIVE down AS (
    SELECT id, 0 AS depth FROM messages WHERE conversation_id = %(id)s AND id = %(mid)s
    UNION ALL
    SELECT k.id, d.depth + 1 FROM down d CROSS JOIN LATERAL (
        SELECT id FROM messages WHERE conversation_id = %(id)s AND parent_id = d.id
         ORDER BY pos DESC LIMIT 1) k
)
SELECT id FROM down ORDER BY depth DESC LIMIT 1
"""
# The calls that ran or may have run in the turns of a message and everything below it:
# ok, and every outcome after the request may have left (timeout, error, cancelled while it
# ran, still running when its replica died). A refusal before sending is an error too: listed,
# which asks one card more, never one less.
EXECUTED = """
WITH RECURSIVE below AS (
    SELECT id, turn_id FROM messages WHERE conversation_id = %(id)s AND id = %(mid)s
    UNION ALL
    SELECT m.id, m.turn_id FROM below b
      JOIN messages m ON m.conversation_id = %(id)s AND m.parent_id = b.id
)
SELECT c.call_id, c.tool, c.input, c.outcome FROM tool_calls c
 WHERE c.conversation_id = %(id)s
   AND c.outcome IN ('ok', 'timeout', 'error', 'cancelled', 'running')
   AND c.turn_id IN (SELECT turn_id FROM below WHERE turn_id IS NOT NULL)
 ORDER BY c.started_at, c.call_id
"""
SET_LEAF = "UPDATE conversations SET leaf_id = %(leaf)s WHERE id = %(id)s AND owner = %(owner)s"


def _refused(detail: str) -> AgentChatError:
    return AgentChatError(ErrorCode.INVALID_REQUEST, detail)


async def chain(db: Db, conversation_id: str, leaf: str | None = None) -> list[Row]:
    """The branch ending at `leaf` (None: the active branch), oldest first."""
    return await fetch_all(db, CHAIN, {"id": conversation_id, "leaf": leaf})


async def siblings(db: Db, conversation_id: str, parents: list[str]) -> dict[str, list[str]]:
    """parent id -> its children's ids, for the parents with more than one child."""
    rows = await fetch_all(db, SIBLINGS, {"id": conversation_id, "parents": parents})
    return {r["parent_id"]: list(r["ids"]) for r in rows}


async def fork_point(db: Db, *, owner: str, conversation_id: str, message_id: str | None,
                     kind: str) -> Row:
    """Where an edit (`message_id`: a user message) or a regenerate (an assistant message;
    None: the active branch's last) forks: just before the user message it names or that
    produced it. Returns that message (`id`, `content`, `parent`: its parent, '' for none;
    `plan`: its turn's), `prev_user` (the user message before it on its branch, or None) and
    `executed` (the calls that ran or may have run at or below it: `call_id`, `tool`,
    `input`, `outcome`)."""
    async with connection(db) as conn:
        await get_conversation(conn, owner=owner, conversation_id=conversation_id)
        params: dict[str, Any] = {"id": conversation_id, "mid": message_id}
        if kind == "regenerate":
            if message_id is None:
                answers = [m for m in await chain(conn, conversation_id)
                           if m["role"] == "assistant"]
                if not answers:
                    raise _refused("there is no answer to regenerate")
                params["mid"] = answers[-1]["id"]
            target = await fetch_one(conn, MESSAGE, params)
            if target is None or target["role"] != "assistant":
                raise _refused("message_id is not an answer of this conversation")
            users = [m for m in await chain(conn, conversation_id, params["mid"])
                     if m["role"] == "user"]
            if not users:
                raise _refused("that answer has no message to run again")
            params["mid"] = users[-1]["id"]
        await conn.execute(MATERIALIZE, params)
        user = await fetch_one(conn, MESSAGE, params)
        if user is None or user["role"] != "user":
            raise _refused("message_id is not a user message of this conversation")
        above = [m for m in await chain(conn, conversation_id, params["mid"])][:-1]
        prev_users = [m["id"] for m in above if m["role"] == "user"]
        executed = await fetch_all(conn, EXECUTED, params)
    return {**user, "parent": user["parent_id"] or "",
            "prev_user": prev_users[-1] if prev_users else None, "executed": executed}


async def branch_through(db: Db, conversation_id: str, message_id: str) -> str:
    """The leaf of the branch through `message_id` (its newest descendants); `db` may be the
    switch's own transaction."""
    await execute(db, MATERIALIZE, {"id": conversation_id})
    row = await fetch_one(db, DESCEND, {"id": conversation_id, "mid": message_id})
    if row is None:  # as a missing conversation: never says whose it is
        raise AgentChatError(ErrorCode.NOT_FOUND, "no such message in this conversation")
    return str(row["id"])
