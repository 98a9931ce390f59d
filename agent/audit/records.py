"""The joined record per call (the `audit_records` view), as GET /api/agent/audit reads it.

Who sees what is decided in the SQL: the owner sees the records of their conversations; the
audit role (`AGENTCHAT_AGENT_AUDIT_ROLE`) held without an environment sees every record, held
as `role@env` the records of that environment. Every row of a call carries the same owner,
tool and environment, so the filters and the visibility apply to rows (their indexes), and
the page's records are then read from the view by their keys.

Order: newest record first by its first row (`first_seq DESC`), keyset-paged. A page walks
the rows newest first and keeps the first row of each call (no earlier row of the same call:
one probe of `audit_rows_call`), so it reads about a page's records' rows, not the table's;
the time filters apply to that first row. After a retention cut a record's first row is the
oldest one left, as in the view.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentchat.agent.storage.db import Db, Row, connection
from agentchat.identity import Principal

_VISIBLE = "(owner = %(viewer)s OR %(all_envs)s OR environment = ANY(%(envs)s))"
PAGE_KEYS = """
SELECT r.conversation_id, r.call_id, r.seq AS first_seq
  FROM audit_rows r
 WHERE (r.owner = %(viewer)s OR %(all_envs)s OR r.environment = ANY(%(envs)s))
   AND (%(conversation_id)s::text IS NULL OR r.conversation_id = %(conversation_id)s)
   AND (%(user)s::text IS NULL OR r.owner = %(user)s)
   AND (%(tool)s::text IS NULL OR r.tool = %(tool)s)
   AND (%(environment)s::text IS NULL OR r.environment = %(environment)s)
   AND (%(before)s::bigint IS NULL OR r.seq < %(before)s)
   AND (%(since)s::timestamptz IS NULL OR r.at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR r.at < %(until)s)
   AND NOT EXISTS (SELECT 1 FROM audit_rows p
                    WHERE p.conversation_id = r.conversation_id AND p.call_id = r.call_id
                      AND p.seq < r.seq)
 ORDER BY r.seq DESC
 LIMIT %(limit)s
"""
RECORDS = f"""
SELECT conversation_id, call_id, turn_id, owner, tool, environment, args_hash, decision_id,
       outcome, started_at, updated_at, first_seq, stages
  FROM audit_records
 WHERE conversation_id = ANY(%(conversations)s) AND call_id = ANY(%(calls)s) AND {_VISIBLE}
"""


@dataclass(frozen=True)
class Viewer:
    """Who asks: their own records, and the environments the audit role gives them."""

    sub: str
    all_envs: bool
    envs: tuple[str, ...]

    @classmethod
    def of(cls, principal: Principal, audit_role: str) -> Viewer:
        held = [env for role, env in principal.roles if role == audit_role]
        return cls(principal.sub, None in held, tuple(sorted(e for e in held if e)))


@dataclass(frozen=True)
class Filters:
    conversation_id: str | None = None
    user: str | None = None
    tool: str | None = None
    environment: str | None = None
    since: datetime | None = None
    until: datetime | None = None


async def list_records(db: Db, *, viewer: Viewer, filters: Filters, limit: int,
                       before: int | None) -> tuple[list[Row], int | None]:
    """One page of records and the key of the next (None on the last page)."""
    see = {"viewer": viewer.sub, "all_envs": viewer.all_envs, "envs": list(viewer.envs)}
    async with connection(db) as conn:
        keys = await (await conn.execute(PAGE_KEYS, {
            **see, **filters.__dict__, "before": before, "limit": limit + 1})).fetchall()
        more = len(keys) > limit
        keys = keys[:limit]
        if not keys:
            return [], None
        got = await (await conn.execute(RECORDS, {
            **see, "conversations": sorted({k["conversation_id"] for k in keys}),
            "calls": sorted({k["call_id"] for k in keys})})).fetchall()
    by_key = {(r["conversation_id"], r["call_id"]): r for r in got}
    page = [_record(by_key[(k["conversation_id"], k["call_id"])]) for k in keys
            if (k["conversation_id"], k["call_id"]) in by_key]
    return page, int(keys[-1]["first_seq"]) if more else None


def _record(row: Row) -> dict[str, Any]:
    out = dict(row)
    out.pop("first_seq", None)
    out["stages"] = [{**s, "detail": s.get("detail") or {}} for s in row["stages"] or []]
    # The branch its first row names (docs/protocol.md §4, "Branches"); null for records from before
    # branches.
    out["branch"] = next((s["detail"]["branch"] for s in out["stages"]
                          if "branch" in s["detail"]), None)
    return out
