"""Runs you can rejoin (issue 17): what keeping every run's events costs, and how fast a join is.

1. **The cost of keeping events.** The same load twice per side, on a fresh stack each, the
   event log on (the default) and off (`AGENTCHAT_AGENT_TUNING__RUN_EVENTS=false`), alternated
   on, off, on, off so a busy neighbour hurts both alike: `--conversations` streams at once
   (the real @gradio/client under Node, bench/js/client.mjs), each `echo --words words` at
   30 tokens/s, `--rounds` rounds per stack after a warm-up. Per side: TTFT p50/p99 and
   the p99 gap between events. PostgreSQL's own counters between the first and last round
   (pg_stat_database.xact_commit, pg_stat_user_tables' inserted/updated/deleted tuples, all
   tables and runs/run_events apart) give the writes per run; the "off" side is the baseline
   (turn records, leases, checkpoints), so on − off is what the log adds.
   Goal: TTFT p50 and p99 gap with the log on within 10 % of off.
2. **Join latency.** On a stack with a second replica (a sidecar each, one database): a
   paced answer on replica A is dropped after a few events; `--join-wait` later (so missed
   events exist) the client joins (`action: "join"`, its `run_id` and last `seq`) on A
   ("same") or on B ("other", served from PostgreSQL); the time from the join's submit to
   its first event, which must be the first missed `seq`. Baseline in the same run: a new
   turn's first event on A (what starting a stream costs). The joins use
   tests/testkit/raw_chat.py (Gradio's HTTP queue protocol), as tests/system/test_runs.py.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/run_events.py [--conversations 50] [--rounds 2] [--repeats 30]

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpx
import psycopg

from common import bench_env, percentile, run_client, summary
from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import start_replica
from testkit.stack import Stack
from testkit.support import Service

TOKEN_DELAY_S = 1 / 30
TABLE_STATS = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables
"""


def pg_counters(url: str) -> dict[str, Any]:
    """This database's commits and tuples written, after the backends flushed their stats."""
    time.sleep(1.5)  # backends report their counters at most once a second
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT xact_commit FROM pg_stat_database"
                           " WHERE datname = current_database()").fetchone()
        tables = {r[0]: (int(r[1]), int(r[2]), int(r[3]))
                  for r in conn.execute(TABLE_STATS).fetchall()}
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()
    return {"xact_commit": int(row[0]) if row else 0, "tables": tables,
            "runs": int(runs[0]) if runs else 0}


def writes_between(a: dict[str, Any], b: dict[str, Any], runs: int) -> dict[str, Any]:
    def tuples(names: list[str] | None) -> int:
        total = 0
        for name, after in b["tables"].items():
            if names is not None and name not in names:
                continue
            before = a["tables"].get(name, (0, 0, 0))
            total += sum(x - y for x, y in zip(after, before, strict=True))
        return total

    ins = {n: b["tables"].get(n, (0, 0, 0))[0] - a["tables"].get(n, (0, 0, 0))[0]
           for n in ("runs", "run_events")}
    upd = b["tables"].get("runs", (0, 0, 0))[1] - a["tables"].get("runs", (0, 0, 0))[1]
    per = max(1, runs)
    return {"runs": runs,
            "xact_commit_per_run": round((b["xact_commit"] - a["xact_commit"]) / per, 1),
            "tuples_written_per_run": round(tuples(None) / per, 1),
            "run_events_inserted_per_run": round(ins["run_events"] / per, 1),
            "runs_rows_inserted_per_run": round(ins["runs"] / per, 2),
            "runs_rows_updated_per_run": round(upd / per, 1)}


def cost_side(events: bool, opts: argparse.Namespace) -> dict[str, Any]:
    prompt = f"echo {opts.words} words"
    text = " ".join(f"w{i}" for i in range(opts.words))
    env = {"AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": str(TOKEN_DELAY_S),
           "AGENTCHAT_AGENT_TUNING__RUN_EVENTS": "true" if events else "false"}
    with bench_env("run-events", **env) as (stack, _tmp):
        spec = {"mode": "streams", "n": opts.conversations, "expect": text,
                "url": stack.gradio_url, "agent": True, "token": stack.token("alice"),
                "message": prompt}
        run_client({**spec, "n": 10})  # warm-up: selection, pools, Gradio
        before = pg_counters(stack.database_url)
        run = run_client({**spec, "rounds": opts.rounds})
        after = pg_counters(stack.database_url)
    streams = [s for r in run["rounds"] for s in r["streams"]]
    gaps = [b - a for s in streams for a, b in zip(s["times"], s["times"][1:], strict=False)]
    return {"streams": len(streams),
            "lost": sum(s["lost"] for s in streams), "duplicated": sum(s["dup"] for s in streams),
            "final_text_ok": sum(s["final_ok"] for s in streams),
            "events": sum(s["events"] for s in streams),
            "ttft": [s["first"] or 0 for s in streams], "gaps": gaps,
            "writes": writes_between(before, after, len(streams))}


def combine(sides: list[dict[str, Any]]) -> dict[str, Any]:
    ttft = [t for s in sides for t in s["ttft"]]
    gaps = [g for s in sides for g in s["gaps"]]
    w = [s["writes"] for s in sides]
    return {"streams": sum(s["streams"] for s in sides),
            "lost": sum(s["lost"] for s in sides),
            "duplicated": sum(s["duplicated"] for s in sides),
            "final_text_ok": sum(s["final_text_ok"] for s in sides),
            "events_per_stream": round(sum(s["events"] for s in sides)
                                       / max(1, sum(s["streams"] for s in sides)), 1),
            "ttft_ms": summary(ttft), "gap_ms": summary(gaps),
            "per_stack": [{"ttft_p50": round(percentile(s["ttft"], 50), 1),
                           "gap_p99": round(percentile(s["gaps"], 99), 1)} for s in sides],
            "pg_writes_per_run": {k: round(sum(x[k] for x in w) / len(w), 2)
                                  for k in w[0] if k != "runs"}}


