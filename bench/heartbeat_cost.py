"""What the /chat heartbeat (issue 36, agent/chat/heartbeat.py) costs per event: a stream's
events read bare (the baseline, in the same run) and through `with_heartbeats`, from a source
that is never silent long enough for a beat (the common case: a stream_token every 50 ms).

    .venv/bin/python bench/heartbeat_cost.py [--events 50000] [--rounds 5]

Prints one JSON object on its last line: per-event µs, best of the rounds, and the overhead.
At the replica's coalesced ceiling (2,500 events/s, docs/protocol.md §2) the overhead times
2,500 is the share of one core it takes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from agentchat.agent.chat.heartbeat import with_heartbeats


async def source(n: int) -> AsyncIterator[dict[str, Any]]:
    for i in range(n):
        await asyncio.sleep(0)  # a real follow waits for the run's next event
        yield {"role": "assistant", "content": "", "metadata": {"seq": i + 1, "run_id": "r"}}


async def per_event_us(n: int, wrapped: bool) -> float:
    events = with_heartbeats(source(n), 15.0, run_id="r") if wrapped else source(n)
    started = time.perf_counter()
    async for _ in events:
        pass
    return (time.perf_counter() - started) / n * 1e6


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    bare, beat = [], []
    for _ in range(args.rounds):  # alternating, so a busy moment hits both
        bare.append(await per_event_us(args.events, False))
        beat.append(await per_event_us(args.events, True))
    overhead = min(beat) - min(bare)
    print(json.dumps({"bench": "heartbeat_cost", "events": args.events, "rounds": args.rounds,
                      "bare_us": round(min(bare), 2), "with_heartbeats_us": round(min(beat), 2),
                      "overhead_us": round(overhead, 2),
                      "core_share_at_2500_events_s": round(overhead * 2500 / 1e6, 4)}))


if __name__ == "__main__":
    asyncio.run(main())
