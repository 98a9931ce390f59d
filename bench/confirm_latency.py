"""Confirm-to-first-event latency against a plain new turn in the same run (issue 5).
Goal: the confirm's p50 and p99 no more than 1.5x the plain turn's.

The stack runs as real processes (the offline planner with no token delay). Per repeat, with
the real @gradio/client (bench/js/client.mjs): a new conversation asks to deploy dashboard 42
to prod (a card), the card is confirmed, then a plain new turn in the same conversation
deploys it to ss-dev (no card there). Reported: time from each submit to its first event; for
the confirm also to its second event (the resumed run's first, after `confirm_resolved`).
Prints one JSON object on its last line.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/confirm_latency.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import json
import sys

from common import bench_env, percentile, run_client, summary

CARD = "deploy dashboard 42 to prod"
PLAIN = "deploy dashboard 42 to ss-dev"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    opts = parser.parse_args()
    with bench_env("confirm-latency",
                   AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0") as (stack, _):
        spec = {"mode": "confirm", "url": stack.gradio_url, "token": stack.token("alice"),
                "card_message": CARD, "plain_message": PLAIN}
        run_client({**spec, "repeats": 3})  # warm-up
        result = run_client({**spec, "repeats": opts.repeats})
    runs, errors = result["repeats"], result["errors"]
    confirm = [r["confirm_first"] for r in runs]
    resumed = [r["confirm_second"] for r in runs]
    plain = [r["plain_first"] for r in runs]
    ratio = {p: round(percentile(confirm, q) / percentile(plain, q), 2)
             for p, q in (("p50", 50), ("p99", 99))}
    print(json.dumps({
        "bench": "confirm_latency", "repeats": len(runs), "failed": len(errors),
        "failures": errors[:3],
        "confirm_first_event_ms": summary(confirm),
        "confirm_resumed_run_first_event_ms": summary(resumed),
        "plain_turn_first_event_ms": summary(plain),
        "card_turn_first_event_ms": summary([r["card_first"] for r in runs]),
        "confirm_over_plain": ratio,
        "resumed_over_plain": {p: round(percentile(resumed, q) / percentile(plain, q), 2)
                               for p, q in (("p50", 50), ("p99", 99))},
        "goals": {"confirm_within_1_5x_plain": ratio["p50"] <= 1.5 and ratio["p99"] <= 1.5,
                  "no_failed_repeats": not errors},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
