"""bench/agent_scale.py's command line and its printed figures: per model setup, each side's
medians over the rounds, the agent's ratios against each, and whether each goal holds."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from scale_measure import figures


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--token-delay", type=float, default=1 / 30)
    parser.add_argument("--no-baseline", action="store_true", help="the agent only")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds after the streams before the 'after' RSS")
    parser.add_argument("--model", choices=["inprocess", "http", "both"], default="inprocess",
                        help="the paced model in process (the agent's offline planner, the "
                             "peer's paced echo), or a paced OpenAI-compatible server both "
                             "call over HTTP (its CPU reported apart), or each in turn")
    parser.add_argument("--peer", choices=["langgraph"],
                        help="also LangGraph Agent Server (make peer-langgraph), a fresh one "
                             "per round and variant")
    parser.add_argument("--peer-persistence", choices=["memory", "postgres", "both"],
                        default="postgres", help="the peer's checkpoints")
    parser.add_argument("--peer-poll", choices=["shipped", "short", "both"], default="both",
                        help="the peer's in-memory queue poll: as shipped (0.5 s) and/or "
                             "patched short (the labelled sensitivity run)")
    parser.add_argument("--peer-blocking-check", action="store_true",
                        help="the dev server's blocking-call checker on (the CLI's default)")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy both processes during their round: CPU by layer")
    parser.add_argument("--profile-start", nargs="?", const="half", choices=["half", "all"],
                        help="py-spy both processes from the submits until half (the TTFT "
                             "p50; the default) or all of the streams have their first "
                             "token: CPU per turn start by step and by layer")
    parser.add_argument("--gil", action="store_true",
                        help="with --profile or --profile-start: count only the samples that "
                             "hold the GIL (worker threads waiting for it are not CPU)")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="a separate run: tracemalloc snapshots at --stages live streams")
    parser.add_argument("--stages", default="50,100,200")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs, each the agent's burst then the others'; the goals are "
                             "read off their medians")
    parser.add_argument("--agent-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for the agent process only (e.g. "
                             "PYTHONMALLOC=malloc); repeatable")
    parser.add_argument("--memstats", action="store_true",
                        help="what holds the agent's memory after the warm-up, with the streams "
                             "live and --settle s after: RSS by mapping, pymalloc, objects")
    parser.add_argument("--gcstats", action="store_true",
                        help="the agent's garbage-collector pauses during the round, by "
                             "generation (bench/memprobe)")
    opts = parser.parse_args()
    if opts.profile and opts.profile_start:
        parser.error("--profile and --profile-start both attach py-spy: one at a time")
    return opts


COLUMNS = [("ttft_p50", "TTFT p50 ms", 0), ("ttft_mean", "mean", 0), ("ttft_p99", "p99", 0),
           ("gap_p99", "gap p99 ms", 0), ("slowdown_p50", "slowdown", 2),
           ("cpu_per_token", "CPU ms/tok", 3), ("kb_per_conversation", "KB/conv", 0),
           ("bytes_per_token_event", "B/tok event", 0),
           ("client_cpu_per_token", "client ms/tok", 3)]


def print_figures(setup: str, result: dict[str, Any], n: int) -> None:
    """Each side's medians over the rounds, the agent's ratios, the goals (stdout)."""
    rounds = result["rounds"]
    sides = ["agent", *[k for k in rounds[0] if k == "bare_chatinterface"
                        or k.startswith("peer_")]]
    print(f"\n== {setup} model, {n} conversations, {len(rounds)} round(s); load averages "
          + ", ".join(str(r["load_average"]) for r in rounds))
    print(f"{'side':28}" + "".join(f"{title:>14}" for _, title, _ in COLUMNS))
    for side in sides:
        per = [figures(r[side]) for r in rounds if r.get(side)]
        if not per:
            continue
        med = {k: statistics.median(x[k] for x in per) for k in per[0]}
        print(f"{side:28}" + "".join(f"{med[k]:>14.{d}f}" for k, _, d in COLUMNS))
        ok = [r[side] for r in rounds if r.get(side)]
        lost = sum(s["events_lost"] + s["events_duplicated"] for s in ok)
        right = sum(s["final_text_ok"] for s in ok)
        model = [s["model_cpu_ms_per_token"] for s in ok if "model_cpu_ms_per_token" in s]
        print(f"{'':28}lost+duplicated {lost}, final texts right {right}/{n * len(ok)}"
              + (f", model server CPU {statistics.median(model):.3f} ms/tok" if model else "")
              + (f", errors {ok[0]['errors']}" if ok[0]["errors"] else ""))
    for side, median in result.get("ratio_medians", {}).items():
        print(f"agent / {side:20}" + "".join(f"{median[k]:>14.2f}" for k, _, _ in COLUMNS))
    for name, ok_ in result["goals"].items():
        print(f"  goal {'MET   ' if ok_ else 'MISSED'} {name}")
