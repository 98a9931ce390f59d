"""The cost of seeing what happened (issue 20): tracing and the audit trail on, against both off.

1. Two turns, each ~210 streamed tokens from the offline planner with no token delay: `read`,
   bench/agent_turn.py's (one read call: the audit writes nothing), and `write` (one write
   call without a card, refresh_dataset in ss-dev: the audit writes its decision and execution
   rows). On two whole stacks side by side: `off` (no OTEL_*, AGENTCHAT_AGENT_AUDIT=false) and
   `on` (agent and sidecar exporting every span over OTLP/HTTP to a local receiver that decodes
   each request, and the audit on, its default). Blocks alternate off/on so machine load drifts
   onto both alike. TTFT and tokens/s by the same client (the real @gradio/client), and the
   CPU seconds the agent and sidecar processes spent per turn (the load-independent cost).
   Goal: `on` within 5% of `off`.
2. The sidecar alone at a paced 1,000 decisions/s: off, on with every request's `traceparent`
   sampled, on with a tenth sampled (what `OTEL_TRACES_SAMPLER=parentbased_traceidratio` and
   `OTEL_TRACES_SAMPLER_ARG=0.1` at the agent send; the sidecar follows the parent's flag),
   off again. Goal: p99 under 2 ms with tracing on.

Prints one JSON object on its last line.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/observe_cost.py [--blocks 10] [--rounds 10] [--seconds 10]

`--on-env`/`--off-env NAME=VALUE` add to either side: the chart's default sampling is
`--on-env OTEL_TRACES_SAMPLER=parentbased_traceidratio --on-env OTEL_TRACES_SAMPLER_ARG=0.1`,
and `--off-env AGENTCHAT_AGENT_AUDIT=true` compares tracing alone (the audit on both sides).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_turn import PROMPT, agent_text, measure
from agentchat.db import migrate_url
from common import MEMPROBE, gcstats_diff, read_gcstats, run_client, scratch_database
from policy_load import (
    check_requests,
    data_dir_with_tokens,
    free_port,
    paced,
    process_cpu,
    sidecar,
)
from testkit.otlp import OtlpReceiver
from testkit.stack import Stack, running_stack


@contextlib.contextmanager
def stack(tmp: Path, name: str, agent_env: dict[str, str],
          policy_env: dict[str, str]) -> Iterator[Stack]:
    with scratch_database(tmp / name) as url:
        asyncio.run(migrate_url(url))
        with running_stack(tmp / name / "data", url, policy_env=policy_env,
                           AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0", **agent_env) as s:
            yield s


# A write call with no card (editor alice, ss-dev, no ss-tools output read before it).
WRITE_PROMPT = "refresh dataset 7 in ss-dev and echo {words} words"


def turns(opts: argparse.Namespace, rx: OtlpReceiver) -> dict[str, Any]:
    prompts = {"read": PROMPT.format(words=opts.words),
               "write": WRITE_PROMPT.format(words=opts.words)}
    tmp = Path(tempfile.mkdtemp(prefix="observe-cost-"))
    # The SDK's schedule delay is 5000 ms; --on-env adds OTEL_* to try (e.g. a sampler).
    otel = {**rx.env(), "OTEL_BSP_SCHEDULE_DELAY": "1000", **dict(opts.on_env)}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        kind: {"off": [], "on": []} for kind in prompts}
    cpu: dict[str, dict[str, float]] = {kind: {"off": 0.0, "on": 0.0} for kind in prompts}
    try:
        with stack(tmp, "off", {"AGENTCHAT_AGENT_AUDIT": "false", **dict(opts.off_env)},
                   {}) as off, \
                stack(tmp, "on", {"AGENTCHAT_AGENT_AUDIT": "true", **otel}, otel) as on:
            texts: dict[tuple[str, str], str] = {}
            for kind, prompt in prompts.items():
                for name, s in (("off", off), ("on", on)):
                    texts[kind, name] = agent_text(s, prompt)
                assert texts[kind, "off"] == texts[kind, "on"], "the stacks answer differently"
            pids = {name: [s.agent.proc.pid, s.policy.proc.pid]  # type: ignore[union-attr]
                    for name, s in (("off", off), ("on", on))}
            for block in range(opts.blocks):
                order = (("off", off), ("on", on)) if block % 2 == 0 else (("on", on),
                                                                           ("off", off))
                for kind, prompt in prompts.items():
                    for name, s in order:
                        before = sum(process_cpu(pid) for pid in pids[name])
                        runs[kind][name].append(run_client({
                            "mode": "streams", "n": 1, "rounds": opts.rounds,
                            "expect": texts[kind, name], "url": s.gradio_url, "agent": True,
                            "token": s.token("alice"), "message": prompt}))
                        cpu[kind][name] += sum(process_cpu(pid) for pid in pids[name]) - before
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out: dict[str, Any] = {}
    for kind, sides in runs.items():
        out[kind] = {}
        for name, parts in sides.items():
            merged = {"rounds": [r for part in parts for r in part["rounds"]]}
            out[kind][name] = measure(merged)
            out[kind][name]["cpu_ms_per_turn"] = round(
                cpu[kind][name] * 1000 / max(1, out[kind][name]["turns"]), 2)
        o, f = out[kind]["on"], out[kind]["off"]
        out[kind]["ratios_on_over_off"] = {
            "ttft_p50": round(o["ttft_ms"]["p50"] / f["ttft_ms"]["p50"], 3),
            "tokens_per_s": round(o["tokens_per_s"] / f["tokens_per_s"], 3),
            "cpu_per_turn": round(o["cpu_ms_per_turn"] / max(f["cpu_ms_per_turn"], 1e-9), 3)}
    out["spans_exported"] = rx.span_count
    out["export_requests"] = rx.requests
    return out


async def _decisions(port: int, requests: list[bytes], seconds: float) -> dict[str, Any]:
    await paced(port, requests, rate=1000, seconds=2)  # warm-up
    res = await paced(port, requests, rate=1000, seconds=seconds)
    return {"p50_ms": round(res.pct(50) * 1000, 3), "p99_ms": round(res.pct(99) * 1000, 3),
            "rate": round(res.rate), "max_send_lag_ms": round(res.max_send_lag_s * 1000, 1),
            "statuses": res.statuses}


def _traced(plain: list[bytes], sampled: float) -> list[bytes]:
    """The requests with a `traceparent` each, as the agent's httpx spans send them: a
    `sampled` share with the sampled flag (01), the rest not sampled (00)."""
    out = []
    for i, raw in enumerate(plain * 10):  # 180 requests, so a tenth is a whole number
        head, body = raw.split(b"\r\n\r\n", 1)  # policy_load.build_request's bytes
        flag = "01" if (i % 10) < round(sampled * 10) else "00"
        parent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{flag}"
        out.append(head + f"\r\ntraceparent: {parent}".encode() + b"\r\n\r\n" + body)
    return out


def decisions(opts: argparse.Namespace, rx: OtlpReceiver) -> dict[str, Any]:
    _, env, tokens = data_dir_with_tokens()
    probe: dict[str, str] = {}
    gc_dir = Path(tempfile.mkdtemp(prefix="observe-cost-gc-")) if opts.gcstats else None
    plain = check_requests(tokens)
    traced = {**rx.env(), **dict(opts.on_env)}
    out: dict[str, Any] = {}
    before = rx.span_count
    for name, extra, requests in (("off", {}, plain),
                                  ("on", traced, _traced(plain, 1.0)),
                                  ("on_tenth_sampled", traced, _traced(plain, 0.1)),
                                  ("off_again", {}, plain)):
        port = free_port()
        if gc_dir is not None:  # bench/memprobe times the sidecar's collections
            probe = {"PYTHONPATH": str(MEMPROBE), "AGENTCHAT_BENCH_GCSTATS_FILE":
                     str(gc_dir / f"{name}.json")}
        with sidecar({**env, **extra, **probe, "AGENTCHAT_POLICY_DECISION_LOG_STDOUT": "false"},
                     port) as proc:
            cpu = process_cpu(proc.pid)
            gc0: dict[str, Any] = {}
            if gc_dir is not None:  # after the probe's next write: start-up's own collections
                time.sleep(1.1)     # (the freeze's gc.collect()) are not the run's
                gc0 = read_gcstats(gc_dir / f"{name}.json")
            out[name] = asyncio.run(_decisions(port, requests, opts.seconds))
            if gc_dir is not None:
                time.sleep(1.1)  # the probe rewrites its file once a second
                out[name]["gc"] = gcstats_diff(gc0, read_gcstats(gc_dir / f"{name}.json"))
            decided = sum(out[name]["statuses"].values()) + 2000  # with the warm-up's
            out[name]["cpu_ms_per_decision"] = round(
                (process_cpu(proc.pid) - cpu) * 1000 / decided, 3)
    out["spans_exported"] = rx.span_count - before
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=10, help="off/on pairs of rounds")
    parser.add_argument("--rounds", type=int, default=10,
                        help="turns per block, turn kind and stack")
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0, help="paced decisions, each")
    parser.add_argument("--on-env", action="append", default=[], metavar="NAME=VALUE",
                        type=lambda kv: tuple(kv.split("=", 1)),
                        help="extra environment of the traced stack and sidecar")
    parser.add_argument("--off-env", action="append", default=[], metavar="NAME=VALUE",
                        type=lambda kv: tuple(kv.split("=", 1)),
                        help="extra environment of the untraced stack (e.g. "
                             "AGENTCHAT_AGENT_AUDIT=true: tracing alone is compared)")
    parser.add_argument("--skip-sidecar", action="store_true")
    parser.add_argument("--skip-turns", action="store_true")
    parser.add_argument("--gcstats", action="store_true",
                        help="the sidecar's garbage collections during each paced run")
    opts = parser.parse_args()
    with OtlpReceiver(keep=False) as rx:
        turn = None if opts.skip_turns else turns(opts, rx)
        sidecar_load = None if opts.skip_sidecar else decisions(opts, rx)
    ratios = {kind: turn[kind]["ratios_on_over_off"] for kind in ("read", "write")} \
        if turn else {}
    failed = sum(turn[k][n]["failed"] for k in ("read", "write") for n in ("off", "on")) \
        if turn else 0
    goals: dict[str, bool] = {}
    if turn:
        goals |= {
            "ttft_within_5pct": all(r["ttft_p50"] <= 1.05 for r in ratios.values()),
            "tokens_per_s_within_5pct": all(r["tokens_per_s"] >= 0.95 for r in ratios.values()),
            "no_failed_turns": failed == 0,
            "spans_arrived": turn["spans_exported"] > 0}
    if sidecar_load:
        goals |= {
            "sidecar_p99_under_2ms_traced": sidecar_load["on"]["p99_ms"] < 2.0,
            "sidecar_p99_under_2ms_tenth_sampled":
                sidecar_load["on_tenth_sampled"]["p99_ms"] < 2.0}
    print(json.dumps({
        "bench": "observe_cost", "on_env": dict(opts.on_env), "off_env": dict(opts.off_env),
        "turns": turn,
        "sidecar_1000_per_s": sidecar_load, "ratios_on_over_off": ratios, "goals": goals}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
