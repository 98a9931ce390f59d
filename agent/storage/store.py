"""The agent's own records: conversations, turns, messages, tool calls, cards and leases.

SQL lives here as UPPER_SNAKE constants; functions take a pool and do one small piece of I/O
each. Storage errors become STORAGE_UNAVAILABLE at the edges (see `storage_errors`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
import psycopg_pool

from agentchat.errors import AgentChatError, ErrorCode

GET_CONVERSATION = "SELECT * FROM conversations WHERE id = %(id)s"
INSERT_CONVERSATION = """
INSERT INTO conversations (id, owner, title) VALUES (%(id)s, %(owner)s, %(title)s)
ON CONFLICT (id) DO NOTHING
RETURNING id, owner, title, created_at, last_activity_at, is_archived
"""
SET_TITLE_IF_EMPTY = "UPDATE conversations SET title = %(title)s WHERE id = %(id)s AND title = ''"
TOUCH_CONVERSATION = "UPDATE conversations SET last_activity_at = now() WHERE id = %(id)s"

# A lease is taken when free, expired, or already ours (same Gradio session).
TAKE_LEASE = """
INSERT INTO leases (conversation_id, session_id, until)
VALUES (%(id)s, %(session)s, now() + make_interval(secs => %(secs)s))
ON CONFLICT (conversation_id) DO UPDATE
   SET session_id = EXCLUDED.session_id, until = EXCLUDED.until
 WHERE leases.until < now() OR leases.session_id = EXCLUDED.session_id
RETURNING until
"""
EXTEND_LEASE = """
UPDATE leases SET until = now() + make_interval(secs => %(secs)s)
 WHERE conversation_id = %(id)s AND session_id = %(session)s
"""
GET_LEASE = """
SELECT session_id, until, until > now() AS active FROM leases WHERE conversation_id = %(id)s
"""

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
LAST_TURN = """
SELECT t.*, m.id AS user_message_id, m.content AS user_text
  FROM turns t JOIN messages m ON m.turn_id = t.id AND m.role = 'user'
 WHERE t.conversation_id = %(id)s ORDER BY t.started_at DESC, m.pos DESC LIMIT 1
"""
INSERT_MESSAGE = """
INSERT INTO messages (id, conversation_id, turn_id, role, content, partial)
VALUES (%(id)s, %(conversation_id)s, %(turn_id)s, %(role)s, %(content)s, %(partial)s)
ON CONFLICT (id) DO NOTHING
"""
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
INSERT_CONFIRMATION = """
INSERT INTO confirmations (confirm_id, conversation_id, turn_id, call_id, payload, expires_at)
VALUES (%(confirm_id)s, %(conversation_id)s, %(turn_id)s, %(call_id)s, %(payload)s,
        %(expires_at)s)
ON CONFLICT (confirm_id) DO NOTHING
"""
PENDING_CONFIRMATION = """
SELECT *, expires_at <= now() AS expired FROM confirmations
 WHERE conversation_id = %(id)s AND status = 'pending'
 ORDER BY created_at LIMIT 1
"""
RESOLVE_CONFIRMATION = """
UPDATE confirmations SET status = %(status)s, resolved_at = now()
 WHERE confirm_id = %(confirm_id)s AND status = 'pending'
