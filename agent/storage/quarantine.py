"""Upstream tools in quarantine (agent/gate/upstream_pins.py): a catalog tool whose MCP server
no longer serves the definition its pin names. One row per (server, tool, pin) the server
failed, shared by every replica: a call is sent only when no row names its tool's key (one
read by primary key), and a tool list leaves out what the rows name.

A row is the evidence too: what the server served instead (its pin and pinned fields; both
NULL when the tool was gone), when it was first and last seen. It is deleted when the server
serves the pinned definition again; a catalog that pins the tool anew names another key, so
the old row matches no tool (it stays as the record; should that pin come back, the tool is
held until a refresh finds it served again).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from agentchat.agent.storage.db import Db, connection, fetch_all, fetch_one

Key = tuple[str, str, str]  # server, tool (its name on the server), pin

QUARANTINE = """
INSERT INTO upstream_quarantine AS q (server, tool, pin, observed, definition)
VALUES (%(server)s, %(tool)s, %(pin)s, %(observed)s, %(definition)s)
ON CONFLICT (server, tool, pin) DO UPDATE
   SET observed = EXCLUDED.observed, definition = EXCLUDED.definition, last_seen = now()
RETURNING (xmax = 0) AS added
"""
# Only evidence older than the read that found the pin served again: a replica that saw the
# change after that read began keeps its row.
LIFT = """
DELETE FROM upstream_quarantine
 WHERE server = %(server)s AND tool = %(tool)s AND pin = %(pin)s AND last_seen < %(before)s
RETURNING server
"""
HELD = """
SELECT 1 AS held FROM upstream_quarantine
 WHERE server = %(server)s AND tool = %(tool)s AND pin = %(pin)s
"""
ALL = "SELECT server, tool, pin FROM upstream_quarantine"
NOW = "SELECT clock_timestamp() AS now"
ROWS = """
SELECT server, tool, pin, observed, definition, first_seen, last_seen FROM upstream_quarantine
 ORDER BY server, tool, first_seen
"""


async def quarantine(db: Db, key: Key, observed: str | None,
                     definition: dict[str, Any] | None) -> bool:
    """Record a failed pin (again: its last sighting); True when it was not held before."""
    server, tool, pin = key
    row = await fetch_one(db, QUARANTINE, {
        "server": server, "tool": tool, "pin": pin, "observed": observed,
        "definition": Jsonb(definition) if definition is not None else None})
    return bool(row and row["added"])


async def lift(db: Db, keys: Iterable[Key], *, before: datetime) -> list[Key]:
    """The keys whose pin the server served again in a read that began at `before` (the
    database's clock): no longer held. Returns those that were."""
    lifted = []
    async with connection(db) as conn:
        for server, tool, pin in keys:
            cur = await conn.execute(LIFT, {"server": server, "tool": tool, "pin": pin,
                                            "before": before})
            if await cur.fetchone() is not None:
                lifted.append((server, tool, pin))
    return lifted


async def held(db: Db, key: Key) -> bool:
    server, tool, pin = key
    return await fetch_one(db, HELD, {"server": server, "tool": tool, "pin": pin}) is not None


async def held_keys(db: Db) -> frozenset[Key]:
    return frozenset((r["server"], r["tool"], r["pin"]) for r in await fetch_all(db, ALL, {}))


async def rows(db: Db) -> list[dict[str, Any]]:
    """Every row, evidence included (the CLI, tests)."""
    return await fetch_all(db, ROWS, {})


async def db_now(db: Db) -> datetime:
    """The database's clock (what `last_seen` is written by)."""
    row = await fetch_one(db, NOW, {})
    assert row is not None
    return row["now"]  # type: ignore[no-any-return]
