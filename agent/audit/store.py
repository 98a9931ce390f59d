"""The trail in PostgreSQL: append under one advisory lock, the retention cut, and reads in
chain order (migration 9 holds the tables, the view and the append-only trigger).

An append is one transaction: `pg_advisory_xact_lock(AUDIT_LOCK)`, the head's (seq, hash),
the database clock, each entry hashed onto the chain, the rows inserted and the head moved.
One chain for every replica, so appends serialize: ~1 ms each, a few per risky call. Given a
connection already in a transaction (a card's answer), the rows commit or roll back with it.
There is no UPDATE of a row anywhere; the cut deletes a prefix and moves the head's anchor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from agentchat.agent.audit.chain import row_hash
from agentchat.agent.storage.db import Db, Row, connection, fetch_one

# A one-key advisory lock (its own space: agentchat.db's locks take two keys or another value).
AUDIT_LOCK = 0x41430003
STAGES = ("decision", "card", "answer", "execution", "not_run")

LOCK = "SELECT pg_advisory_xact_lock(%(key)s)"
HEAD = "SELECT seq, hash, anchor_seq, anchor_hash, anchor_at, clock_timestamp() AS now " \
       "FROM audit_head WHERE id"
OWNERS = "SELECT id, owner FROM conversations WHERE id = ANY(%(ids)s)"
HAS_STAGE = """
SELECT 1 FROM audit_rows
 WHERE conversation_id = %(conversation_id)s AND call_id = %(call_id)s AND stage = %(stage)s
 LIMIT 1
"""
LAST_DECISION = """
SELECT turn_id, tool, environment, args_hash FROM audit_rows
 WHERE conversation_id = %(conversation_id)s AND call_id = %(call_id)s AND stage = 'decision'
 ORDER BY seq DESC LIMIT 1
"""
INSERT_ROW = """
INSERT INTO audit_rows (seq, at, stage, conversation_id, owner, turn_id, call_id, tool,
                        environment, args_hash, detail, prev_hash, hash)
VALUES (%(seq)s, %(at)s, %(stage)s, %(conversation_id)s, %(owner)s, %(turn_id)s, %(call_id)s,
        %(tool)s, %(environment)s, %(args_hash)s, %(detail)s, %(prev_hash)s, %(hash)s)
"""
MOVE_HEAD = "UPDATE audit_head SET seq = %(seq)s, hash = %(hash)s WHERE id"
# The cut: the prefix ends before the oldest row at or after the cutoff (rows are appended
# under one lock with the database's clock, so `at` grows with `seq`; the min keeps it a
# prefix even if the clock stepped back).
CUT_END = """
SELECT coalesce((SELECT min(seq) - 1 FROM audit_rows WHERE at >= %(before)s),
                (SELECT max(seq) FROM audit_rows)) AS seq
"""
ROW_HASH = "SELECT hash FROM audit_rows WHERE seq = %(seq)s"
ALLOW_CUT = "SELECT set_config('agentchat.audit_cut', 'on', true)"
DELETE_PREFIX = "DELETE FROM audit_rows WHERE seq <= %(seq)s"
MOVE_ANCHOR = """
UPDATE audit_head SET anchor_seq = %(seq)s, anchor_hash = %(hash)s, anchor_at = %(at)s WHERE id
"""
ROWS_FROM = """
SELECT seq, at, stage, conversation_id, owner, turn_id, call_id, tool, environment, args_hash,
       detail, prev_hash, hash
  FROM audit_rows WHERE seq > %(after)s ORDER BY seq LIMIT %(limit)s
"""
WINDOW = """
SELECT min(seq) AS first, max(seq) AS last FROM audit_rows
 WHERE at >= %(since)s AND at < %(until)s
"""


@dataclass(frozen=True)
class Entry:
    """One stage of one call, before it is placed on the chain (owner, seq, time and hashes
    are the store's)."""

    stage: str
    conversation_id: str
    turn_id: str
    call_id: str
    tool: str
    environment: str | None
    args_hash: str
    detail: dict[str, Any] = field(default_factory=dict)
    once: bool = False  # skip it when the call already has a row of this stage

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"unknown audit stage {self.stage!r}")