RETURNING confirm_id
"""
GET_CONFIRMATION = "SELECT * FROM confirmations WHERE confirm_id = %(confirm_id)s"

STORAGE_ERRORS = (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg.InterfaceError)


@asynccontextmanager
async def storage_errors() -> AsyncIterator[None]:
    """Turn a database outage into STORAGE_UNAVAILABLE (retryable)."""
    try:
        yield
    except psycopg.errors.ProgramLimitExceeded:
        # An OperationalError too, but no outage: retrying cannot help (e.g. a value too big
        # for an index), so it is not STORAGE_UNAVAILABLE's "try again shortly".
        raise AgentChatError(ErrorCode.INTERNAL, "the record could not be stored") from None
    except STORAGE_ERRORS:
        raise AgentChatError(ErrorCode.STORAGE_UNAVAILABLE,
                             "the database is unreachable; try again shortly") from None


class Store:
    def __init__(self, pool: psycopg_pool.AsyncConnectionPool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def _connection(self, conn: psycopg.AsyncConnection[Any] | None
                          ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The caller's connection when it holds the conversation's lock on one: taking a
        second pool connection while holding one deadlocks a busy pool (bench/agent_scale.py:
        200 conversations on 20 connections all timed out)."""
        if conn is not None:
            yield conn
        else:
            async with self.pool.connection() as own:
                yield own

    async def _one(self, sql: str, params: dict[str, Any],
                   conn: psycopg.AsyncConnection[Any] | None = None) -> dict[str, Any] | None:
        async with storage_errors(), self._connection(conn) as c:
            cur = await c.execute(sql, params)  # type: ignore[arg-type]
            return await cur.fetchone() if cur.description else None  # type: ignore[return-value]

    async def _exec(self, sql: str, params: dict[str, Any]) -> None:
        async with storage_errors(), self.pool.connection() as conn:
            await conn.execute(sql, params)  # type: ignore[arg-type]

    # conversations ---------------------------------------------------------------------------

    async def get_conversation(self, conversation_id: str) -> dict[str, Any] | None:
        return await self._one(GET_CONVERSATION, {"id": conversation_id})

    async def owned_conversation(self, conversation_id: str, owner: str) -> dict[str, Any]:
        """The conversation if the caller owns it; NOT_FOUND for missing and foreign alike."""
        conv = await self.get_conversation(conversation_id)
        if conv is None or conv["owner"] != owner:
            raise AgentChatError(ErrorCode.NOT_FOUND, "no such conversation")
        return conv

    async def create_conversation(self, conversation_id: str, owner: str,
                                  title: str = "") -> dict[str, Any] | None:
        return await self._one(INSERT_CONVERSATION,
                               {"id": conversation_id, "owner": owner, "title": title})

    async def set_title_if_empty(self, conversation_id: str, title: str) -> None:
        await self._exec(SET_TITLE_IF_EMPTY, {"id": conversation_id, "title": title[:120]})

    async def touch(self, conversation_id: str) -> None:
        await self._exec(TOUCH_CONVERSATION, {"id": conversation_id})

    # leases ----------------------------------------------------------------------------------

    async def take_lease(self, conversation_id: str, session: str, secs: float,
                         conn: psycopg.AsyncConnection[Any] | None = None) -> bool:
        row = await self._one(TAKE_LEASE, {"id": conversation_id, "session": session,
                                           "secs": secs}, conn)
        return row is not None

    async def extend_lease(self, conversation_id: str, session: str, secs: float) -> None:
        await self._exec(EXTEND_LEASE, {"id": conversation_id, "session": session,
                                        "secs": secs})

    async def lease(self, conversation_id: str) -> dict[str, Any] | None:
        return await self._one(GET_LEASE, {"id": conversation_id})

    # turns, messages, tool calls ---------------------------------------------------------------

    async def start_turn(self, turn_id: str, conversation_id: str,
                         plan: dict[str, Any] | None = None) -> None:
        """`plan`: what the turn offers the model (tools, env_id, uicontext), kept for resumes."""
        await self._exec(INSERT_TURN, {"id": turn_id, "conversation_id": conversation_id,
                                       "plan": json.dumps(plan) if plan is not None else None})

    async def finish_turn(self, turn_id: str, status: str, error_code: str | None = None) -> None:
        await self._exec(FINISH_TURN, {"id": turn_id, "status": status,
                                       "error_code": error_code})

    async def resume_turn(self, turn_id: str) -> None:
        """A turn answered from its card runs again (so a crash now is seen as an orphan)."""
        await self._exec(RESUME_TURN, {"id": turn_id})

    async def sweep_orphans(self, live: list[str], grace_s: float) -> dict[str, Any]:
        row = await self._one(SWEEP_ORPHANS, {"live": live, "grace": grace_s})
        return row or {"turns": 0, "calls": 0}

    async def last_turn(self, conversation_id: str) -> dict[str, Any] | None:
        return await self._one(LAST_TURN, {"id": conversation_id})

    async def add_message(self, *, message_id: str, conversation_id: str, turn_id: str | None,
                          role: str, content: str, partial: bool = False) -> None:
        await self._exec(INSERT_MESSAGE, {
            "id": message_id, "conversation_id": conversation_id, "turn_id": turn_id,
            "role": role, "content": content, "partial": partial})

    async def tool_started(self, *, conversation_id: str, turn_id: str, call_id: str, tool: str,
                           tool_input: dict[str, Any]) -> None:
        await self._exec(UPSERT_TOOL_CALL, {
            "conversation_id": conversation_id, "call_id": call_id, "turn_id": turn_id,
            "tool": tool, "input": json.dumps(tool_input, ensure_ascii=False)})

    async def tool_finished(self, *, conversation_id: str, call_id: str, outcome: str,
                            output: Any = None, error: str | None = None,
                            attempts: int = 1) -> None:
        await self._exec(FINISH_TOOL_CALL, {
            "conversation_id": conversation_id, "call_id": call_id, "outcome": outcome,
            "output": None if output is None else json.dumps(output, ensure_ascii=False),
            "error": error, "attempts": attempts})

    async def close_dangling_calls(self, conversation_id: str, outcome: str) -> None:
        await self._exec(CLOSE_DANGLING_CALLS, {"conversation_id": conversation_id,
                                                "outcome": outcome})

    # confirmations ---------------------------------------------------------------------------

    async def add_confirmation(self, *, confirm_id: str, conversation_id: str, turn_id: str,
                               call_id: str, payload: dict[str, Any],
                               expires_at: datetime) -> None:
        await self._exec(INSERT_CONFIRMATION, {
            "confirm_id": confirm_id, "conversation_id": conversation_id, "turn_id": turn_id,
            "call_id": call_id, "payload": json.dumps(payload, ensure_ascii=False),
            "expires_at": expires_at})

    async def get_confirmation(self, confirm_id: str) -> dict[str, Any] | None:
        return await self._one(GET_CONFIRMATION, {"confirm_id": confirm_id})

    async def pending_confirmation(self, conversation_id: str,
                                   conn: psycopg.AsyncConnection[Any] | None = None
                                   ) -> dict[str, Any] | None:
        return await self._one(PENDING_CONFIRMATION, {"id": conversation_id}, conn)

    async def resolve_confirmation(self, confirm_id: str, status: str,
                                   conn: psycopg.AsyncConnection[Any] | None = None) -> bool:
        """Resolve a pending card; False when someone else resolved it first."""
        row = await self._one(RESOLVE_CONFIRMATION, {"confirm_id": confirm_id,
                                                     "status": status}, conn)
        return row is not None
