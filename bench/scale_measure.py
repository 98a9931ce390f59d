"""bench/agent_scale.py's figures: one side's streams measured (TTFT, gaps, slowdown, lost and
duplicated, bytes per token event, client CPU), and the goals read off the rounds."""

from __future__ import annotations

import collections
import statistics
from typing import Any

from common import percentile, summary


def ttft_summary(streams: list[dict[str, Any]]) -> dict[str, float]:
    """TTFT p50 (the goal's), p99 and max, and its shape: p10, p90 and the mean (a server
    that starts turns in arrival order and one that advances all at once can have the same
    mean and last first token, and different medians)."""
    firsts = [s["first"] or 0 for s in streams]
    return {**summary(firsts), "p10": round(percentile(firsts, 10), 1),
            "p90": round(percentile(firsts, 90), 1),
            "mean": round(sum(firsts) / max(1, len(firsts)), 1)}


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
        "errors": errors[:5], "gap_ms": summary(gaps), "ttft_ms": ttft_summary(streams),
        "slowdown": summary(slowdown, 2), "wall_s": round(run["rounds"][0]["wall_ms"] / 1000, 2),
        "events_per_s": round(sum(s["events"] for s in streams)
                              / (run["rounds"][0]["wall_ms"] / 1000)),
        "tokens": sum(s["tokens"] for s in streams),
        # On the wire: every byte of the event streams over the events that carry text (the
        # agent's coalesced stream_tokens, the bare's and the peer's one-token events).
        "token_events": sum(s.get("token_events", 0) for s in streams),
        "bytes_per_token_event": round(run["rounds"][0].get("bytes", 0)
                                       / max(1, sum(s.get("token_events", 0) for s in streams))),
        "client_cpu_ms_per_token": round(run["rounds"][0].get("cpu_ms", 0.0)
                                         / max(1, sum(s["tokens"] for s in streams)), 3),
        # With ~100 events a stream, the p99 gap is about each stream's largest: between
        # which events it falls (the agent's events are typed; the bare's are all text).
        "largest_gap_between": dict(collections.Counter(
            _largest_gap_between(s) for s in streams if s.get("types")).most_common(4)),
    }


def _largest_gap_between(stream: dict[str, Any]) -> str:
    times, types = stream["times"], stream["types"]
    if len(times) < 2:
        return "-"
    i = max(range(len(times) - 1), key=lambda k: times[k + 1] - times[k])
    return f"{types[i]} -> {types[i + 1]}"


TTFT_GOALS = {"p50": ("ttft_p50_within_1_3x_bare", 1.3),
              "mean": ("ttft_mean_within_1_2x_bare", 1.2),
              "p99": ("ttft_p99_at_most_bare", 1.0)}


def ttft_ratios(agent: dict[str, Any], bare: dict[str, Any]) -> dict[str, float]:
    return {k: round(agent["ttft_ms"][k] / bare["ttft_ms"][k], 2) for k in TTFT_GOALS}


def ttft_goals(ratios: dict[str, float]) -> dict[str, bool]:
    return {name: ratios[k] <= limit for k, (name, limit) in TTFT_GOALS.items()}


def of_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """What the goals are read off: each TTFT ratio's median over the rounds; every other goal
    is met when most rounds meet it (a yes-or-no's median). Each round keeps its own."""
    goals: dict[str, bool] = {}
    out: dict[str, Any] = {}
    paired = [r for r in rounds if r["bare_chatinterface"]]
    if paired:
        ratios = [ttft_ratios(r["agent"], r["bare_chatinterface"]) for r in paired]
        median = {k: statistics.median(x[k] for x in ratios) for k in TTFT_GOALS}
        out["ttft_ratio"] = {"rounds": ratios, "median": median}
        goals.update(ttft_goals(median))
    for name in rounds[0]["goals"]:
        goals.setdefault(name, 2 * sum(r["goals"][name] for r in rounds) > len(rounds))
    return {**out, "goals": goals}


# Against the peer (LangGraph Agent Server with Postgres checkpoints, as shipped and with its
# poll patched): the agent's figure over the peer's of the same round, at most this much.
PEER_GOALS = {"ttft_p50": 1.0, "ttft_p99": 1.0, "gap_p99": 1.0, "cpu_per_token": 1.0,
              "kb_per_conversation": 1.0, "bytes_per_token_event": 0.5}


def figures(side: dict[str, Any]) -> dict[str, float]:
    """What the ratios compare, from one side's measure()."""
    return {"ttft_p50": side["ttft_ms"]["p50"], "ttft_p99": side["ttft_ms"]["p99"],
            "ttft_mean": side["ttft_ms"]["mean"], "gap_p99": side["gap_ms"]["p99"],
            "slowdown_p50": side["slowdown"]["p50"], "cpu_per_token": side["cpu_ms_per_token"],
            "kb_per_conversation": side["kb_per_conversation"]["peak"],
            "bytes_per_token_event": side["bytes_per_token_event"],
            "client_cpu_per_token": side["client_cpu_ms_per_token"]}


def ratios(agent: dict[str, Any], other: dict[str, Any]) -> dict[str, float]:
    a, o = figures(agent), figures(other)
    return {k: round(a[k] / o[k], 2) if o[k] else float("inf") for k in a}


def median_ratios(rounds: list[dict[str, Any]], side: str) -> dict[str, float]:
    """The agent over `side`, each ratio's median over the rounds that ran it."""
    per = [ratios(r["agent"], r[side]) for r in rounds if r.get(side)]
    if not per:
        return {}
    return {k: statistics.median(x[k] for x in per) for k in per[0]}


def peer_goals(median: dict[str, float], label: str) -> dict[str, bool]:
    return {f"vs_{label}_{k}_at_most_{limit}x": median[k] <= limit
            for k, limit in PEER_GOALS.items()}

