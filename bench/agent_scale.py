"""200 conversations at once, 200 tokens each (issue 4; docs/architecture.md, "Streaming at scale").
Goals: no event lost or duplicated; p99 gap between events under 250 ms; under 256 KB of
agent memory per conversation.

The stack runs as real processes with the planner paced at 30 tokens/s (a realistic model) and
text coalesced every AGENTCHAT_AGENT_TUNING__FLUSH_INTERVAL_S (default 0.05). The client is the real
@gradio/client under Node (bench/js/client.mjs), one client per conversation, all submitting
at once. Lost or duplicated is judged by seq and by the final text against the joined tokens
and the expected answer. Memory is the agent process's RSS (psutil) idle after a warm-up,
at its peak during the run and a few seconds after it. The baseline in the same run is a bare
Gradio ChatInterface (bench/bare_chat.py) paced the same and yielding one event per token.
Each side reports gaps between events, time to first token, and each stream's slowdown: its
time from submit to end over the model's own time (tokens x delay). Prints one JSON object
on its last line.

`--rounds` (3) runs it all that many times, each round the agent's burst then the bare's, and
reads the goals off the rounds' medians (issue 32, item 6: TTFT p50 within 1.3x the bare's,
its mean within 1.2x, its p99 at most the bare's, each ratio's median over the rounds; every
other goal met in most rounds). Each round's figures and goals are in `rounds`, the ratios in
`ttft_ratio`.

CPU per streamed token (issue 21): the user + system CPU of the agent process (psutil) over the
measured round, divided by the tokens delivered, and the same for the bare baseline's process.
`--profile` samples both processes with py-spy during their measured round and prints where the
CPU went by layer (the innermost frame that is not the standard library: Gradio, uvicorn and
Starlette, LangGraph, LangChain, psycopg, our chat/graph/storage code, …) and the hottest
functions. `--tracemalloc` is a separate run (tracemalloc slows the agent severalfold): the agent
starts with bench/memprobe on its PYTHONPATH, and snapshots taken idle and with 50, 100 and 200
live streams are diffed against the idle one, per live conversation, by file and by line.
`--profile-start` samples both processes only while the turns start: from the submits until
half (the TTFT p50; `--profile-start all`: every one) of the streams have their first token
(the client marks both on its stderr), and prints the CPU per turn start by step (token
check, conversation and lease SQL, tool selection, turn rows, the graph run, Gradio's queue
outside a turn, …) and by layer. `--memstats` asks the agent (bench/memprobe on its PYTHONPATH)
for pymalloc's arenas and blocks, its live objects by type and its threads after the warm-up,
with the streams live and `--settle` s after, with the RSS by mapping (`/proc/PID/smaps`) at
each: what holds the memory, without tracemalloc's slowdown. `--gcstats` (bench/memprobe
too) times the agent's garbage collections through `gc.callbacks`: the round's count, total
and mean ms by generation, and the cyclic garbage they found.

Against what a platform team would deploy instead (`--peer langgraph`, after `make
peer-langgraph`): LangGraph Agent Server (bench/scale_peer.py, bench/peer/), a fresh server per
round and variant, its one-node graph calling the same paced model, driven by the same Node
runtime (bench/js/langgraph.mjs) and measured alike, after the agent and the bare in the same
round; checkpoints in memory and/or PostgreSQL (`--peer-persistence`), its queue poll as
shipped and/or patched short (`--peer-poll`). `--model http` (or `both`): the agent and the
peer call one paced OpenAI-compatible server (tests/testkit/openai_stub.py), its CPU reported
apart; the bare paces itself and runs in the in-process setup only. Per setup: each side's
medians, the agent's ratios, every goal (stdout), then the JSON.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/agent_scale.py [--conversations 200] [--words 200] [--rounds 3] \\
        [--profile | --profile-start [half|all]] [--memstats] [--gcstats] \\
        [--peer langgraph [--peer-persistence memory|postgres|both] [--peer-poll shipped|short|both]
         [--peer-blocking-check]] [--model inprocess|http|both]
    .venv/bin/python bench/agent_scale.py --tracemalloc [--stages 50,100,200]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common import (
    MEMPROBE,
    RssSampler,
    bare_server,
    bench_env,
    gcstats_diff,
    gradio_url,
    read_gcstats,
    run_client,
)
from scale_measure import measure, median_ratios, of_rounds, peer_goals, ttft_goals, ttft_ratios
from scale_memory import MemStats, model_retained_kb, print_memstats, tracemalloc_run
from scale_peer import agent_model_env, peer_ready, peer_run, stub_model, variants
from scale_profile import (
    Profiler,
    StartWindow,
    cpu_seconds,
    print_profile,
    print_start_profile,
    profile_path,
)
from scale_report import parse, print_figures
from testkit.support import Service


def bare_run(tmp: Path, spec: dict[str, Any], text: str, token_delay_s: float,
             profile: bool, profile_start: str | None = None) -> dict[str, Any]:
    """The same streams from the bare ChatInterface, paced the same, one event per token."""
    with bare_server(tmp, token_delay_s) as bare:
        bspec = {**spec, "url": gradio_url(bare), "agent": False, "message": text,
                 "token": None, "tokens": []}
        run_client({**bspec, "n": 10})  # warm-up
        pid = bare.proc.pid  # type: ignore[union-attr]
        start = StartWindow(pid, profile_path("bare-start"), spec["n"],
                                     profile_start) if profile_start else None
        # Its memory too, as the agent's is read: a peak that grows with the machine's load
        # shows in both (the goal is the agent's alone).
        with RssSampler(pid) as rss, Profiler(pid, profile_path("bare"), profile) as prof:
            before = rss.rss()
            cpu0 = cpu_seconds(pid)
            run = run_client({**bspec, "mark_first": True} if start else bspec,
                             on_mark=start.on_mark if start else None)
            cpu1 = cpu_seconds(pid)
        out = measure(run, token_delay_s)
        out["cpu_ms_per_token"] = round((cpu1 - cpu0) * 1000 / max(1, out["tokens"]), 3)
        out["kb_per_conversation"] = {"peak": round((rss.peak - before) / 1024 / spec["n"], 1)}
        if profile:
            out["profile"] = prof.result()
        if start:
            out["profile_start"] = start.result()
        return out


def one_round(opts: argparse.Namespace, setup: str) -> dict[str, Any]:
    """One round: the agent's burst, then the bare ChatInterface's, then each peer variant's,
    one side at a time on the same machine; `setup` http: the agent and the peer call the
    paced OpenAI-compatible model (the bare paces itself in both setups)."""
    with contextlib.ExitStack() as es:
        model = None
        if setup == "http":
            model_dir = Path(es.enter_context(tempfile.TemporaryDirectory(prefix="agent-scale-")))
            model = es.enter_context(stub_model(model_dir, opts.token_delay))
        return agent_round(opts, model)


def agent_round(opts: argparse.Namespace, model: Service | None) -> dict[str, Any]:
    prompt = f"echo {opts.words} words"
    text = " ".join(f"w{i}" for i in range(opts.words))
    n = opts.conversations
    agent_env = dict(kv.split("=", 1) for kv in opts.agent_env)
    stats_dir = Path(tempfile.mkdtemp(prefix="agent-scale-stats-")) if opts.memstats else None
    gc_file = Path(tempfile.mkdtemp(prefix="agent-scale-gc-")) / "gc.json" if opts.gcstats \
        else None
    if stats_dir is not None:
        agent_env["AGENTCHAT_BENCH_MEMSTATS_DIR"] = str(stats_dir)
    if gc_file is not None:
        agent_env["AGENTCHAT_BENCH_GCSTATS_FILE"] = str(gc_file)
    if stats_dir is not None or gc_file is not None:  # bench/memprobe answers both
        agent_env["PYTHONPATH"] = str(MEMPROBE)
    agent_env.update(agent_model_env(model))
    model_pid = model.proc.pid if model is not None else None  # type: ignore[union-attr]
    with bench_env("agent-scale",
                   AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S=str(opts.token_delay),
                   **agent_env) as (stack, tmp):
        # A token of its own per conversation (one user's, told apart by `jti`), as 200
        # people's tabs would bring: the agent's token cache saves nothing across them.
        spec = {"mode": "streams", "n": n, "expect": text, "url": stack.gradio_url,
                "agent": True, "token": stack.token("alice"), "message": prompt,
                "tokens": [stack.token("alice", extra={"jti": uuid.uuid4().hex})
                           for _ in range(n)]}
        run_client({**spec, "n": 10, "tokens": []})  # warm-up: selection, pools, Gradio
        gc.collect()
        time.sleep(1.0)
        pid = stack.agent.proc.pid  # type: ignore[union-attr]
        start = StartWindow(pid, profile_path("agent-start"), n, opts.profile_start) \
            if opts.profile_start else None
        probe = MemStats(pid, stats_dir) if stats_dir is not None else None
        with RssSampler(pid) as rss, Profiler(pid, profile_path("agent"), opts.profile) as prof:
            before = rss.rss()
            if probe is not None:
                probe.take("before")
                probe.take_when_live(stack.agent.url, n, 0.75 * opts.words * opts.token_delay)
            gc0 = read_gcstats(gc_file)
            cpu0 = cpu_seconds(pid)
            m0 = cpu_seconds(model_pid) if model_pid else 0.0
            agent_run = run_client({**spec, "mark_first": True} if start else spec,
                                   on_mark=start.on_mark if start else None)
            cpu1 = cpu_seconds(pid)
            m1 = cpu_seconds(model_pid) if model_pid else 0.0
            if gc_file is not None:
                time.sleep(1.2)  # the probe writes once a second; the idle trim is at 2 s
                gc_round = gcstats_diff(gc0, read_gcstats(gc_file))
        time.sleep(opts.settle)
        after = rss.rss()
        if probe is not None:
            probe.take("after")
        agent = measure(agent_run, opts.token_delay)
        agent["cpu_ms_per_token"] = round((cpu1 - cpu0) * 1000 / max(1, agent["tokens"]), 3)
        if model_pid:
            agent["model_cpu_ms_per_token"] = round((m1 - m0) * 1000 / max(1, agent["tokens"]),
                                                    3)
        if gc_file is not None:
            agent["gc"] = gc_round
        if opts.profile:
            agent["profile"] = prof.result()
        if start:
            agent["profile_start"] = start.result()
        if probe is not None:
            agent["memstats"] = probe.result()
            print_memstats(agent["memstats"], n)
        agent["rss_mb"] = {"before": round(before / 2**20, 1), "peak": round(rss.peak / 2**20, 1),
                           "after": round(after / 2**20, 1)}
        agent["kb_per_conversation"] = {"peak": round((rss.peak - before) / 1024 / n, 1),
                                        "retained": round((after - before) / 1024 / n, 1)}
        stack.stop()  # the baseline gets the machine to itself, as the agent did
        baseline = {} if opts.no_baseline or model is not None else bare_run(
            tmp, spec, text, opts.token_delay, opts.profile, opts.profile_start)
        peers = {label: peer_run(tmp, spec, opts.token_delay, model, store, poll,
                                 opts.peer_blocking_check)
                 for label, store, poll in (variants(opts.peer_persistence, opts.peer_poll)
                                            if opts.peer else [])}
    if opts.profile_start:
        print_start_profile("agent", agent.get("profile_start"))
        print_start_profile("bare ChatInterface", baseline.get("profile_start"))
    if opts.profile:
        print_profile("agent", agent.get("profile"), agent["cpu_ms_per_token"])
        print_profile("bare ChatInterface", baseline.get("profile"),
                      baseline.get("cpu_ms_per_token", 0.0))
    goals: dict[str, bool] = {
        "no_events_lost_or_duplicated": agent["events_lost"] == 0
        and agent["events_duplicated"] == 0 and agent["final_text_ok"] == n,
        "under_256kb_per_conversation": agent["kb_per_conversation"]["peak"] <= 256,
        "rss_back_within_10pct": after <= 1.1 * before}
    if baseline:  # issue 21: against the bare ChatInterface in the same run
        goals.update({
            "cpu_per_token_at_most_bare": agent["cpu_ms_per_token"]
            <= baseline["cpu_ms_per_token"],
            "p99_gap_at_most_bare": agent["gap_ms"]["p99"] <= baseline["gap_ms"]["p99"],
            "slowdown_at_most_bare": agent["slowdown"]["p50"] <= baseline["slowdown"]["p50"],
            **ttft_goals(ttft_ratios(agent, baseline))})
    return {"agent": agent, "bare_chatinterface": baseline, **peers, "agent_env": agent_env,
            "load_average": [round(x, 2) for x in os.getloadavg()], "goals": goals}


def of_setup(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A model setup's rounds read off: the ratios' medians against each side, the goals."""
    out = of_rounds(rounds)
    sides = [k for k in rounds[0] if k == "bare_chatinterface" or k.startswith("peer_")]
    out["ratio_medians"] = {side: median_ratios(rounds, side) for side in sides
                            if any(r.get(side) for r in rounds)}
    for side, median in out["ratio_medians"].items():
        if side == "bare_chatinterface":
            out["goals"]["p99_gap_within_1_1x_bare"] = median["gap_p99"] <= 1.1
        elif side.startswith("peer_postgres"):
            out["goals"].update(peer_goals(median, side.removeprefix("peer_")))
    return out


