"""Runs and their events (docs/protocol.md §4, "Runs"): what a join replays, on any replica.

A replica writes its live runs' events in batches (agent/chat/run_hub.py, one statement for all
of them) and heartbeats them; any replica marks a run without a heartbeat `lost`, appending
its `RUN_LOST` event and failing its turn in the same statement, so every joiner sees the
same last event. Every read a client asks for checks the conversation's owner in the SQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from agentchat.agent.storage.conversations import storable_id
from agentchat.agent.storage.db import Db, Row, connection, fetch_all, fetch_one

CHANNEL = "agentchat_runs"  # NOTIFY payload: the run id whose events or status changed

# A run of a conversation deleted meanwhile is not stored (not a foreign-key error that would
# cost the whole batch, every other run's events with it).
INSERT_RUNS = """
INSERT INTO runs (id, conversation_id, turn_id, kind, tab_id, replica, resume_token)
SELECT v.* FROM unnest(%(ids)s::text[], %(conversations)s::text[], %(turns)s::text[],
                       %(kinds)s::text[], %(tabs)s::text[], %(replicas)s::text[],
                       %(tokens)s::text[]) AS v(id, conversation_id, turn_id, kind, tab_id,
                                                replica, resume_token)
  JOIN conversations c ON c.id = v.conversation_id
ON CONFLICT (id) DO NOTHING
"""
# Events, the runs' progress (last seq, the oldest kept, a final status) and a notification
# per run, in one statement. Events are stored as the run keeps them (agent/chat/events.py
# `to_kept`): an event whose content is the answer so far is stored without it, so a run's
# rows grow with its answer, not with its square; a trimmed run's first kept row gets
# `_base`, the answer before it, so a replay rebuilds every later content. A run another
# replica marked lost keeps `lost`; its RUN_LOST event holds its seq, so a late write of the
# same seq is dropped. A run taken over is `resuming` until its new owner's first batch.
# `write` fences the batch first (FENCE): only runs whose epoch is still the writer's get here.
LIVE = "('running', 'resuming')"
FENCE = "SELECT id, epoch FROM runs WHERE id = ANY(%(ids)s::text[]) FOR NO KEY UPDATE"
WRITE_EVENTS = """
WITH ev AS (
    INSERT INTO run_events (run_id, seq, event)
    SELECT e->>0, (e->>1)::int, e->2 FROM jsonb_array_elements(%(events)s::jsonb) AS e
    ON CONFLICT (run_id, seq) DO NOTHING
    RETURNING run_id),
upd AS (
    UPDATE runs r
       SET last_seq = GREATEST(r.last_seq, v.last_seq),
           first_kept_seq = GREATEST(r.first_kept_seq, v.first_kept),
           heartbeat_at = now(),
           status = CASE WHEN r.status IN ('running', 'resuming') AND v.status IS NOT NULL
                         THEN v.status
                         WHEN r.status = 'resuming' THEN 'running' ELSE r.status END,
           finished_at = CASE WHEN r.status IN ('running', 'resuming')
                                   AND v.status IS NOT NULL
                              THEN now() ELSE r.finished_at END,
           resume_token = CASE WHEN v.status IS NOT NULL THEN NULL ELSE r.resume_token END
      FROM unnest(%(ids)s::text[], %(lasts)s::int[], %(firsts)s::int[], %(statuses)s::text[])
           AS v(id, last_seq, first_kept, status)
     WHERE r.id = v.id
    RETURNING r.id),
trimmed AS (
    DELETE FROM run_events e
     USING unnest(%(ids)s::text[], %(firsts)s::int[]) AS v(id, first_kept)
     WHERE v.first_kept > 1 AND e.run_id = v.id AND e.seq < v.first_kept
    RETURNING 1),
