"""The digest of a tool call's arguments, one function for every component.

The sidecar's decision log, the agent's audit trail and its spans all name a call's arguments by
this digest (never by their values, which may hold names or free text), so a decision, its
audit record and its trace can be joined on it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
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
    """One digest over several calls (a batched card's approval, docs/protocol.md §11): sha256 of
    the JSON list of their `args_digest`s, in the card's order."""
    return "sha256:" + hashlib.sha256(orjson.dumps(digests)).hexdigest()


# The version of `object_key`'s form: a grant stored under another form covers nothing.
OBJECT_KEY_VERSION = "v2:"


def object_key(arguments: dict[str, Any], free_text: Collection[str] = ()) -> str:
    """What a call acts on, for a time-boxed grant (docs/protocol.md §11): every argument but
    the catalog's `free_text` ones (environments and `version` always count), as canonical
    JSON after OBJECT_KEY_VERSION. Equal keys, the same call but for its words to people."""
    kept = {k: v for k, v in arguments.items() if k not in free_text}
    return OBJECT_KEY_VERSION + orjson.dumps(kept, option=orjson.OPT_SORT_KEYS).decode()
