"""Opaque keyset cursors for the REST API's pages.

A cursor is the sort key of the last row a page returned, tagged with what it pages, as
URL-safe base64 JSON. Keyset (not offset) pagination: a row inserted while a client pages
lands before the cursor or after it, never shifting the rows in between, so nothing is
returned twice or skipped.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from agentchat.errors import AgentChatError, ErrorCode

CONVERSATIONS = "c"
HISTORY = "h"
AUDIT = "a"


def encode(kind: str, *key: Any) -> str:
    raw = json.dumps([kind, *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(kind: str, cursor: str) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        value = None
    if not isinstance(value, list) or not value or value[0] != kind:
        raise AgentChatError(ErrorCode.INVALID_REQUEST, "the cursor is not one this list issued")
    return value[1:]


def conversation_key(last_activity_at: datetime, conversation_id: str) -> str:
    return encode(CONVERSATIONS, last_activity_at.isoformat(), conversation_id)


def decode_conversation_key(cursor: str) -> tuple[datetime, str]:
    return _decode_time_key(CONVERSATIONS, cursor)


def _decode_time_key(kind: str, cursor: str) -> tuple[datetime, str]:
    """A (timestamp with a zone, id) key: conversations by activity, approvals by creation."""
    key = _decode(kind, cursor)
    try:
        ts, row_id = key
        if not isinstance(row_id, str) or "\x00" in row_id:
            raise ValueError(row_id)
        when = datetime.fromisoformat(ts)
        if when.tzinfo is None:
            raise ValueError(ts)
        return when, row_id
    except (TypeError, ValueError):
        raise AgentChatError(ErrorCode.INVALID_REQUEST,
                             "the cursor is not one this list issued") from None


def history_key(pos: int) -> str:
    return encode(HISTORY, pos)


def decode_history_key(cursor: str) -> int:
    key = _decode(HISTORY, cursor)
    # bigserial: a value outside int8 would fail in PostgreSQL, so refuse it here
    if len(key) != 1 or type(key[0]) is not int or not 0 < key[0] < 2**63:
        raise AgentChatError(ErrorCode.INVALID_REQUEST, "the cursor is not one this list issued")
    return int(key[0])


def audit_key(first_seq: int) -> str:
    return encode(AUDIT, first_seq)


def decode_audit_key(cursor: str) -> int:
    key = _decode(AUDIT, cursor)
    if len(key) != 1 or type(key[0]) is not int or not 0 < key[0] < 2**63:
        raise AgentChatError(ErrorCode.INVALID_REQUEST, "the cursor is not one this list issued")
    return int(key[0])


APPROVALS = "p"


def approval_key(created_at: datetime, approval_id: str) -> str:
    return encode(APPROVALS, created_at.isoformat(), approval_id)


def decode_approval_key(cursor: str) -> tuple[datetime, str]:
    return _decode_time_key(APPROVALS, cursor)