based AS (
    UPDATE run_events e SET event = e.event || jsonb_build_object('_base', v.base)
      FROM unnest(%(b_runs)s::text[], %(b_seqs)s::int[], %(b_texts)s::text[])
           AS v(run_id, seq, base)
     WHERE e.run_id = v.run_id AND e.seq = v.seq
    RETURNING 1)
SELECT pg_notify(%(channel)s, upd.id), (SELECT count(*) FROM ev) AS written,
       (SELECT count(*) FROM trimmed) AS trimmed, (SELECT count(*) FROM based) AS based
  FROM upd
"""
# The replica's live runs are alive, those it still owns: the ids of those, and whether
# another replica was asked to stop each. A run it no longer owns (taken over, released,
# marked lost) is not beaten: the hub fences it (run_hub.py).
HEARTBEAT = f"""
UPDATE runs SET heartbeat_at = now()
 WHERE id = ANY(%(ids)s) AND status IN {LIVE} AND replica = %(replica)s
RETURNING id, stop_requested_at IS NOT NULL AS stop
"""
# Stop by run_id on a replica that does not run it: the owner's running run, started by this
# tab, is marked for its replica's next heartbeat.
REQUEST_STOP = """
UPDATE runs r SET stop_requested_at = now()
  FROM conversations c
 WHERE r.id = %(run_id)s AND r.conversation_id = %(conversation_id)s
   AND c.id = r.conversation_id AND c.owner = %(owner)s
   AND r.tab_id = %(tab)s AND r.status IN ('running', 'resuming')
RETURNING r.id
"""
# Runs without a heartbeat for `lost_s` (or the ids given, at a replica's shutdown) become
# lost, except `keep` (the caller's own live runs: after an outage their heartbeats are old
# although they run on): their RUN_LOST event at the next seq (with `reason`: why no replica
# went on with it), their turn failed so `retry`
# completes it, the turn's unfinished calls errors (as the orphan sweep does), a notification
# each. Its epoch is raised: a lost run is nobody's, so a replica still running it (paused
# meanwhile) stores nothing more.
MARK_LOST = f"""
WITH lost AS (
    UPDATE runs
       SET status = 'lost', finished_at = now(), last_seq = last_seq + 1, resume_token = NULL,
           epoch = epoch + 1
     WHERE status IN {LIVE} AND NOT (id = ANY(%(keep)s::text[]))
       AND (CASE WHEN %(ids)s::text[] IS NULL
                 THEN heartbeat_at < now() - make_interval(secs => %(lost_s)s)
                 ELSE id = ANY(%(ids)s::text[]) END)
    RETURNING id, conversation_id, turn_id, last_seq),
ev AS (
    INSERT INTO run_events (run_id, seq, event)
    SELECT id, last_seq, jsonb_build_object(
               'role', 'assistant', 'content', %(content)s::text,
               'metadata', jsonb_build_object(
                   'type', 'error', 'code', 'RUN_LOST', 'detail', %(detail)s::text,
                   'retryable', true, 'reason', %(reason)s::text,
                   'seq', last_seq, 'run_id', id,
                   'conversation_id', conversation_id))
      FROM lost
    ON CONFLICT (run_id, seq) DO NOTHING
    RETURNING run_id),
turn AS (
    UPDATE turns t SET status = 'failed', error_code = 'RUN_LOST', finished_at = now()
      FROM lost WHERE t.id = lost.turn_id AND t.status = 'running'
    RETURNING t.id),
calls AS (
    UPDATE tool_calls c SET outcome = 'error', finished_at = now(),
           error = 'interrupted: the agent stopped before the call finished'
      FROM lost WHERE c.turn_id = lost.turn_id AND c.outcome = 'running'
    RETURNING c.call_id)
SELECT lost.id, lost.conversation_id, pg_notify(%(channel)s, lost.id),
       (SELECT count(*) FROM ev) AS events, (SELECT count(*) FROM turn) AS turns,
       (SELECT count(*) FROM calls) AS calls
  FROM lost
