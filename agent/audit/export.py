"""The trail out of the database, and its proof: JSON Lines export, verify a file or the DB.

An export is one `anchor` line (the hash the first exported row chains to: GENESIS, the
retention anchor, or the row before the window), one `row` line per row in chain order with
its `prev_hash` and `hash`, and one `end` line (the last row's seq and hash, and the count).
`verify` walks the same links (agent/audit/chain.py) and names the first broken one: an edited
line fails its own hash, a deleted line breaks the next line's seq and `prev_hash`, a cut
file lacks its `end`. In the database the walk starts at the head's anchor and must arrive at
the head, so a deleted last row is found too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from agentchat.agent.audit import store
from agentchat.agent.audit.chain import check_rows, timestamp
from agentchat.agent.storage.db import Db, Row


@dataclass(frozen=True)
class Verdict:
    """What verify found: ok, how many rows, the chain's range, or the first broken link
    (`line` in a file, `seq` the row it concerns)."""

    ok: bool
    rows: int
    first_seq: int | None = None
    last_seq: int | None = None
    line: int | None = None
    seq: int | None = None
    reason: str | None = None

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None},
                          ensure_ascii=False)


def row_line(row: Row) -> dict[str, Any]:
    return {"kind": "row", **{k: (timestamp(v) if k == "at" else v) for k, v in row.items()}}


async def export_lines(db: Db, *, since: datetime, until: datetime) -> AsyncIterator[str]:
    """The JSON Lines of the rows appended in [since, until)."""
    span = await store.window(db, since, until)
    if span is None:
        head = await store.head(db)
        yield _line({"kind": "anchor", "seq": int(head["seq"]), "hash": head["hash"]})
        yield _line({"kind": "end", "seq": int(head["seq"]), "hash": head["hash"], "rows": 0})
        return
    first, last = span
    count, end_seq, end_hash = 0, first - 1, ""
    async for row in store.rows_after(db, first - 1, until_seq=last):
        if count == 0:
            yield _line({"kind": "anchor", "seq": int(row["seq"]) - 1,
                         "hash": row["prev_hash"]})
        yield _line(row_line(row))
        count, end_seq, end_hash = count + 1, int(row["seq"]), str(row["hash"])
    yield _line({"kind": "end", "seq": end_seq, "hash": end_hash, "rows": count})


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def verify_file(lines: Iterable[str]) -> Verdict:
    """The first broken link of an exported file."""
    parsed: list[tuple[int, Any]] = []
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            parsed.append((n, json.loads(text)))
        except ValueError:
            return Verdict(False, 0, line=n, reason="not a JSON line")
    if not parsed or not _kind(parsed[0][1], "anchor"):
        return Verdict(False, 0, line=parsed[0][0] if parsed else 1,
                       reason="the first line is not the anchor (the file's start was cut)")
    anchor = parsed[0][1]
    rows = [(n, v) for n, v in parsed[1:] if _kind(v, "row")]
    ends = [(n, v) for n, v in parsed[1:] if _kind(v, "end")]
    stray = [(n, v) for n, v in parsed[1:] if not (_kind(v, "row") or _kind(v, "end"))]
    if stray:
        return Verdict(False, 0, line=stray[0][0], reason="a line that is neither row nor end")
    broken, seq, last = check_rows((v for _, v in rows), anchor_seq=_seq(anchor),
                                   anchor_hash=str(anchor.get("hash")))
    if broken is not None:
        return Verdict(False, broken.position - 1, line=rows[broken.position - 1][0],
                       seq=broken.seq, reason=broken.reason)
    if not ends or ends[-1][0] != parsed[-1][0]:
        return Verdict(False, len(rows), line=parsed[-1][0] + 1,
                       reason="no end line after the last row (the file's end was cut)")
    end = ends[-1][1]
    if (_seq(end), end.get("hash"), end.get("rows")) != (seq, last, len(rows)):
        return Verdict(False, len(rows), line=ends[-1][0], seq=seq + 1,
                       reason=f"the end line names row {end.get('seq')} but the rows end at "
                              f"row {seq} (rows after it were deleted)")
    return Verdict(True, len(rows), first_seq=_seq(anchor) + 1 if rows else None,
                   last_seq=seq if rows else None)


async def verify_db(db: Db, batch: int = 1000) -> Verdict:
    """The first broken link of the chain in the database, from its anchor to its head (read
    in batches: memory stays flat however long the chain)."""
    head = await store.head(db)
    seq, last = int(head["anchor_seq"]), str(head["anchor_hash"])
    count, chunk = 0, []
    rows = store.rows_after(db, seq, batch=batch)
    while True:
        chunk = [r async for r in _take(rows, batch)]
        broken, seq, last = check_rows(chunk, anchor_seq=seq, anchor_hash=last)
        if broken is not None:
            return Verdict(False, count + broken.position - 1, seq=broken.seq,
                           reason=broken.reason)
        count += len(chunk)
        if len(chunk) < batch:
            break
    if (seq, last) != (int(head["seq"]), str(head["hash"])):
        return Verdict(False, count, seq=seq + 1,
                       reason=f"the chain ends at row {seq} but its head is row {head['seq']} "
                              "(the last rows were deleted, or a row was edited with its hash)")
    return Verdict(True, count, first_seq=int(head["anchor_seq"]) + 1 if count else None,
                   last_seq=seq if count else None)


async def _take(rows: AsyncIterator[Row], n: int) -> AsyncIterator[Row]:
    for _ in range(n):
        try:
            yield await anext(rows)
        except StopAsyncIteration:
            return


def _kind(value: Any, kind: str) -> bool:
    return isinstance(value, dict) and value.get("kind") == kind


def _seq(value: dict[str, Any]) -> int:
    seq = value.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else -1