def clean(value: Any) -> Any:
    """PostgreSQL text cannot hold NUL: replaced before hashing, so what is hashed is stored."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


async def append(db: Db, entries: list[Entry]) -> int:
    """Put the entries on the chain, in order; how many were appended."""
    if not entries:
        return 0
    async with connection(db) as conn, conn.transaction():
        await conn.execute(LOCK, {"key": AUDIT_LOCK})
        head = await (await conn.execute(HEAD)).fetchone()
        assert head is not None, "migration 9 seeds the head"
        ids = sorted({e.conversation_id for e in entries})
        owners = {r["id"]: r["owner"]
                  for r in await (await conn.execute(OWNERS, {"ids": ids})).fetchall()}
        seq, last = int(head["seq"]), str(head["hash"])
        appended = 0
        for e in entries:
            if e.once and await (await conn.execute(HAS_STAGE, {
                    "conversation_id": e.conversation_id, "call_id": e.call_id,
                    "stage": e.stage})).fetchone():
                continue
            row: dict[str, Any] = clean({
                "seq": seq + 1, "at": head["now"], "stage": e.stage,
                "conversation_id": e.conversation_id,
                "owner": owners.get(e.conversation_id, ""), "turn_id": e.turn_id,
                "call_id": e.call_id, "tool": e.tool, "environment": e.environment,
                "args_hash": e.args_hash, "detail": e.detail, "prev_hash": last})
            row["hash"] = row_hash(row)
            await conn.execute(INSERT_ROW, {**row, "detail": Jsonb(row["detail"])})
            seq, last = seq + 1, row["hash"]
            appended += 1
        if appended:
            await conn.execute(MOVE_HEAD, {"seq": seq, "hash": last})
        return appended


async def last_decision(db: Db, conversation_id: str, call_id: str) -> Row | None:
    """The call's newest decision row (tool, environment, args_hash, turn): a call is audited
    exactly when it has one or was refused before the sidecar."""
    return await fetch_one(db, LAST_DECISION, {"conversation_id": conversation_id,
                                               "call_id": call_id})


async def head(db: Db) -> Row:
    row = await fetch_one(db, HEAD, {})
    assert row is not None, "migration 9 seeds the head"
    return row


async def cut(db: Db, before: datetime) -> dict[str, Any]:
    """Retention: delete the chain's prefix older than `before`, keep its last hash as the
    anchor `verify` starts from. Returns {deleted, anchor_seq}."""
    async with connection(db) as conn, conn.transaction():
        await conn.execute(LOCK, {"key": AUDIT_LOCK})
        now = await (await conn.execute(HEAD)).fetchone()
        assert now is not None
        end = (await (await conn.execute(CUT_END, {"before": before})).fetchone() or {})
        upto = end.get("seq")
        if upto is None or int(upto) <= int(now["anchor_seq"]):
            return {"deleted": 0, "anchor_seq": int(now["anchor_seq"])}
        anchor = await (await conn.execute(ROW_HASH, {"seq": upto})).fetchone()
        assert anchor is not None, "the chain has no gap below its head"
        await conn.execute(ALLOW_CUT)
        cur = await conn.execute(DELETE_PREFIX, {"seq": upto})
        await conn.execute(MOVE_ANCHOR, {"seq": upto, "hash": anchor["hash"], "at": now["now"]})
        return {"deleted": cur.rowcount, "anchor_seq": int(upto)}


async def rows_after(db: Db, after: int, *, until_seq: int | None = None,
                     batch: int = 1000) -> AsyncIterator[Row]:
    """Rows in chain order after `after` (up to `until_seq`), read in keyset batches."""
    while True:
        async with connection(db) as conn:
            got = await (await conn.execute(ROWS_FROM, {"after": after,
                                                        "limit": batch})).fetchall()
        for row in got:
            if until_seq is not None and row["seq"] > until_seq:
                return
            yield row
        if len(got) < batch:
            return
        after = int(got[-1]["seq"])


async def window(db: Db, since: datetime, until: datetime) -> tuple[int, int] | None:
    """(first, last) seq of the rows appended in [since, until), or None."""
    row = await fetch_one(db, WINDOW, {"since": since, "until": until})
    if row is None or row["first"] is None:
        return None
    return int(row["first"]), int(row["last"])
