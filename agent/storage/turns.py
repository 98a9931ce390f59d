"""A conversation's record of what happened: turns (one submit, or a card's resume), their
messages and their tool calls, plus the orphan sweep and the REST append after a stream.

The turn's own statements take the conversation id that `conversations.get_conversation`
returned for its owner when the submit began (the /chat handler, under the lease); the
append checks the owner itself.
"""

from __future__ import annotations

import json
from typing import Any

from agentchat.agent.storage.conversations import TIP, get_conversation, title_from
from agentchat.agent.storage.db import Db, Row, execute, fetch_one
from agentchat.errors import AgentChatError, ErrorCode

# turns ---------------------------------------------------------------------------------------

INSERT_TURN = """
INSERT INTO turns (id, conversation_id, plan) VALUES (%(id)s, %(conversation_id)s, %(plan)s)
"""
FINISH_TURN = """
UPDATE turns SET status = %(status)s, error_code = %(error_code)s,
       finished_at = CASE WHEN %(status)s = 'awaiting_confirmation' THEN NULL ELSE now() END
 WHERE id = %(id)s
"""
RESUME_TURN = "UPDATE turns SET status = 'running', finished_at = NULL WHERE id = %(id)s"
# Turns left 'running' by a process that died (kill -9, OOM, a node lost): no live lease on
# their conversation (a running turn's process renews it every lease_s/3) and not running here.
# They become failed and their unfinished tool calls errors, in one statement.
SWEEP_ORPHANS = """
WITH orphans AS (
    UPDATE turns t SET status = 'failed', error_code = 'INTERNAL', finished_at = now()
     WHERE t.status = 'running'
       AND t.started_at < now() - make_interval(secs => %(grace)s)
       AND NOT (t.id = ANY(%(live)s))
       AND NOT EXISTS (SELECT 1 FROM leases l
                        WHERE l.conversation_id = t.conversation_id AND l.until > now())
    RETURNING t.id),
calls AS (
    UPDATE tool_calls c SET outcome = 'error', finished_at = now(),
           error = 'interrupted: the agent stopped before the call finished'
      FROM orphans o WHERE c.turn_id = o.id AND c.outcome = 'running'
    RETURNING c.call_id)
SELECT (SELECT count(*) FROM orphans) AS turns, (SELECT count(*) FROM calls) AS calls
"""
async def start_turn(db: Db, turn_id: str, conversation_id: str,
                     plan: dict[str, Any] | None = None) -> None:
    """`plan`: what the turn offers the model (tools, env_id, uicontext), kept for resumes."""
    await execute(db, INSERT_TURN, {"id": turn_id, "conversation_id": conversation_id,
                                    "plan": json.dumps(plan) if plan is not None else None})


async def finish_turn(db: Db, turn_id: str, status: str, error_code: str | None = None) -> None:
    await execute(db, FINISH_TURN, {"id": turn_id, "status": status, "error_code": error_code})


# A turn's end in one statement (docs/architecture.md, "Streaming at scale": at the end of 200
# streams these were three checkouts and three round trips each, queued on the pool between the last
# token and the final event): the assistant's message when there is one, the turn's status, the
# conversation's activity. A turn's message follows the active branch's tip and becomes it
# (docs/protocol.md §4, "Branches").
_TIP = TIP.format(cid="%(conversation_id)s")
END_TURN = f"""
WITH answer AS (
    INSERT INTO messages (id, conversation_id, turn_id, role, content, partial, parent_id)
    SELECT %(message_id)s, %(conversation_id)s, %(id)s, 'assistant', %(content)s, %(partial)s,
           {_TIP}
     WHERE %(message_id)s::text IS NOT NULL
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), turn AS (
    {FINISH_TURN.strip()}
)
UPDATE conversations SET last_activity_at = now(),
       leaf_id = coalesce((SELECT id FROM answer), leaf_id)
 WHERE id = %(conversation_id)s
"""


async def end_turn(db: Db, *, turn_id: str, conversation_id: str, status: str,
                   error_code: str | None = None, message_id: str | None = None,
                   content: str = "", partial: bool = False) -> None:
    """The turn finished with `status`, after storing its answer (`message_id`) if given, and
    the conversation's last activity now, in one transaction."""
    await execute(db, END_TURN, {
        "id": turn_id, "conversation_id": conversation_id, "status": status,
        "error_code": error_code, "message_id": message_id, "content": content,
        "partial": partial})


async def resume_turn(db: Db, turn_id: str) -> None:
    """A turn answered from its card runs again (so a crash now is seen as an orphan)."""
    await execute(db, RESUME_TURN, {"id": turn_id})


async def sweep_orphans(db: Db, live: list[str], grace_s: float) -> Row:
    row = await fetch_one(db, SWEEP_ORPHANS, {"live": live, "grace": grace_s})
    return row or {"turns": 0, "calls": 0}


# messages ------------------------------------------------------------------------------------

