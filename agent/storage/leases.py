"""Leases: the multi-tab gate (docs/protocol.md §4). One tab holds a conversation for `lease_s`,
renewed by its running turn every `lease_s / 3`; the pruner and the orphan sweep read them
too. A lease is taken by a submit's own statement (submits.py). The column is still named
`session_id` (a tab id, or the Gradio session hash standing in for one): renaming it would
break the replicas of the previous release during a rolling upgrade.

A lease is taken under `agentchat.db.conversation_lock` (the pruner checks leases under the
same lock), on the connection holding it.
"""

from __future__ import annotations

from agentchat.agent.storage.conversations import storable_id
from agentchat.agent.storage.db import Db, Row, execute, fetch_one, not_found

EXTEND_LEASE = """
UPDATE leases SET until = now() + make_interval(secs => %(secs)s)
 WHERE conversation_id = %(id)s AND session_id = %(tab)s
"""
# The owner's conversation with its lease (NULLs when none was ever taken): no row is
# NOT_FOUND, for a missing and another user's conversation alike.
OWNED_LEASE = """
SELECT l.session_id, l.until, l.until > now() AS active
  FROM conversations c LEFT JOIN leases l ON l.conversation_id = c.id
 WHERE c.id = %(id)s AND c.owner = %(owner)s
"""


async def extend_lease(db: Db, conversation_id: str, tab: str, secs: float) -> None:
    await execute(db, EXTEND_LEASE, {"id": conversation_id, "tab": tab, "secs": secs})


async def owned_lease(db: Db, *, owner: str, conversation_id: str) -> Row | None:
    """The lease of the owner's conversation (None when it never had one); NOT_FOUND for a
    missing and another user's conversation alike."""
    if not storable_id(conversation_id):
        raise not_found()
    row = await fetch_one(db, OWNED_LEASE, {"id": conversation_id, "owner": owner})
    if row is None:
        raise not_found()
    return row if row["until"] is not None else None