"""
# The owner's run: the one named, else the conversation's newest. `stale`: running, but its
# replica has not heartbeat it for `lost_s`.
FIND_RUN = """
SELECT r.id, r.conversation_id, r.turn_id, r.kind, r.tab_id, r.replica, r.status, r.last_seq,
       r.first_kept_seq, r.resumed_after, r.epoch,
       (r.status IN ('running', 'resuming')
        AND r.heartbeat_at < now() - make_interval(secs => %(lost_s)s)) AS stale
  FROM runs r JOIN conversations c ON c.id = r.conversation_id AND c.owner = %(owner)s
 WHERE r.conversation_id = %(conversation_id)s
   AND (%(run_id)s::text IS NULL OR r.id = %(run_id)s)
 ORDER BY r.started_at DESC
 LIMIT 1
"""
RUN_STATE = """
SELECT status, last_seq, first_kept_seq, resumed_after,
       (status IN ('running', 'resuming')
        AND heartbeat_at < now() - make_interval(secs => %(lost_s)s)) AS stale
  FROM runs WHERE id = %(id)s
"""
EVENTS_AFTER = """
SELECT seq, event FROM run_events
 WHERE run_id = %(id)s AND seq > %(after)s ORDER BY seq LIMIT %(limit)s
"""
# Runs of the conversation live on other replicas (a same-tab submit waits for them).
LIVE_ELSEWHERE = """
SELECT id, tab_id,
       heartbeat_at < now() - make_interval(secs => %(lost_s)s) AS stale
  FROM runs
 WHERE conversation_id = %(conversation_id)s AND status IN ('running', 'resuming')
   AND replica <> %(replica)s
"""


@dataclass
class RunRecord:
    """A new run, as the writer inserts it."""

    run_id: str
    conversation_id: str
    turn_id: str
    kind: str
    tab_id: str
    replica: str
    token: str | None = None  # the user token a new owner resumes it with (takeover.py)


@dataclass
class Progress:
    """What the writer records for one run in a batch."""

    run_id: str
    events: list[tuple[int, dict[str, Any]]]  # (seq, ChatMessage dict)
    last_seq: int
    first_kept: int
    status: str | None  # set once the run has ended
    epoch: int = 1  # the writer's epoch of the run: a stale one stores nothing


def event_rows(progress: Sequence[Progress]) -> str:
    """A batch's events as one JSON document, `[[run_id, seq, event], …]` (WRITE_EVENTS reads
    it with jsonb_array_elements). Not three arrays: psycopg dumps a list as an array literal
    element by element in Python, escaping each event's text, which was 6 % of the agent's
    CPU at 200 live runs (py-spy; bench/run_writer.py measures the two side by side)."""
    return json.dumps([(p.run_id, seq, ev) for p in progress for seq, ev in p.events],
                      ensure_ascii=False)


async def write(db: Db, new_runs: Sequence[RunRecord], progress: Sequence[Progress],
                bases: Sequence[tuple[str, int, str]] = ()) -> list[str]:
    """One transaction: the new runs, then every run's events and progress (notified), and
    the `_base` of trimmed runs' first kept rows stored earlier: (run_id, seq, text). Fenced
    first: the runs whose epoch is no longer the writer's (taken over, released) store
    nothing; their ids are returned. Their rows stay locked to the end of the transaction,
    so a takeover (which skips locked rows) never claims a run in the middle of a batch.
    A run without a row (its conversation deleted) stores nothing either: its events would
    fail the batch on the foreign key; its heartbeat finds it gone and fences it."""
    fenced: list[str] = []
    async with connection(db) as conn, conn.transaction():
        if new_runs:
            await conn.execute(INSERT_RUNS, {
                "ids": [r.run_id for r in new_runs],
                "conversations": [r.conversation_id for r in new_runs],
                "turns": [r.turn_id for r in new_runs], "kinds": [r.kind for r in new_runs],
                "tabs": [r.tab_id for r in new_runs],
                "replicas": [r.replica for r in new_runs],
                "tokens": [r.token for r in new_runs]})
        if progress:
            epochs = {str(r["id"]): int(r["epoch"]) for r in await fetch_all(
                conn, FENCE, {"ids": [p.run_id for p in progress]})}
            fenced = [p.run_id for p in progress
                      if p.run_id in epochs and epochs[p.run_id] != p.epoch]
            progress = [p for p in progress if epochs.get(p.run_id) == p.epoch]
            stored = {p.run_id for p in progress}
            bases = [b for b in bases if b[0] in stored]
        if progress:
            await conn.execute(WRITE_EVENTS, {
                "events": event_rows(progress),
                "ids": [p.run_id for p in progress], "lasts": [p.last_seq for p in progress],
                "firsts": [p.first_kept for p in progress],
                "statuses": [p.status for p in progress], "channel": CHANNEL,
                "b_runs": [b[0] for b in bases], "b_seqs": [b[1] for b in bases],
                "b_texts": [b[2] for b in bases]})
    return fenced


async def heartbeat(db: Db, run_ids: list[str], replica: str) -> tuple[list[str], list[str]]:
    """Heartbeat the live runs `replica` still owns: (the ids of those a Stop by run_id asked
    to stop, the ids it no longer owns)."""
    rows = await fetch_all(db, HEARTBEAT, {"ids": run_ids, "replica": replica})
    owned = {str(r["id"]) for r in rows}
    return [str(r["id"]) for r in rows if r["stop"]], [i for i in run_ids if i not in owned]


async def request_stop(db: Db, *, owner: str, conversation_id: str, run_id: str,
                       tab: str) -> bool:
    """Mark the owner's running run, started by `tab`, to be stopped by its replica."""
    return await fetch_one(db, REQUEST_STOP, {"owner": owner, "conversation_id": conversation_id,
                                              "run_id": run_id, "tab": tab}) is not None


