"""A conversation's history for the REST API: messages, newest page first, each with the tool
calls and confirmation cards of its turn, so a reloaded frontend rebuilds its cards.

Where a card goes: a turn (one submit, or a card's resume) records its user message, tool
calls, cards and assistant messages (text before a card, the final answer after it). Each
tool call or card is attached to the turn's first assistant message stored at or after it
(the cards a stream showed before that text), else to the turn's last message (a card still
pending, or a turn that failed before answering). A turn with no message of its own (a
retry that has not answered yet) hangs its cards on the message before it, the one retried.
Each card is on exactly one message, so it appears on exactly one page. A tool call carries its
turn's language (`lang`), so the route can give it its title in the words the stream used.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentchat.agent.storage import branches
from agentchat.agent.storage.conversations import get_conversation
from agentchat.agent.storage.db import Db, Row, connection, fetch_all

PAGE = """
SELECT id, conversation_id, turn_id, role, content, partial, created_at, pos
  FROM messages WHERE conversation_id = %(id)s AND id = ANY(%(branch)s) {after}
 ORDER BY pos DESC LIMIT %(limit)s
"""
BEFORE_POS = "AND pos < %(before)s"
# The next newer message (the previous page's oldest): turns after it are not this page's.
NEXT_NEWER = """
SELECT created_at FROM messages WHERE conversation_id = %(id)s AND pos >= %(before)s
 ORDER BY pos LIMIT 1
"""
TURN_MESSAGES = """
SELECT id, turn_id, role, created_at, pos FROM messages
 WHERE turn_id = ANY(%(turns)s) ORDER BY pos
"""
MESSAGELESS_TURNS = """
SELECT t.id, t.started_at FROM turns t
 WHERE t.conversation_id = %(id)s AND t.started_at >= %(from)s
   AND (%(to)s::timestamptz IS NULL OR t.started_at < %(to)s)
   AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.turn_id = t.id)
"""
TOOL_CALLS = """
SELECT call_id, turn_id, tool, input, output, outcome, error, attempts, started_at,
       finished_at, started_at AS at,
       (SELECT t.plan->>'lang' FROM turns t WHERE t.id = tool_calls.turn_id) AS lang
  FROM tool_calls WHERE conversation_id = %(id)s AND turn_id = ANY(%(turns)s)
 ORDER BY started_at, call_id
"""
CONFIRMATIONS = """
SELECT confirm_id, turn_id, call_id, payload AS card, payload->>'tool_name' AS tool_name,
       CASE WHEN status = 'pending' AND expires_at <= now() THEN 'expired' ELSE status END
           AS status,
       created_at, expires_at, resolved_at, created_at AS at
  FROM confirmations WHERE conversation_id = %(id)s AND turn_id = ANY(%(turns)s)
 ORDER BY created_at, confirm_id
"""


async def read_history(db: Db, *, owner: str, conversation_id: str, limit: int,
                       before: int | None = None) -> tuple[list[Row], int | None]:
    """One page (oldest first within it) of the messages before position `before`, and the
    position the next, older page ends before (None at the start of the conversation)."""
    async with connection(db) as conn:
        await get_conversation(conn, owner=owner, conversation_id=conversation_id)
        # The active branch (docs/protocol.md §4, "Branches"): each message's parent is the one
        # before it on it.
        line = await branches.chain(conn, conversation_id)
        parent_of = {m["id"]: (line[i - 1]["id"] if i else None) for i, m in enumerate(line)}
        params: dict[str, Any] = {"id": conversation_id, "limit": limit + 1, "before": before,
                                  "branch": list(parent_of)}
        rows = await fetch_all(conn, PAGE.format(after="" if before is None else BEFORE_POS),
                               params)
        more = len(rows) > limit
        page = list(reversed(rows[:limit]))
        alternatives: dict[str, list[str]] = {}
        if page:
            await _attach_cards(conn, conversation_id, page, before)
            alternatives = await branches.siblings(
                conn, conversation_id, [parent_of[m["id"]] or "" for m in page])
    for msg in page:
        msg.setdefault("tool_calls", [])
        msg.setdefault("confirmations", [])
        msg["parent_id"] = parent_of[msg["id"]]
        ids = alternatives.get(msg["parent_id"] or "")
        msg["siblings"] = ({"index": ids.index(msg["id"]), "count": len(ids), "ids": ids}
                           if ids and msg["id"] in ids else None)
    return page, (int(page[0]["pos"]) if more else None)


async def _attach_cards(conn: Db, conversation_id: str, page: list[Row],
                        before: int | None) -> None:
    newer_at: datetime | None = None
    if before is not None:
        nxt = await fetch_all(conn, NEXT_NEWER, {"id": conversation_id, "before": before})
        newer_at = nxt[0]["created_at"] if nxt else None
    turns = list(dict.fromkeys(m["turn_id"] for m in page if m["turn_id"]))
    loose = await fetch_all(conn, MESSAGELESS_TURNS, {"id": conversation_id,
                                                 "from": page[0]["created_at"],
                                                 "to": newer_at})
    all_turns = turns + [t["id"] for t in loose]
    if not all_turns:
        return
    params = {"id": conversation_id, "turns": all_turns}
    turn_messages = await fetch_all(conn, TURN_MESSAGES, {"turns": turns}) if turns else []
    calls = await fetch_all(conn, TOOL_CALLS, params)
    cards = await fetch_all(conn, CONFIRMATIONS, params)

    by_turn: dict[str, list[dict[str, Any]]] = {}
    for m in turn_messages:
        by_turn.setdefault(m["turn_id"], []).append(m)
    anchors = {t["id"]: _before(page, t["started_at"]) for t in loose}
    on_page = {m["id"]: m for m in page}
    for key, items in (("tool_calls", calls), ("confirmations", cards)):
        for item in items:
            turn_id = item.pop("turn_id")
            at = item.pop("at")
            target = (anchors.get(turn_id) if turn_id in anchors
                      else _anchor(by_turn.get(turn_id, []), at))
            if target in on_page:
                on_page[target].setdefault(key, []).append(item)


def _anchor(turn_messages: list[dict[str, Any]], at: datetime) -> str | None:
    """The turn's first assistant message stored at or after `at`, else its last message."""
    for m in turn_messages:
        if m["role"] == "assistant" and m["created_at"] >= at:
            return str(m["id"])
    return str(turn_messages[-1]["id"]) if turn_messages else None


def _before(page: list[dict[str, Any]], started_at: datetime) -> str | None:
    """The last message on the page stored at or before the turn started."""
    found = None
    for m in page:
        if m["created_at"] <= started_at:
            found = str(m["id"])
    return found
