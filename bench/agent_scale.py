"""200 conversations at once, 200 tokens each (issue 4; ARCHITECTURE "Streaming at scale").
Goals: no event lost or duplicated; p99 gap between events under 250 ms; under 256 KB of
agent memory per conversation.

The stack runs as real processes with the planner paced at 30 tokens/s (a realistic model) and
text coalesced every AGENTCHAT_AGENT_FLUSH_INTERVAL_S (default 0.05). The client is the real
@gradio/client under Node (bench/js/client.mjs), one client per conversation, all submitting
at once. Lost or duplicated is judged by seq and by the final text against the joined tokens
and the expected answer. Memory is the agent process's RSS (psutil) idle after a warm-up,
at its peak during the run and a few seconds after it. The baseline in the same run is a bare
Gradio ChatInterface (bench/bare_chat.py) paced the same and yielding one event per token.
Each side reports gaps between events, time to first token, and each stream's slowdown: its
time from submit to end over the model's own time (tokens x delay). Prints one JSON object
on its last line.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/agent_scale.py [--conversations 200] [--words 200]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

from common import RssSampler, bare_server, bench_env, gradio_url, run_client, summary


def measure(run: dict[str, Any], token_delay_s: float) -> dict[str, Any]:
    streams = run["rounds"][0]["streams"]
    gaps = [b - a for s in streams for a, b in zip(s["times"], s["times"][1:], strict=False)]
    model_ms = [s["tokens"] * token_delay_s * 1000 for s in streams]
    slowdown = [s["end"] / m for s, m in zip(streams, model_ms, strict=True) if m]
    errors = sorted({s["error"] for s in streams if s["error"]})
    return {
        "streams": len(streams), "final_text_ok": sum(s["final_ok"] for s in streams),
        "events": sum(s["events"] for s in streams),
        "events_lost": sum(s["lost"] for s in streams),
        "events_duplicated": sum(s["dup"] for s in streams),
        "errors": errors[:5], "gap_ms": summary(gaps), "ttft_ms": summary([s["first"] or 0
                                                                            for s in streams]),
        "slowdown": summary(slowdown, 2), "wall_s": round(run["rounds"][0]["wall_ms"] / 1000, 2),
        "events_per_s": round(sum(s["events"] for s in streams)
                              / (run["rounds"][0]["wall_ms"] / 1000)),
    }


def langchain_retained_kb(words: int) -> float:
    """What LangChain itself holds for one streamed answer of `words` tokens, at its last token.

    BaseChatModel keeps every ChatGenerationChunk of a streaming generation until the end (to
    merge them for on_llm_end), so this is a floor under the agent's memory per live
    conversation whatever the agent does. Measured with tracemalloc on the offline planner's
    real streaming path, a callback handler per token as under LangGraph's messages mode.
    """
    import asyncio
    import tracemalloc

    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import HumanMessage

    from agentchat.agent.graph.offline.planner import OfflinePlanner

    held: list[int] = []

    class AtToken(BaseCallbackHandler):
        run_inline = True

        def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
            held.append(tracemalloc.get_traced_memory()[0])

    async def one() -> None:
        await OfflinePlanner().ainvoke([HumanMessage(f"echo {words} words")],
                                       config={"callbacks": [AtToken()]}, stream=True)

    asyncio.run(one())  # warm: imports, caches
    held.clear()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    asyncio.run(one())
    tracemalloc.stop()
    return round((max(held) - start) / 1024, 1)


def bare_run(tmp: Path, spec: dict[str, Any], text: str, token_delay_s: float
             ) -> dict[str, Any]:
    """The same streams from the bare ChatInterface, paced the same, one event per token."""
    with bare_server(tmp, token_delay_s) as bare:
        bspec = {**spec, "url": gradio_url(bare), "agent": False, "message": text,
                 "token": None}
        run_client({**bspec, "n": 10})  # warm-up
        return measure(run_client(bspec), token_delay_s)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--token-delay", type=float, default=1 / 30)
    parser.add_argument("--no-baseline", action="store_true", help="the agent only")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before 'after' RSS")
    opts = parser.parse_args()
    prompt = f"echo {opts.words} words"
    text = " ".join(f"w{i}" for i in range(opts.words))
    n = opts.conversations
    with bench_env("agent-scale",
                   AGENTCHAT_AGENT_PLANNER_TOKEN_DELAY_S=str(opts.token_delay)) as (stack, tmp):
        spec = {"mode": "streams", "n": n, "expect": text, "url": stack.gradio_url,
                "agent": True, "token": stack.token("alice"), "message": prompt}
        run_client({**spec, "n": 10})  # warm-up: selection, pools, Gradio
        gc.collect()
        time.sleep(1.0)
        with RssSampler(stack.agent.proc.pid) as rss:  # type: ignore[union-attr]
            before = rss.rss()
            agent_run = run_client(spec)
        time.sleep(opts.settle)
        after = rss.rss()
        agent = measure(agent_run, opts.token_delay)
        agent["rss_mb"] = {"before": round(before / 2**20, 1), "peak": round(rss.peak / 2**20, 1),
                           "after": round(after / 2**20, 1)}
        agent["kb_per_conversation"] = {"peak": round((rss.peak - before) / 1024 / n, 1),
                                        "retained": round((after - before) / 1024 / n, 1)}
        stack.stop()  # the baseline gets the machine to itself, as the agent did
        baseline = {} if opts.no_baseline else bare_run(tmp, spec, text, opts.token_delay)
    print(json.dumps({
        "bench": "agent_scale", "conversations": n, "tokens_per_answer": opts.words,
        "token_delay_s": round(opts.token_delay, 4), "agent": agent,
        "bare_chatinterface": baseline,
        # floor under memory per live conversation: LangChain's own chunks for one answer
        "langchain_kb_per_streamed_answer": langchain_retained_kb(opts.words),
        "goals": {"no_events_lost_or_duplicated": agent["events_lost"] == 0
                  and agent["events_duplicated"] == 0 and agent["final_text_ok"] == n,
                  "p99_gap_under_250ms": agent["gap_ms"]["p99"] < 250,
                  "under_256kb_per_conversation": agent["kb_per_conversation"]["peak"] < 256},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
