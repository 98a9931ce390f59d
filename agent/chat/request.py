"""What one submit asks of the chat domain (`Chat.submit`, `Chat.join`), whatever adapter
parsed it (gradio/inputs.py parses `/chat`'s seven inputs, docs/protocol.md §1)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ACTIONS = {None, "confirm", "deny", "retry", "join", "edit", "regenerate"}
FORKS = ("edit", "regenerate")  # a new branch from a checkpoint (docs/protocol.md §4, "Branches")
ID_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class UIContext(BaseModel):
    model_config = ConfigDict(extra="forbid")

    objectType: str | None = Field(default=None, pattern="^(dashboard|dataset|migration)$")
    objectId: str | None = Field(default=None, max_length=64)
    objectName: str | None = Field(default=None, max_length=300)
    envId: str | None = Field(default=None, max_length=64)
    route: str | None = Field(default=None, max_length=500)
    contextVersion: int


@dataclass
class ChatRequest:
    text: str
    action: str | None
    conversation_id: str | None
    uicontext: dict[str, Any] | None
    user_id: str | None
    user_jwt: str | None
    env_id: str | None
    confirm_id: str | None = None
    # docs/protocol.md §4 "Runs": the run to join and the last seq the client has; the
    # browser tab that holds the lease (stable across reconnects).
    run_id: str | None = None
    last_seq: int = 0
    tab_id: str | None = None
    # An edit's user message, a regenerate's answer (docs/protocol.md §4, "Branches").
    message_id: str | None = None
    files: list[dict[str, Any]] = field(default_factory=list)
    # A confirm of a batched card (docs/protocol.md §11): the call ids that run; the rest are
    # denied.
    approve: list[str] | None = None
    attached: str = ""  # the files as the model reads them, once read (file_text)
    # Set only by chat/approvals.py, never parsed from a client: the approvers' decision
    # (`approval_id`, the sidecar's `decision` on the last approver) this resume carries.
    approved: dict[str, Any] | None = None
