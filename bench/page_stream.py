"""The built-in page against the bare `/chat` API: what the page adds to a turn, early in a
conversation and after a long one (the page keeps the whole history in its chatbot).

Starts sandbox, policy sidecar and agent as real processes (the planner paced at 30 tokens/s,
a realistic model), then runs the same turns twice in the same run: the baseline through the
Python `gradio_client` on `/chat`, and the page in headless Chromium (bench/page_stream.mjs,
playwright-core). Both: one conversation, a warm-up turn, REPEATS measured turns, HISTORY more
turns, REPEATS measured turns. Reports the medians of time to first text and to the end.
Prints one JSON object on its last line.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/page_stream.py [--repeats 5] [--history 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gradio_client import Client

from common import Stack, bench_env

ROOT = Path(__file__).resolve().parent.parent

PROMPT = "найди дашборды про энергопотребление"


def api_turn(client: Client, conversation: str | None) -> tuple[dict[str, float], str]:
    t0 = time.perf_counter()
    first: float | None = None
    cid = conversation
    job = client.submit(PROMPT, None, conversation, api_name="/chat")
    for ev in job:
        cid = ev["metadata"].get("conversation_id") or cid
        if first is None and ev["metadata"].get("type") == "stream_token":
            first = time.perf_counter()
    end = time.perf_counter()
    assert cid and first is not None, "the turn streamed no text"
    return {"ttft_ms": (first - t0) * 1000, "total_ms": (end - t0) * 1000}, cid


def summary(turns: list[dict[str, float]]) -> dict[str, Any]:
    return {"ttft_ms": round(statistics.median(t["ttft_ms"] for t in turns)),
            "total_ms": round(statistics.median(t["total_ms"] for t in turns)),
            "turns": len(turns)}


def api_run(stack: Stack, repeats: int, history: int) -> dict[str, Any]:
    client = Client(stack.gradio_url, headers={"Authorization": f"Bearer {stack.token('alice')}"},
                    verbose=False)
    _, cid = api_turn(client, None)
    short = [api_turn(client, cid)[0] for _ in range(repeats)]
    for _ in range(history):
        api_turn(client, cid)
    long = [api_turn(client, cid)[0] for _ in range(repeats)]
    return {"short": summary(short), "long_history": summary(long)}


def page_run(stack: Stack, repeats: int, history: int) -> dict[str, Any]:
    node = shutil.which("node")
    assert node, "Node 20 is required"
    env = {**os.environ, "GRADIO_URL": stack.gradio_url, "PROMPT": PROMPT,
           "REPEATS": str(repeats), "HISTORY": str(history)}
    out = subprocess.run([node, str(ROOT / "bench" / "page_stream.mjs")], env=env,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"page_stream.mjs failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--history", type=int, default=20)
    parser.add_argument("--token-delay", type=float, default=1 / 30)
    opts = parser.parse_args()
    with bench_env("page-bench",
                   AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S=str(opts.token_delay)) as (
            stack, _):
        api = api_run(stack, opts.repeats, opts.history)
        page = page_run(stack, opts.repeats, opts.history)
    overhead = {k: {"ttft_ms": page[k]["ttft_ms"] - api[k]["ttft_ms"],
                    "total_ms": page[k]["total_ms"] - api[k]["total_ms"]}
                for k in ("short", "long_history")}
    print(json.dumps({"bench": "page_stream", "prompt": PROMPT, "history_turns": opts.history,
                      "token_delay_s": round(opts.token_delay, 4), "api_baseline": api,
                      "page": page, "page_overhead": overhead}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
