"""The chain's arithmetic: canonical JSON, the argument digest, a row's hash, and the check of
a sequence of rows against its anchor.

One canonical form for everything: orjson with sorted keys (UTF-8, no spaces), the encoding
the sidecar's decision log digests arguments with, so `args_hash` here equals the decision
log's `args_digest` for the same call (both use `agentchat.digest`). A row's hash is
`sha256(prev_hash "\\n" canonical(row without its hash))`: editing any field
changes it, deleting a row breaks the next row's `prev_hash` and the `seq` sequence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from agentchat.digest import args_digest

__all__ = ["GENESIS", "Break", "args_digest", "canonical", "check_rows", "hashed_fields",
           "row_hash", "timestamp"]

# The prev_hash of the first row ever appended (before any retention cut).
GENESIS = "sha256:" + "0" * 64
# What a row's hash covers: every column but the hash itself.
HASHED = ("seq", "at", "stage", "conversation_id", "owner", "turn_id", "call_id", "tool",
          "environment", "args_hash", "detail", "prev_hash")


def canonical(value: Any) -> bytes:
    """Canonical JSON: sorted keys at every level, no whitespace, UTF-8."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def timestamp(at: datetime) -> str:
    """A row's time as hashed and exported: UTC, microseconds (PostgreSQL's precision), so the
    value read back from any session's time zone hashes the same."""
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def hashed_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a row its hash covers, in the form hashed (time as `timestamp`)."""
    out = {k: row.get(k) for k in HASHED}
    if isinstance(out["at"], datetime):
        out["at"] = timestamp(out["at"])
    return out


def row_hash(row: Mapping[str, Any]) -> str:
    fields = hashed_fields(row)
    digest = hashlib.sha256(str(fields["prev_hash"]).encode() + b"\n" + canonical(fields))
    return "sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class Break:
    """The first broken link: which row (its `seq` as found, and its position in the input,
    1-based) and what is wrong with it."""

    position: int
    seq: int | None
    reason: str


def check_rows(rows: Iterable[Mapping[str, Any]], *, anchor_seq: int,
               anchor_hash: str) -> tuple[Break | None, int, str]:
    """Walk rows in chain order from the anchor (the last row cut away, or 0 and GENESIS):
    the first broken link, or None; and the last (seq, hash) reached, to compare with the
    chain's head."""
    seq, last = anchor_seq, anchor_hash
    for position, row in enumerate(rows, 1):
        found = row.get("seq")
        if found != seq + 1:
            # Named by the row that should be here: the deleted one.
            return Break(position, seq + 1, f"row {seq + 1} is missing: found row "
                         f"{_int(found)} (a row was deleted, or the rows reordered)"), seq, last
        if row.get("prev_hash") != last:
            return Break(position, seq + 1, "prev_hash is not the previous row's hash "
                         "(the row before it was edited or deleted)"), seq, last
        if row.get("hash") != row_hash(row):
            return Break(position, seq + 1, "the row's hash does not match its fields "
                         "(the row was edited)"), seq, last
        seq, last = seq + 1, str(row["hash"])
    return None, seq, last


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