async def first_event_s(chat: RawChat, data: Any, action: str | None = None,
                        cid: str | None = None) -> tuple[float, Outcome]:
    """Seconds from the submit to its first event, and the whole outcome."""
    seen: dict[str, float] = {}

    def on_event(out: Outcome) -> None:
        seen.setdefault("t", time.monotonic())

    out = await chat.submit(data, action, cid, timeout=120, on_event=on_event)
    return (seen["t"] - out.started) if "t" in seen else float("nan"), out


async def join_latency(stack: Stack, b: Service, repeats: int, wait_s: float,
                       drop_after: int) -> dict[str, Any]:
    a = stack.agent
    alice = stack.token("alice")
    samples: dict[str, list[float]] = {"same": [], "other": [], "new_turn": []}
    wrong: list[dict[str, Any]] = []
    async with httpx.AsyncClient() as http:
        tabs = {"same": RawChat(a.url, alice, http), "other": RawChat(b.url, alice, http)}
        starter = RawChat(a.url, alice, http)
        for _ in range(2):  # warm-up both replicas' join path (LISTEN connection, Gradio)
            for where in ("same", "other"):
                first = await starter.submit("привет and echo 60 words", None, None,
                                             drop_after=drop_after, timeout=120)
                meta = first.last
                await tabs[where].submit({"text": "", "files": [], "action": "join",
                                          "conversation_id": meta["conversation_id"],
                                          "run_id": meta["run_id"],
                                          "last_seq": meta["seq"]}, timeout=120)
        for i in range(repeats):
            for where in ("same", "other") if i % 2 == 0 else ("other", "same"):
                first = await starter.submit("привет and echo 120 words", None, None,
                                             drop_after=drop_after, timeout=120)
                meta = first.last
                await asyncio.sleep(wait_s)  # the client is away; events are missed
                took, joined = await first_event_s(tabs[where], {
                    "text": "", "files": [], "action": "join",
                    "conversation_id": meta["conversation_id"], "run_id": meta["run_id"],
                    "last_seq": meta["seq"]})
                got = joined.events[0]["metadata"] if joined.events else {}
                if got.get("seq") != meta["seq"] + 1 or joined.kind != "final":
                    wrong.append({"where": where, "after": meta["seq"], "got": got.get("seq"),
                                  "kind": joined.kind})
                samples[where].append(took * 1000)
            took, _ = await first_event_s(starter, "привет")
            samples["new_turn"].append(took * 1000)
    out = {k: summary(v) for k, v in samples.items()}
    return {**out, "joins": 2 * repeats, "joins_not_continuing_at_the_next_seq": len(wrong),
            "examples": wrong[:3]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30, help="joins per replica")
    parser.add_argument("--join-wait", type=float, default=0.3)
    parser.add_argument("--drop-after", type=int, default=3)
    parser.add_argument("--no-cost", action="store_true")
    parser.add_argument("--no-join", action="store_true")
    opts = parser.parse_args()
    result: dict[str, Any] = {"bench": "run_events", "conversations": opts.conversations,
                              "tokens_per_answer": opts.words, "rounds": opts.rounds,
                              "token_delay_s": round(TOKEN_DELAY_S, 4)}
    goals: dict[str, bool] = {}
    if not opts.no_cost:
        sides: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        for events in (True, False, True, False):
            sides[events].append(cost_side(events, opts))
        on, off = combine(sides[True]), combine(sides[False])
        result["events_on"], result["events_off"] = on, off
        ratio = {"ttft_p50": round(on["ttft_ms"]["p50"] / off["ttft_ms"]["p50"], 3),
                 "ttft_p99": round(on["ttft_ms"]["p99"] / off["ttft_ms"]["p99"], 3),
                 "gap_p99": round(on["gap_ms"]["p99"] / off["gap_ms"]["p99"], 3)}
        result["on_over_off"] = ratio
        result["pg_writes_added_per_run"] = {
            k: round(on["pg_writes_per_run"][k] - off["pg_writes_per_run"][k], 2)
            for k in on["pg_writes_per_run"]}
        goals["no_events_lost_or_duplicated"] = (
            on["lost"] == 0 and on["duplicated"] == 0 and on["final_text_ok"] == on["streams"])
        goals["ttft_p50_within_10pct"] = ratio["ttft_p50"] <= 1.10
        goals["gap_p99_within_10pct"] = ratio["gap_p99"] <= 1.10
    if not opts.no_join:
        env = {"AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": str(TOKEN_DELAY_S)}
        with bench_env("run-join", **env) as (stack, _tmp):
            b, policy_b = start_replica(stack, **env)
            try:
                result["join_latency_ms"] = asyncio.run(join_latency(
                    stack, b, opts.repeats, opts.join_wait, opts.drop_after))
            finally:
                b.stop()
                policy_b.stop()
        result["join_latency_ms"]["note"] = (
            f"join submit -> first missed event, {opts.join_wait:g} s after a drop at seq "
            f"{opts.drop_after}; new_turn: a new turn's first event (the baseline)")
        goals["joins_continue_at_the_next_seq"] = (
            result["join_latency_ms"]["joins_not_continuing_at_the_next_seq"] == 0)
    result["goals"] = goals
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
