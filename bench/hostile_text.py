"""The offline planner's clause split on hostile whitespace (issue 31, hole 1): the pattern it
had (the baseline, in the same run) against the one it has, on a word, a run of N spaces and a
word. The old one backtracked about cubically; the new one must stay linear up to the 16 KB
text cap. The old one is stopped at sizes where it would take minutes (`--old-max`).

    .venv/bin/python bench/hostile_text.py [--sizes 200,400,800,1600,16000] [--old-max 1600]

Prints one JSON object on its last line: per size, each pattern's best of 3 in ms.
"""

from __future__ import annotations

import argparse
import json
import re
import time

from agentchat.agent.graph.offline.rules import clauses

OLD = re.compile(r"\s*(?:;|\.\s|,?\s+(?:и|а потом|потом|затем|then|and|also)\s+)\s*")


def best_ms(fn: object, text: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn(text)  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return round(min(times) * 1000, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="200,400,800,1600,16000")
    ap.add_argument("--old-max", type=int, default=1600)
    args = ap.parse_args()
    out: dict[str, dict[str, float | None]] = {}
    for n in (int(s) for s in args.sizes.split(",")):
        text = "a" + " " * n + "b"
        old = best_ms(OLD.split, text, runs=1) if n <= args.old_max else None
        new = best_ms(clauses, text)
        out[str(n)] = {"old_ms": old, "new_ms": new}
        print(f"{n:>6} spaces: old {old if old is not None else 'skipped':>10} ms, "
              f"new {new:>8} ms")
    print(json.dumps({"benchmark": "hostile_text", "spaces": out}))


if __name__ == "__main__":
    main()