async def mark_lost(db: Db, *, lost_s: float, content: str, detail: str,
                    run_ids: list[str] | None = None, keep: list[str] | None = None,
                    reason: str = "replica_stopped") -> list[Row]:
    """Mark stale runs (or exactly `run_ids`) lost, never those in `keep`; the rows of those
    it marked. `reason` goes in their RUN_LOST event (docs/protocol.md §4, "Takeover")."""
    return await fetch_all(db, MARK_LOST, {"ids": run_ids, "keep": keep or [],
                                           "lost_s": lost_s, "reason": reason,
                                           "content": content, "detail": detail,
                                           "channel": CHANNEL})


async def find_run(db: Db, *, owner: str, conversation_id: str, run_id: str | None,
                   lost_s: float) -> Row | None:
    if run_id is not None and not storable_id(run_id):
        return None
    return await fetch_one(db, FIND_RUN, {"owner": owner, "conversation_id": conversation_id,
                                          "run_id": run_id, "lost_s": lost_s})


async def run_state(db: Db, run_id: str, lost_s: float) -> Row | None:
    return await fetch_one(db, RUN_STATE, {"id": run_id, "lost_s": lost_s})


async def events_after(db: Db, run_id: str, after: int, limit: int = 500) -> list[Row]:
    return await fetch_all(db, EVENTS_AFTER, {"id": run_id, "after": after, "limit": limit})


async def live_elsewhere(conn: psycopg.AsyncConnection[Any], conversation_id: str,
                         replica: str, lost_s: float) -> list[Row]:
    return await fetch_all(conn, LIVE_ELSEWHERE, {"conversation_id": conversation_id,
                                                  "replica": replica, "lost_s": lost_s})


async def epoch_of(db: Db, run_id: str) -> int | None:
    """The run's owner epoch now (None: not stored yet, or gone)."""
    row = await fetch_one(db, "SELECT epoch FROM runs WHERE id = %(id)s", {"id": run_id})
    return int(row["epoch"]) if row is not None else None
