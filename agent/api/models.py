"""Bodies of the Conversations REST API (docs/protocol.md §9), shared by the routes and the OpenAPI
schema that schemathesis checks the responses against.

Strings that reach PostgreSQL carry a `pattern` refusing NUL: text columns cannot hold it, and
the schema says so, so a client (or a fuzzer) learns it from the schema and gets 422, not 500.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from agentchat.errors import ErrorCode

NO_NUL = r"^[^\x00]*$"
NOT_BLANK = r"^[^\x00]*[^\s\x00][^\x00]*$"
MAX_TITLE = 200
# Far above the chat's 16 KB input: an assistant's final answer can be long, and a replay of
# it must not be refused before its id is looked up.
MAX_CONTENT = 256 * 1024

Title = Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_TITLE,
                                         pattern=NO_NUL)]
NewTitle = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                            max_length=MAX_TITLE, pattern=NOT_BLANK)]
Role = Literal["user", "assistant"]


class ErrorBody(BaseModel):
    """Every REST error (docs/protocol.md §5)."""

    code: ErrorCode
    detail: str


class ConversationCreate(BaseModel):
    title: Title = ""


class ConversationRename(BaseModel):
    title: NewTitle


class Conversation(BaseModel):
    id: str = Field(description="the LangGraph thread_id; /chat's conversation_id")
    title: str
    created_at: datetime
    last_activity_at: datetime
    is_archived: bool
    archived_at: datetime | None


class ConversationPage(BaseModel):
    items: list[Conversation]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; "
                                                "null on the last page")


class MessageIn(BaseModel):
    """Append after the stream's end (docs/protocol.md §9). `id` is the client's id, or the
    final event's `message_id` (then the message exists and the call changes nothing)."""

    id: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=NO_NUL)]
    role: Role
    content: Annotated[str, StringConstraints(max_length=MAX_CONTENT, pattern=NO_NUL)]


class Message(BaseModel):
    id: str
    conversation_id: str
    turn_id: str | None
    role: Role
    content: str
    partial: bool = Field(description="the answer was cut short (cancel or failure)")
    created_at: datetime


class ToolCallRecord(BaseModel):
    """One tool card: what `tool_start` … `tool_end` / `tool_error` / `tool_timeout` showed."""

    call_id: str
    tool: str
    title: str = Field(description="the tool's title for people, in the turn's language, as "
                                   "the live stream's tool events had it")
    input: dict[str, Any]
    output: Any = None
    outcome: str = Field(description="the call's status: running | ok | error | timeout | "
                                     "denied | cancelled")
    error: str | None
    attempts: int
    started_at: datetime
    finished_at: datetime | None


class ConfirmationRecord(BaseModel):
    """One confirmation card and how it ended; `card` is the `confirm_required` payload."""

    confirm_id: str
    call_id: str
    tool_name: str | None
    status: str = Field(description="pending | confirmed | denied | expired (a pending card "
                                    "past its expiry is reported as expired)")
    created_at: datetime
    expires_at: datetime
    resolved_at: datetime | None
    card: dict[str, Any]


class Siblings(BaseModel):
    """A message's alternatives (docs/protocol.md §4, "Branches"): what a branch picker shows."""

    index: int = Field(description="this message's place among them, from 0")
    count: int
    ids: list[str] = Field(description="the alternatives' ids, oldest first")


class HistoryMessage(Message):
    parent_id: str | None = Field(
        default=None, description="the message before it on the active branch; null first")
    siblings: Siblings | None = Field(
        default=None, description="the message's alternatives (edits, regenerations), when "
                                  "it has any; POST …/branch with one of `ids` shows it")
    tool_calls: list[ToolCallRecord] = Field(
        description="the cards of this message's turn that came before it (or, for the "
                    "turn's last message, also after it)")
    confirmations: list[ConfirmationRecord]


class HistoryPage(BaseModel):
    items: list[HistoryMessage] = Field(description="oldest first within the page; the first "
                                                    "page holds the newest messages")
    next_cursor: str | None = Field(description="older messages; null when none are left")
