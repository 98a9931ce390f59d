"""Leases: the multi-tab gate (docs/protocol.md §4). One Gradio session holds a conversation for
`lease_s`, renewed by its running turn every `lease_s / 3`; the pruner and the orphan sweep
read them too.

A lease is taken under `agentchat.db.conversation_lock` (the pruner checks leases under the
same lock), on the connection holding it.
"""

from __future__ import annotations

from agentchat.agent.storage.conversations import storable_id
from agentchat.agent.storage.db import Db, Row, execute, fetch_one, not_found

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
# The owner's conversation with its lease (NULLs when none was ever taken): no row is
# NOT_FOUND, for a missing and another user's conversation alike.
OWNED_LEASE = """
SELECT l.session_id, l.until, l.until > now() AS active
  FROM conversations c LEFT JOIN leases l ON l.conversation_id = c.id
 WHERE c.id = %(id)s AND c.owner = %(owner)s
"""


async def take_lease(db: Db, conversation_id: str, session: str, secs: float) -> bool:
    """True when the session holds the lease now; a missing conversation raises psycopg's
    ForeignKeyViolation."""
    row = await fetch_one(db, TAKE_LEASE, {"id": conversation_id, "session": session,
                                           "secs": secs})
    return row is not None


async def extend_lease(db: Db, conversation_id: str, session: str, secs: float) -> None:
    await execute(db, EXTEND_LEASE, {"id": conversation_id, "session": session, "secs": secs})


async def owned_lease(db: Db, *, owner: str, conversation_id: str) -> Row | None:
    """The lease of the owner's conversation (None when it never had one); NOT_FOUND for a
    missing and another user's conversation alike."""
    if not storable_id(conversation_id):
        raise not_found()
    row = await fetch_one(db, OWNED_LEASE, {"id": conversation_id, "owner": owner})
    if row is None:
        raise not_found()
    return row if row["until"] is not None else None
