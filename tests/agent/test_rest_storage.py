"""The storage layer on its own: the owner check is in each statement's SQL. Another user's
conversation is NOT_FOUND after exactly one statement that names the owner (no fetch of the
row and comparison in Python), with the same error a missing id gets, and nothing changes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

from agentchat.agent.storage import conversations, history, leases, submits, turns
from agentchat.db import CONNECTION_KWARGS
from agentchat.errors import AgentChatError, ErrorCode


class Recording:
    """A connection that remembers the statements run on it (the storage helper runs on a
    connection it is given)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.statements: list[str] = []

    async def execute(self, sql: str, params: Any = None) -> Any:
        self.statements.append(sql)
        return await self.conn.execute(sql, params)

    def transaction(self) -> Any:
        return self.conn.transaction()


CALLS: dict[str, Callable[[Any, str, str], Awaitable[Any]]] = {
    "get": lambda db, owner, cid: conversations.get_conversation(
        db, owner=owner, conversation_id=cid),
    "rename": lambda db, owner, cid: conversations.rename_conversation(
        db, owner=owner, conversation_id=cid, title="taken over"),
    "archive": lambda db, owner, cid: conversations.archive_conversation(
        db, owner=owner, conversation_id=cid),
    "restore": lambda db, owner, cid: conversations.restore_conversation(
        db, owner=owner, conversation_id=cid),
    "append": lambda db, owner, cid: turns.append_message(
        db, owner=owner, conversation_id=cid, message_id="m-bob", role="user",
        content="hello"),
    "history": lambda db, owner, cid: history.read_history(
        db, owner=owner, conversation_id=cid, limit=10),
    "lease": lambda db, owner, cid: leases.owned_lease(db, owner=owner, conversation_id=cid),
}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_another_owner_is_not_found_in_one_owner_scoped_statement(
        database_url: str, call: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, **CONNECTION_KWARGS) as conn:
        conv = await conversations.create_conversation(conn, owner="alice", title="mine")
        await turns.add_message(conn, message_id="m-alice", conversation_id=conv["id"],
                                turn_id=None, role="user", content="first")
        errors = []
        for owner, cid in (("bob", conv["id"]), ("alice", "no-such-conversation")):
            db = Recording(conn)
            with pytest.raises(AgentChatError) as caught:
                await CALLS[call](db, owner, cid)
            # The conversation's advisory lock around it (archive, restore) is not a read.
            reads = [q for q in db.statements if "pg_advisory_" not in q]
            assert len(reads) == 1, db.statements
            assert "owner = %(owner)s" in reads[0]
            errors.append((caught.value.code, caught.value.detail))
        assert errors[0] == errors[1] == (ErrorCode.NOT_FOUND, "no such conversation")

        # alice's conversation is as it was
        again = await conversations.get_conversation(conn, owner="alice",
                                                     conversation_id=conv["id"])
        assert again == conv
        page, _ = await history.read_history(conn, owner="alice", conversation_id=conv["id"],
                                             limit=10)
        assert [m["id"] for m in page] == ["m-alice"]


async def test_titles_are_cut_once_to_the_same_length(database_url: str) -> None:
    long = "слово " * 40
    async with await psycopg.AsyncConnection.connect(database_url, **CONNECTION_KWARGS) as conn:
        by_chat = await conversations.create_conversation(
            conn, owner="alice", title=conversations.title_from(long))
        untitled = await conversations.create_conversation(conn, owner="alice", title="")
        by_append = await conversations.create_conversation(conn, owner="alice", title="")
        # A /chat message on an untitled conversation names it in its own statement.
        opened = await submits.begin_message(
            conn, conversation_id=untitled["id"], owner="alice", tab="tab-1", lease_s=30,
            replica="r1", lost_s=30, turn_id="t1", plan={}, message_id="m0", content=long,
            title=conversations.title_from(long))
        assert opened.started
        await turns.append_message(conn, owner="alice", conversation_id=by_append["id"],
                                   message_id="m1", role="user", content=long)
        titles = [(await conversations.get_conversation(
            conn, owner="alice", conversation_id=c["id"]))["title"]
            for c in (by_chat, untitled, by_append)]
    assert titles == [long[:conversations.TITLE_CHARS]] * 3
    assert len(titles[0]) == 120
