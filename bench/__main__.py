"""`make bench` (`python -m bench`): run every benchmark script in bench/, each as its own
process, collect the JSON object each prints on its last line, print a summary, and print one
combined JSON object on the last line.

A benchmark is a bench/*.py with an `if __name__ == "__main__":` block; helpers (common.py,
bare_chat.py, policy_load.py…) are skipped, and so is soak.py (`make soak`). One failing
benchmark does not stop the others; its entry says why.

    .venv/bin/python -m bench [--only agent_turn,confirm_latency] [--timeout 1800]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# Helpers with a __main__ block that are not benchmarks, and the long soak run.
NOT_BENCHMARKS = {"__main__.py", "__init__.py", "common.py", "bare_chat.py", "soak.py"}


def benchmarks() -> list[Path]:
    return [p for p in sorted(BENCH.glob("*.py"))
            if p.name not in NOT_BENCHMARKS and 'if __name__ == "__main__":' in p.read_text()]


def run_one(script: Path, timeout: float) -> dict[str, Any]:
    started = time.monotonic()
    try:
        out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    seconds = round(time.monotonic() - started, 1)
    lines = out.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if out.returncode != 0 or not isinstance(result, dict):
        tail = (out.stderr or out.stdout).strip().splitlines()[-5:]
        return {"ok": False, "seconds": seconds, "returncode": out.returncode,
                "error": "\n".join(tail)}
    return {"ok": True, "seconds": seconds, "result": result}


def goals_of(result: dict[str, Any]) -> str:
    goals = result.get("goals")
    if not isinstance(goals, dict) or not goals:
        return ""
    missed = [k for k, v in goals.items() if v is False]
    return f"goals {len(goals) - len(missed)}/{len(goals)}" + (
        f" (missed: {', '.join(missed)})" if missed else "")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--only", help="comma-separated script names, without .py")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per benchmark")
    opts = parser.parse_args()
    scripts = benchmarks()
    if opts.only:
        wanted = set(opts.only.split(","))
        scripts = [s for s in scripts if s.stem in wanted]
    results: dict[str, Any] = {}
    for script in scripts:
        print(f"--- {script.name}", file=sys.stderr, flush=True)
        entry = run_one(script, opts.timeout)
        results[script.stem] = entry
        status = "ok" if entry["ok"] else "FAILED"
        last_error = (entry.get("error") or "").splitlines()[-1:]
        extra = goals_of(entry["result"]) if entry["ok"] else " ".join(last_error)
        print(f"{script.stem:24s} {status:6s} {entry.get('seconds', '-'):>7} s  {extra}",
              flush=True)
    failed = [k for k, v in results.items() if not v["ok"]]
    print(json.dumps({"bench": "all", "ran": len(results), "failed": failed,
                      "results": results}, ensure_ascii=False))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
