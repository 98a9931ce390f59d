"""The cost of seeing what happened (issue 20): tracing and the audit trail on, against both off.

1. bench/agent_turn.py's turn (one tool call, ~210 streamed tokens, the offline planner with
   no token delay), on two whole stacks running side by side: `off` (no OTEL_*,
   AGENTCHAT_AGENT_AUDIT=false) and `on` (agent and sidecar exporting every span over OTLP/HTTP
   to a local receiver that decodes each request, and the audit on, its default). Rounds
   alternate off/on so machine load drifts onto both alike. TTFT and tokens/s by the same
   client (the real @gradio/client). Goal: `on` within 5% of `off`.
2. The sidecar alone at a paced 1,000 decisions/s, with tracing on (every request carries a
   sampled `traceparent`, as the agent sends it) against off. Goal: p99 under 2 ms with it on.

Prints one JSON object on its last line.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/observe_cost.py [--blocks 4] [--rounds 5] [--seconds 10]
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_turn import PROMPT, agent_text, measure
from agentchat.db import migrate_url
from common import run_client, scratch_database
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
                           AGENTCHAT_AGENT_PLANNER_TOKEN_DELAY_S="0", **agent_env) as s:
            yield s


def turns(opts: argparse.Namespace, rx: OtlpReceiver) -> dict[str, Any]:
    prompt = PROMPT.format(words=opts.words)
    tmp = Path(tempfile.mkdtemp(prefix="observe-cost-"))
    # The SDK's schedule delay is 5000 ms; --on-env adds OTEL_* to try (e.g. a sampler).
    otel = {**rx.env(), "OTEL_BSP_SCHEDULE_DELAY": "1000", **dict(opts.on_env)}
    try:
        with stack(tmp, "off", {"AGENTCHAT_AGENT_AUDIT": "false"}, {}) as off, \
                stack(tmp, "on", {"AGENTCHAT_AGENT_AUDIT": "true", **otel}, otel) as on:
            texts = {name: agent_text(s, prompt) for name, s in (("off", off), ("on", on))}
            assert texts["off"] == texts["on"], "the two stacks answer differently"
            runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
            for block in range(opts.blocks):
                order = (("off", off), ("on", on)) if block % 2 == 0 else (("on", on),
                                                                           ("off", off))
                for name, s in order:
                    runs[name].append(run_client({
                        "mode": "streams", "n": 1, "rounds": opts.rounds,
                        "expect": texts[name], "url": s.gradio_url, "agent": True,
                        "token": s.token("alice"), "message": prompt}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out: dict[str, Any] = {}
    for name, parts in runs.items():
        merged = {"rounds": [r for part in parts for r in part["rounds"]]}
        out[name] = measure(merged)
    out["spans_exported"] = rx.span_count
    out["export_requests"] = rx.requests
    return out


async def _decisions(port: int, requests: list[bytes], seconds: float) -> dict[str, Any]:
    await paced(port, requests, rate=1000, seconds=2)  # warm-up
    res = await paced(port, requests, rate=1000, seconds=seconds)
    return {"p50_ms": round(res.pct(50) * 1000, 3), "p99_ms": round(res.pct(99) * 1000, 3),
            "rate": round(res.rate), "max_send_lag_ms": round(res.max_send_lag_s * 1000, 1),
            "statuses": res.statuses}


def decisions(opts: argparse.Namespace, rx: OtlpReceiver) -> dict[str, Any]:
    _, env, tokens = data_dir_with_tokens()
    plain = check_requests(tokens)
    # The same requests with a sampled parent each, as the agent's httpx spans send them.
    parented = []
    for raw in plain:
        head, body = raw.split(b"\r\n\r\n", 1)  # policy_load.build_request's bytes
        parent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
        parented.append(head + f"\r\ntraceparent: {parent}".encode() + b"\r\n\r\n" + body)
    out: dict[str, Any] = {}
    before = rx.span_count
    for name, extra, requests in (("off", {}, plain),
                                  ("on", {**rx.env(), **dict(opts.on_env)}, parented),
                                  ("off_again", {}, plain)):
        port = free_port()
        with sidecar({**env, **extra, "AGENTCHAT_POLICY_DECISION_LOG_STDOUT": "false"},
                     port) as proc:
            cpu = process_cpu(proc.pid)
            out[name] = asyncio.run(_decisions(port, requests, opts.seconds))
            out[name]["sidecar_cpu_s"] = round(process_cpu(proc.pid) - cpu, 2)
    out["spans_exported"] = rx.span_count - before
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=4, help="off/on pairs of rounds")
    parser.add_argument("--rounds", type=int, default=5, help="turns per block and stack")
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0, help="paced decisions, each")
    parser.add_argument("--on-env", action="append", default=[], metavar="NAME=VALUE",
                        type=lambda kv: tuple(kv.split("=", 1)),
                        help="extra environment of the traced stack and sidecar")
    parser.add_argument("--skip-sidecar", action="store_true")
    opts = parser.parse_args()
    with OtlpReceiver(keep=False) as rx:
        turn = turns(opts, rx)
        sidecar_load = None if opts.skip_sidecar else decisions(opts, rx)
    off, on = turn["off"], turn["on"]
    ttft_ratio = round(on["ttft_ms"]["p50"] / off["ttft_ms"]["p50"], 3)
    rate_ratio = round(on["tokens_per_s"] / off["tokens_per_s"], 3)
    print(json.dumps({
        "bench": "observe_cost", "on_env": dict(opts.on_env), "turns": turn,
        "sidecar_1000_per_s": sidecar_load,
        "ttft_p50_ratio_on_over_off": ttft_ratio, "tokens_per_s_ratio_on_over_off": rate_ratio,
        "goals": {
            "ttft_within_5pct": ttft_ratio <= 1.05, "tokens_per_s_within_5pct": rate_ratio >= 0.95,
            "sidecar_p99_under_2ms_traced": sidecar_load is not None
            and sidecar_load["on"]["p99_ms"] < 2.0,
            "no_failed_turns": off["failed"] == on["failed"] == 0,
            "spans_arrived": turn["spans_exported"] > 0,
        },
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
