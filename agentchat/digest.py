"""The digest of a tool call's arguments, one function for every component.

The sidecar's decision log, the agent's audit trail and its spans all name a call's arguments by
this digest (never by their values, which may hold names or free text), so a decision, its
audit record and its trace can be joined on it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def args_digest(arguments: dict[str, Any]) -> str:
    """sha256 of the arguments as canonical JSON (sorted keys): equal calls, equal digests."""
    try:
        raw = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # never fails a decision over logging
        raw = repr(sorted(arguments.items())).encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest()
