"""A person's conversations as the REST API (docs/protocol.md §9) lists and changes them, held
by the door (`Chat.conversations`): create, list and search, rename, archive and restore, the
append after a stream ends, history, and the multi-tab state a reloaded tab asks for.

The rules an adapter must not rebuild live here: archiving deletes the uploads the
conversation's messages used (attachments.py); history's tool cards are titled from the
catalog as the live stream titled them; "active" is the tab's lease or a live run
(docs/protocol.md §4), read from PostgreSQL so every replica answers alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentchat.agent.chat.attachments import forget_conversation
from agentchat.agent.chat.upload_book import UploadBook
from agentchat.agent.gate.tool_runtime import tool_title
from agentchat.agent.storage import conversations as records
from agentchat.agent.storage import leases, runs
from agentchat.agent.storage import turns as turn_records
from agentchat.agent.storage.db import Db, Row
from agentchat.agent.storage.history import read_history
from agentchat.catalog_source import CatalogSource
from agentchat.words import as_lang


@dataclass(frozen=True)
class ActiveRun:
    run_id: str
    status: str  # running | completed | awaiting_confirmation | failed | cancelled | lost
    last_seq: int


@dataclass(frozen=True)
class TabState:
    """Whether a tab holds the conversation, until when, and its newest run."""

    active: bool
    until: datetime | None
    run: ActiveRun | None


class Conversations:
    def __init__(self, *, pool: Db, catalogs: CatalogSource, run_lost_s: float,
                 uploads: UploadBook) -> None:
        self.pool = pool
        self.uploads = uploads
        self.catalogs = catalogs
        self.run_lost_s = run_lost_s

    async def create(self, *, owner: str, title: str) -> Row:
        return await records.create_conversation(self.pool, owner=owner, title=title)

    async def page(self, *, owner: str, limit: int, after: tuple[datetime, str] | None,
                   q: str | None, include_archived: bool
                   ) -> tuple[list[Row], tuple[datetime, str] | None]:
        """Newest activity first; the key of the next page, None on the last."""
        return await records.list_conversations(self.pool, owner=owner, limit=limit,
                                                after=after, q=q,
                                                include_archived=include_archived)

    async def rename(self, *, owner: str, conversation_id: str, title: str) -> Row:
        return await records.rename_conversation(self.pool, owner=owner,
                                                 conversation_id=conversation_id, title=title)

    async def archive(self, *, owner: str, conversation_id: str) -> Row:
        """Soft delete; the uploads its messages used are deleted (this replica's: the
        owners' book lives in the process, attachments.py)."""
        row = await records.archive_conversation(self.pool, owner=owner,
                                                 conversation_id=conversation_id)
        forget_conversation(self.uploads, conversation_id, owner)
        return row

    async def restore(self, *, owner: str, conversation_id: str) -> Row:
        return await records.restore_conversation(self.pool, owner=owner,
                                                  conversation_id=conversation_id)

    async def append(self, *, owner: str, conversation_id: str, message_id: str, role: str,
                     content: str) -> tuple[Row, bool]:
        """The message, and whether it is new (a stored id is left unchanged)."""
        return await turn_records.append_message(
            self.pool, owner=owner, conversation_id=conversation_id,
            message_id=message_id, role=role, content=content)

    async def history(self, *, owner: str, conversation_id: str, limit: int,
                      before: int | None) -> tuple[list[Row], int | None]:
        """A page of messages, oldest first, and the position of the next (older) page."""
        items, next_pos = await read_history(self.pool, owner=owner,
                                             conversation_id=conversation_id, limit=limit,
                                             before=before)
        catalog = self.catalogs.current()
        for message in items:
            for call in message["tool_calls"]:
                # The title the live stream showed: the catalog's, in the turn's language.
                call["title"] = tool_title(catalog, call["tool"],
                                           as_lang(call.pop("lang", None)))
        return items, next_pos

    async def tab_state(self, *, owner: str, conversation_id: str) -> TabState:
        """Active while a tab's lease holds it or its newest run is live on some replica
        (a run whose replica stopped beating is not); NOT_FOUND for another user's."""
        lease = await leases.owned_lease(self.pool, owner=owner,
                                         conversation_id=conversation_id)
        row: dict[str, Any] | None = await runs.find_run(
            self.pool, owner=owner, conversation_id=conversation_id, run_id=None,
            lost_s=self.run_lost_s)
        run = None if row is None else ActiveRun(run_id=row["id"], status=row["status"],
                                                 last_seq=row["last_seq"])
        live = row is not None and row["status"] == "running" and not row["stale"]
        if lease is None:
            return TabState(active=live, until=None, run=run)
        return TabState(active=bool(lease["active"]) or live, until=lease["until"], run=run)