MESSAGE_COLUMNS = "id, conversation_id, turn_id, role, content, partial, created_at"
INSERT_MESSAGE = f"""
WITH ins AS (
    INSERT INTO messages (id, conversation_id, turn_id, role, content, partial, parent_id)
    VALUES (%(id)s, %(conversation_id)s, %(turn_id)s, %(role)s, %(content)s, %(partial)s,
            {_TIP})
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)
UPDATE conversations SET leaf_id = (SELECT id FROM ins)
 WHERE id = %(conversation_id)s AND EXISTS (SELECT 1 FROM ins)
"""
GET_MESSAGE = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = %(id)s"
# One statement: the message, the conversation's activity, and its title when it has none
# yet (`title` is the title rule applied to the content, used for a user message only).
APPEND = f"""
WITH ins AS (
    INSERT INTO messages (id, conversation_id, role, content, parent_id)
    VALUES (%(id)s, %(conversation_id)s, %(role)s, %(content)s, {_TIP})
    ON CONFLICT (id) DO NOTHING
    RETURNING {MESSAGE_COLUMNS}
), touched AS (
    UPDATE conversations
       SET last_activity_at = now(), leaf_id = (SELECT id FROM ins),
           title = CASE WHEN title = '' AND %(role)s = 'user' THEN %(title)s ELSE title END
     WHERE id = %(conversation_id)s AND owner = %(owner)s AND EXISTS (SELECT 1 FROM ins)
)
SELECT * FROM ins
"""


async def add_message(db: Db, *, message_id: str, conversation_id: str, turn_id: str | None,
                      role: str, content: str, partial: bool = False) -> None:
    await execute(db, INSERT_MESSAGE, {
        "id": message_id, "conversation_id": conversation_id, "turn_id": turn_id,
        "role": role, "content": content, "partial": partial})


async def append_message(db: Db, *, owner: str, conversation_id: str, message_id: str,
                         role: str, content: str) -> tuple[Row, bool]:
    """Store a message unless its id is already stored; returns it and whether it is new.

    The id is the client's, or the final event's `message_id` (the stored assistant answer),
    so posting the answer a stream ended with never duplicates it.
    """
    conv = await get_conversation(db, owner=owner, conversation_id=conversation_id)
    if conv["is_archived"]:
        raise AgentChatError(ErrorCode.CONVERSATION_ARCHIVED,
                             "the conversation is archived; restore it first")
    row = await fetch_one(db, APPEND, {
        "id": message_id, "conversation_id": conversation_id, "owner": owner, "role": role,
        "content": content, "title": title_from(content)})
    if row is not None:
        return row, True
    existing = await fetch_one(db, GET_MESSAGE, {"id": message_id})
    if existing is None or existing["conversation_id"] != conversation_id:
        # The id is taken elsewhere; say nothing about where (it may be another user's).
        raise AgentChatError(ErrorCode.INVALID_REQUEST,
                             "that message id is already used; choose another")
    return existing, False


# tool calls ----------------------------------------------------------------------------------

UPSERT_TOOL_CALL = """
INSERT INTO tool_calls (conversation_id, call_id, turn_id, tool, input)
VALUES (%(conversation_id)s, %(call_id)s, %(turn_id)s, %(tool)s, %(input)s)
ON CONFLICT (conversation_id, call_id) DO UPDATE
   SET turn_id = EXCLUDED.turn_id, input = EXCLUDED.input, outcome = 'running',
       started_at = now(), finished_at = NULL
"""
FINISH_TOOL_CALL = """
UPDATE tool_calls SET outcome = %(outcome)s, output = %(output)s, error = %(error)s,
       attempts = %(attempts)s, finished_at = now()
 WHERE conversation_id = %(conversation_id)s AND call_id = %(call_id)s
"""
CLOSE_DANGLING_CALLS = """
UPDATE tool_calls SET outcome = %(outcome)s, finished_at = now()
 WHERE conversation_id = %(conversation_id)s AND outcome = 'running'
"""


async def tool_started(db: Db, *, conversation_id: str, turn_id: str, call_id: str, tool: str,
                       tool_input: dict[str, Any]) -> None:
    await execute(db, UPSERT_TOOL_CALL, {
        "conversation_id": conversation_id, "call_id": call_id, "turn_id": turn_id,
        "tool": tool, "input": json.dumps(tool_input, ensure_ascii=False)})


async def tool_finished(db: Db, *, conversation_id: str, call_id: str, outcome: str,
                        output: Any = None, error: str | None = None, attempts: int = 1) -> None:
    await execute(db, FINISH_TOOL_CALL, {
        "conversation_id": conversation_id, "call_id": call_id, "outcome": outcome,
        "output": None if output is None else json.dumps(output, ensure_ascii=False),
        "error": error, "attempts": attempts})


async def close_dangling_calls(db: Db, conversation_id: str, outcome: str) -> None:
    """Every call of the conversation still `running` gets `outcome` (the checkpoint's side
    is `TurnRunner.close_dangling`, which calls this)."""
    await execute(db, CLOSE_DANGLING_CALLS, {"conversation_id": conversation_id,
                                             "outcome": outcome})
