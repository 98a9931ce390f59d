"""The trail in PostgreSQL: append under one advisory lock, the retention cut, and reads in
chain order (migration 9 holds the tables, the view and the append-only trigger).

An append is one transaction: `pg_advisory_xact_lock(AUDIT_LOCK)`, the head's (seq, hash),
the database clock, each entry hashed onto the chain, the rows inserted and the head moved.
One chain for every replica, so appends serialize on the lock, held from the head's read to
the commit: two round trips in a pipeline (lock + head; rows + head + commit) and the commit's
WAL flush. Given a connection already in a transaction (a card's answer), the rows commit or
roll back with it. An append made by a run's turn is fenced in the same statement: it adds
nothing once the run's epoch moved on (agent/storage/fencing.py), and raises RunFenced.
There is no UPDATE of a row anywhere; the cut deletes a prefix and moves the head's anchor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, AsyncCursor
from psycopg.types.json import Jsonb

from agentchat.agent.audit.chain import row_hash, timestamp
from agentchat.agent.storage.db import Db, Row, connection, fetch_all, fetch_one
from agentchat.agent.storage.fencing import OWNED, RunFence, current

# A one-key advisory lock (its own space: agentchat.db's locks take two keys or another value).
AUDIT_LOCK = 0x41430003
# `notification`: an approval's notification delivered (docs/protocol.md §11), on its call's record;
# `takeover`: the call was in flight when another replica took its run over (docs/protocol.md §4,
# "Takeover").
STAGES = ("decision", "card", "answer", "execution", "not_run", "notification", "takeover")

LOCK = "SELECT pg_advisory_xact_lock(%(key)s)"
HEAD = "SELECT seq, hash, anchor_seq, anchor_hash, anchor_at, clock_timestamp() AS now " \
       "FROM audit_head WHERE id"
# Read after the lock (its own statement, so its own snapshot: the head is the latest).
HEAD_FOR_APPEND = """
SELECT h.seq, h.hash, clock_timestamp() AS now,
       (SELECT coalesce(jsonb_object_agg(c.id, c.owner), '{}') FROM conversations c
         WHERE c.id = ANY(%(ids)s)) AS owners
  FROM audit_head h WHERE h.id
"""
HAS_STAGES = """
SELECT conversation_id, call_id, stage FROM audit_rows
 WHERE conversation_id = ANY(%(conversations)s) AND call_id = ANY(%(calls)s)
   AND stage = ANY(%(stages)s)
"""
LAST_DECISION = """
SELECT turn_id, tool, environment, args_hash, owner FROM audit_rows
 WHERE conversation_id = %(conversation_id)s AND call_id = %(call_id)s AND stage = 'decision'
 ORDER BY seq DESC LIMIT 1
"""
# The rows exactly as hashed (time as chain.timestamp), and the head moved, in one statement;
# neither when the appending run's epoch moved on (OWNED; outside a run always true): the
# head then moves 0 rows.
INSERT_ROWS = f"""
WITH owned AS (SELECT {OWNED} AS ok),
rows AS (
    INSERT INTO audit_rows
    SELECT r.* FROM jsonb_populate_recordset(NULL::audit_rows, %(rows)s) AS r, owned
     WHERE owned.ok
)
UPDATE audit_head SET seq = %(seq)s, hash = %(hash)s FROM owned WHERE id AND owned.ok
"""
# The cut: the prefix ends before the oldest row at or after the cutoff (rows are appended
# under one lock with the database's clock, so `at` grows with `seq`; the min keeps it a
# prefix even if the clock stepped back).
CUT_END = """
SELECT coalesce((SELECT min(seq) - 1 FROM audit_rows WHERE at >= %(before)s),
                (SELECT max(seq) FROM audit_rows)) AS seq
"""
# A conversation's audited calls with neither an execution nor a not_run row: in flight (or
# confirmed and not yet sent) when their run changed hands. Each call's newest decision.
IN_FLIGHT = """
SELECT DISTINCT ON (d.call_id) d.turn_id, d.call_id, d.tool, d.environment, d.args_hash
  FROM audit_rows d
 WHERE d.conversation_id = %(conversation_id)s AND d.stage = 'decision'
   AND NOT EXISTS (SELECT 1 FROM audit_rows e
                    WHERE e.conversation_id = d.conversation_id AND e.call_id = d.call_id
                      AND e.stage IN ('execution', 'not_run'))
 ORDER BY d.call_id, d.seq DESC
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
class CallRef:
    """The columns every row of one call carries. `owner`: None for the conversation's
    (looked up when the rows are appended); a call outside a conversation (an MCP call) names
    its requester."""

    conversation_id: str
    turn_id: str
    call_id: str
    tool: str
    environment: str | None
    args_hash: str
    owner: str | None = None

    def entry(self, stage: str, detail: dict[str, Any], *, once: bool = False) -> Entry:
        return Entry(stage=stage, call=self, detail=detail, once=once)