def main() -> int:
    opts = parse()
    Profiler.gil_only = opts.gil
    if opts.tracemalloc:
        print(json.dumps(tracemalloc_run(opts)))
        return 0
    if opts.peer:
        peer_ready()
    n = opts.conversations
    setups = ["inprocess", "http"] if opts.model == "both" else [opts.model]
    out: dict[str, Any] = {}
    for setup in setups:
        rounds = []
        for k in range(opts.rounds):
            print(f"{setup} model, round {k + 1} of {opts.rounds} (load {os.getloadavg()[0]:.2f})",
                  file=sys.stderr, flush=True)
            rounds.append(one_round(opts, setup))
        out[setup] = {"rounds": rounds, **of_setup(rounds)}
        print_figures(setup, out[setup], n)
    first = out[setups[0]]
    print(json.dumps({
        "bench": "agent_scale", "conversations": n, "tokens_per_answer": opts.words,
        "token_delay_s": round(opts.token_delay, 4), "models": setups,
        "peer": opts.peer, "rounds": first["rounds"], "setups": out,
        "ttft_ratio": first.get("ttft_ratio"),
        "goals": {f"{s}.{k}" if len(setups) > 1 else k: v
                  for s in setups for k, v in out[s]["goals"].items()},
        # what one streamed answer holds at its last token, the old path and the new
        "model_stream_kb_per_answer": model_retained_kb(opts.words),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
