"""What the run writer's statement costs the agent's CPU before it is sent (issue 32, item 6):
psycopg turning a batch's events into parameters, the events as one JSON document
(`agent/storage/runs.event_rows`, what the writer sends) against the baseline in the same run,
the three arrays it sent before (run ids, seqs, events as `jsonb[]`), which psycopg dumps as
array literals element by element in Python. The batch is `--runs` live runs with `--events`
coalesced stream_token events each, shaped as the hub keeps them (`to_kept`), with
`--words` words of text each. Client side only: no database, nothing else on the clock.

    .venv/bin/python bench/run_writer.py [--runs 200] [--events 1] [--words 3] [--repeats 200]

Prints one JSON object on its last line: µs per event for each form, best of 5 blocks.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from psycopg._queries import PostgresQuery
from psycopg.adapt import Transformer

from agentchat.agent.chat.events import to_kept
from agentchat.agent.storage.runs import WRITE_EVENTS, Progress, event_rows

OLD_INSERT = ("SELECT * FROM unnest(%(ev_runs)s::text[], %(ev_seqs)s::int[], "
              "%(ev_events)s::jsonb[])")


def batch(runs: int, events: int, words: int) -> list[Progress]:
    out = []
    for _ in range(runs):
        run_id, cid = str(uuid.uuid4()), str(uuid.uuid4())
        kept = [(seq, to_kept({"type": "stream_token",
                               "token": " ".join(f"слово{i}" for i in range(words))},
                              seq, cid, run_id)) for seq in range(1, events + 1)]
        out.append(Progress(run_id=run_id, events=kept, last_seq=events, first_kept=1,
                            status=None))
    return out


def old_params(progress: list[Progress]) -> dict[str, Any]:
    events = [(p.run_id, seq, ev) for p in progress for seq, ev in p.events]
    return {"ev_runs": [e[0] for e in events], "ev_seqs": [e[1] for e in events],
            "ev_events": [json.dumps(e[2], ensure_ascii=False) for e in events]}


def new_params(progress: list[Progress]) -> dict[str, Any]:
    return {"events": event_rows(progress)}


def us_per_event(query: str, params: Callable[[list[Progress]], dict[str, Any]],
                 progress: list[Progress], repeats: int) -> float:
    """Building the parameters and psycopg's conversion of them, best of 5 blocks."""
    n = sum(len(p.events) for p in progress)
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        for _ in range(repeats):
            PostgresQuery(Transformer()).convert(query, params(progress))
        best = min(best, time.process_time() - started)
    return round(best / repeats / n * 1e6, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--events", type=int, default=1, help="events per run in one batch")
    ap.add_argument("--words", type=int, default=3, help="words per coalesced event")
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    progress = batch(args.runs, args.events, args.words)
    new_query = WRITE_EVENTS.split(" ON CONFLICT")[0]  # the statement up to its events
    old = us_per_event(OLD_INSERT, old_params, progress, args.repeats)
    new = us_per_event(new_query, new_params, progress, args.repeats)
    print(json.dumps({"bench": "run_writer", "runs": args.runs, "events_per_run": args.events,
                      "words_per_event": args.words,
                      "us_per_event": {"arrays_baseline": old, "json_document": new},
                      "speedup": round(old / new, 2),
                      "goals": {"json_at_most_arrays": new <= old}}))


if __name__ == "__main__":
    main()
