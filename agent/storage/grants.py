"""Time-boxed grants (docs/protocol.md §11): an approver's "approve, and for the next
N minutes the same requester's calls of this tool, in this environment, with these arguments
(all but the catalog's free text: `object_key`) need no second approval". A grant covers a call
only while it is live (not expired, not revoked); a revoke takes effect at the next check,
which is every call's.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import psycopg

from agentchat.agent.storage.db import Db, Row, fetch_all, fetch_one
from agentchat.digest import OBJECT_KEY_VERSION

Conn = psycopg.AsyncConnection[Any]

ADD = """
INSERT INTO approval_grants (grant_id, approval_id, requester, tool, environment, object_key,
                             granted_by, expires_at)
VALUES (%(id)s, %(approval_id)s, %(requester)s, %(tool)s, %(environment)s, %(object_key)s,
        %(granted_by)s, now() + make_interval(mins => %(minutes)s))
RETURNING *
"""
# The conversation's owner is the requester: a grant covers only their own calls.
COVERING = """
SELECT g.grant_id FROM approval_grants g JOIN conversations c ON c.owner = g.requester
 WHERE c.id = %(cid)s AND g.tool = %(tool)s AND g.environment IS NOT DISTINCT FROM %(env)s
   AND g.object_key = %(key)s AND g.revoked_at IS NULL AND g.expires_at > now()
 ORDER BY g.expires_at DESC LIMIT 1
"""
# The same, for a requester named directly (a call outside a conversation: an MCP call).
COVERING_REQUESTER = """
SELECT g.grant_id FROM approval_grants g
 WHERE g.requester = %(requester)s AND g.tool = %(tool)s
   AND g.environment IS NOT DISTINCT FROM %(env)s
   AND g.object_key = %(key)s AND g.revoked_at IS NULL AND g.expires_at > now()
 ORDER BY g.expires_at DESC LIMIT 1
"""
# Live: it covers calls now. A key of an older form (agentchat/digest.py) matches no call's,
# so such a grant is listed as not live.
LIVE = (f"(revoked_at IS NULL AND expires_at > now() AND starts_with(object_key, "
        f"'{OBJECT_KEY_VERSION}')) AS live")
LIST = f"""
SELECT *, {LIVE} FROM approval_grants
 WHERE requester = %(me)s OR granted_by = %(me)s
 ORDER BY created_at DESC, grant_id DESC LIMIT 200
"""
REVOKE = f"""
UPDATE approval_grants SET revoked_at = coalesce(revoked_at, now())
 WHERE grant_id = %(id)s AND (requester = %(me)s OR granted_by = %(me)s)
RETURNING *, {LIVE}
"""


async def add_grant(conn: Conn, *, approval_id: str, requester: str, tool: str,
                    environment: str | None, object_key: str, granted_by: str,
                    minutes: int) -> Row | None:
    return await fetch_one(conn, ADD, {
        "id": str(uuid.uuid4()), "approval_id": approval_id, "requester": requester,
        "tool": tool, "environment": environment, "object_key": object_key,
        "granted_by": granted_by, "minutes": minutes})


async def covering(db: Db, conversation_id: str, tool: str, environment: str | None,
                   key: str) -> str | None:
    """The live grant covering this call of the conversation's owner, if any."""
    row = await fetch_one(db, COVERING, {"cid": conversation_id, "tool": tool,
                                         "env": environment, "key": key})
    return None if row is None else str(row["grant_id"])


async def covering_requester(db: Db, requester: str, tool: str, environment: str | None,
                             key: str) -> str | None:
    """The live grant covering this call of `requester`, if any."""
    row = await fetch_one(db, COVERING_REQUESTER, {"requester": requester, "tool": tool,
                                                   "env": environment, "key": key})
    return None if row is None else str(row["grant_id"])


async def list_grants(db: Db, me: str) -> list[Row]:
    return await fetch_all(db, LIST, {"me": me})


async def revoke(db: Db, grant_id: str, me: str) -> Row | None:
    return await fetch_one(db, REVOKE, {"id": grant_id, "me": me})


def as_item(row: Row) -> dict[str, Any]:
    expires: datetime = row["expires_at"]
    return {k: row[k] for k in ("grant_id", "approval_id", "requester", "tool", "environment",
                                "object_key", "granted_by", "created_at", "revoked_at",
                                "live")} | {"expires_at": expires}
