"""What a person may read of the audit trail (docs/protocol.md §9, `GET /api/agent/audit`),
held by the door (`Chat.audit_log`): their own records, and those of the environments the
audit role gives them. Who sees what and the filters are SQL in agent/audit/records.py."""

from __future__ import annotations

from datetime import datetime

from agentchat.agent.audit.records import Filters, Viewer, list_records
from agentchat.agent.storage.db import Db, Row
from agentchat.identity import Principal


class AuditLog:
    def __init__(self, *, pool: Db, audit_role: str) -> None:
        self.pool = pool
        self.audit_role = audit_role

    async def page(self, viewer: Principal, *, conversation_id: str | None = None,
                   user: str | None = None, tool: str | None = None,
                   environment: str | None = None, since: datetime | None = None,
                   until: datetime | None = None, limit: int, before: int | None
                   ) -> tuple[list[Row], int | None]:
        """One page, newest first, and the key of the next (None on the last page)."""
        filters = Filters(conversation_id=conversation_id, user=user, tool=tool,
                          environment=environment, since=since, until=until)
        return await list_records(self.pool, viewer=Viewer.of(viewer, self.audit_role),
                                  filters=filters, limit=limit, before=before)
