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


def calls_digest(digests: list[str]) -> str:
    """One digest over several calls (a batched card's approval, issue 34): sha256 of the JSON
    list of their `args_digest`s, in the card's order."""
    return "sha256:" + hashlib.sha256(orjson.dumps(digests)).hexdigest()


def object_key(arguments: dict[str, Any], environment_arguments: tuple[str, ...] = ()) -> str:
    """What a call acts on, for a time-boxed grant (issue 34): its `*_id` arguments other than
    the environment's, as canonical JSON. Two calls on the same object give the same key."""
    ids = {k: v for k, v in arguments.items()
           if k.endswith("_id") and k not in environment_arguments}
    return orjson.dumps(ids, option=orjson.OPT_SORT_KEYS).decode()
