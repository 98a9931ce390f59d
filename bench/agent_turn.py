"""A whole turn through the stack against a bare Gradio ChatInterface: time to first token and
tokens/s (issue 4). Goals: TTFT p50 within 50 ms of the bare baseline; at least half its
tokens/s.

The stack runs as real processes (sandbox, policy sidecar, agent; the offline planner with no
token delay). Each agent turn is a new conversation with one tool call (search_dashboards,
through the policy gate and the sandbox) and an answer of ~210 tokens. The baseline is a bare
ChatInterface (bench/bare_chat.py, mounted the same way) streaming the same text, one event per
token. Both are driven by the same client, the real @gradio/client (bench/js/client.mjs):
time to first token is from the submit to the first text; tokens/s is the answer's tokens over
the time from the first text to the end. Prints one JSON object on its last line.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/agent_turn.py [--repeats 20] [--words 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from gradio_client import Client

from common import Stack, bare_server, bench_env, gradio_url, run_client, summary

PROMPT = "find sales dashboards in ss-dev and echo {words} words"


def agent_text(stack: Stack, prompt: str) -> str:
    """The answer the agent streams for this prompt (also a warm-up turn)."""
    client = Client(stack.gradio_url, headers={"Authorization": f"Bearer {stack.token('alice')}"},
                    verbose=False)
    last: dict[str, Any] = {}
    kinds: set[str] = set()
    for ev in client.submit(prompt, api_name="/chat"):
        last = ev
        kinds.add(str(ev.get("metadata", {}).get("type")))
    assert last.get("metadata", {}).get("message_id"), f"no final answer: {last}"
    # By its events: the answer names the tool by its title, in the turn's language.
    assert "tool_start" in kinds and "tool_end" in kinds, f"the turn made no tool call: {kinds}"
    return str(last["content"])


def measure(run: dict[str, Any]) -> dict[str, Any]:
    streams = [s for r in run["rounds"] for s in r["streams"]]
    bad = [s for s in streams if not s["final_ok"] or s["error"] or s["lost"] or s["dup"]]
    ttft = [s["first"] for s in streams]
    rate = [s["tokens"] / ((s["end"] - s["first"]) / 1000) for s in streams]
    return {"turns": len(streams), "failed": len(bad), "ttft_ms": summary(ttft),
            "tokens_per_s": round(statistics.median(rate)),
            "events_per_turn": round(statistics.median(s["events"] for s in streams)),
            "total_ms": summary([s["end"] for s in streams])}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--words", type=int, default=200)
    opts = parser.parse_args()
    prompt = PROMPT.format(words=opts.words)
    with bench_env("agent-turn", AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0") as (stack, tmp):
        text = agent_text(stack, prompt)
        spec = {"mode": "streams", "n": 1, "rounds": opts.repeats, "expect": text}
        agent = measure(run_client({**spec, "url": stack.gradio_url, "agent": True,
                                    "token": stack.token("alice"), "message": prompt}))
        with bare_server(tmp) as bare:
            run_client({**spec, "rounds": 2, "url": gradio_url(bare), "agent": False,
                        "message": text})  # warm-up
            baseline = measure(run_client({**spec, "url": gradio_url(bare), "agent": False,
                                           "message": text}))
    ttft_delta = round(agent["ttft_ms"]["p50"] - baseline["ttft_ms"]["p50"], 1)
    rate_ratio = round(agent["tokens_per_s"] / baseline["tokens_per_s"], 2)
    print(json.dumps({
        "bench": "agent_turn", "prompt": prompt, "answer_tokens": len(text.split()),
        "agent": agent, "bare_chatinterface": baseline,
        "ttft_p50_delta_ms": ttft_delta, "tokens_per_s_ratio": rate_ratio,
        "goals": {"ttft_within_50ms": ttft_delta <= 50, "tokens_per_s_at_least_half":
                  rate_ratio >= 0.5, "no_failed_turns": agent["failed"] == 0},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