@dataclass(frozen=True)
class Entry:
    """One stage of one call, before it is placed on the chain (owner, seq, time and hashes
    are the store's)."""

    stage: str
    call: CallRef
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


@dataclass(frozen=True)
class Placing:
    """An append's reads, sent but not yet awaited (the lock, the head, the stages some calls
    already have), so a caller can send them with its own statements in one round trip."""

    head: AsyncCursor[Row]
    seen: AsyncCursor[Row] | None


async def place(conn: AsyncConnection[Any], conversations: list[str],
                once: list[tuple[str, str, str]]) -> Placing:
    """Take the trail's lock and ask for the head; `once`: the (conversation, call, stage)
    keys of entries that are skipped when the call already has such a row."""
    await conn.execute(LOCK, {"key": AUDIT_LOCK})
    head = await conn.execute(HEAD_FOR_APPEND, {"ids": sorted(set(conversations))})
    seen = await conn.execute(HAS_STAGES, {
        "conversations": sorted({k[0] for k in once}), "calls": sorted({k[1] for k in once}),
        "stages": sorted({k[2] for k in once})}) if once else None
    return Placing(head, seen)


async def insert_rows(placing: Placing, entries: list[Entry], fence: RunFence | None = None
                      ) -> tuple[str, dict[str, Any], int] | None:
    """The entries hashed onto the chain as one statement (INSERT_ROWS and its parameters,
    fenced by `fence`, by default the current run's) and how many rows it adds; None when
    every entry was there already."""
    head = await placing.head.fetchone()
    assert head is not None, "migration 9 seeds the head"
    seen = {(r["conversation_id"], r["call_id"], r["stage"])
            for r in (await placing.seen.fetchall() if placing.seen is not None else [])}
    seq, last, at = int(head["seq"]), str(head["hash"]), timestamp(head["now"])
    rows: list[dict[str, Any]] = []
    for e in entries:
        call = e.call
        key = (call.conversation_id, call.call_id, e.stage)
        if e.once:
            if key in seen:
                continue
            seen.add(key)
        row: dict[str, Any] = clean({
            "seq": seq + 1, "at": at, "stage": e.stage,
            "conversation_id": call.conversation_id,
            "owner": call.owner if call.owner is not None
            else head["owners"].get(call.conversation_id, ""), "turn_id": call.turn_id,
            "call_id": call.call_id, "tool": call.tool, "environment": call.environment,
            "args_hash": call.args_hash, "detail": e.detail, "prev_hash": last})
        row["hash"] = row_hash(row)
        rows.append(row)
        seq, last = seq + 1, row["hash"]
    if not rows:
        return None
    return INSERT_ROWS, {"rows": Jsonb(rows), "seq": seq, "hash": last,
                         **(fence or current()).params()}, len(rows)


async def append(db: Db, entries: list[Entry], fence: RunFence | None = None) -> int:
    """Put the entries on the chain, in order; how many were appended. Made by a run (`fence`,
    by default the current run's): RunFenced, and nothing appended, once it is another's."""
    if not entries:
        return 0
    fence = fence or current()
    fence.check()
    once = [(e.call.conversation_id, e.call.call_id, e.stage) for e in entries if e.once]
    async with connection(db) as conn:
        async with conn.pipeline(), conn.transaction():
            placing = await place(conn, [e.call.conversation_id for e in entries], once)
            statement = await insert_rows(placing, entries, fence)
            if statement is None:
                return 0
            moved = await conn.execute(statement[0], statement[1])
        # Read once the pipeline synced (no extra round trip): the head moved, or the run
        # was another's and nothing was appended.
        if moved.rowcount != 1:
            raise fence.refused()
        return statement[2]


def send_last_decision(conn: AsyncConnection[Any], conversation_id: str,
                       call_id: str) -> Awaitable[AsyncCursor[Row]]:
    """`last_decision`, sent (in a caller's pipeline); its row from the cursor."""
    return conn.execute(LAST_DECISION, {"conversation_id": conversation_id, "call_id": call_id})


def ref_from_row(row: Row | None, conversation_id: str, call_id: str) -> CallRef | None:
    if row is None:
        return None
    return CallRef(conversation_id, str(row["turn_id"]), call_id, str(row["tool"]),
                   row["environment"], str(row["args_hash"]), row.get("owner"))


async def last_decision(db: Db, conversation_id: str, call_id: str) -> Row | None:
    """The call's newest decision row (tool, environment, args_hash, turn): a call is audited
    exactly when it has one or was refused before the sidecar."""
    return await fetch_one(db, LAST_DECISION, {"conversation_id": conversation_id,
                                               "call_id": call_id})


async def in_flight(db: Db, conversation_id: str) -> list[CallRef]:
    """The conversation's audited calls that have not ended (IN_FLIGHT)."""
    rows = await fetch_all(db, IN_FLIGHT, {"conversation_id": conversation_id})
    return [CallRef(conversation_id, str(r["turn_id"]), str(r["call_id"]), str(r["tool"]),
                    r["environment"], str(r["args_hash"])) for r in rows]


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
