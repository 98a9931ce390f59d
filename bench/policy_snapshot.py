"""Compiled snapshot vs pycasbin's enforce() on the same ~2,000-line policy, same run.

The synthetic policy has 50 roles per environment, role hierarchies 3 levels deep and some
denies. Both answer the same 20,000 random requests (1 to 3 roles each, scoped or global,
every domain and object); the script reports the time per check of each, the speed-up and
the mismatches (goal: at least 1,000x and 0). The snapshot is timed cold (fresh, no memo)
and warm, and so is a full engine decision (risk, card, alternatives) for reference.

    .venv/bin/python bench/policy_snapshot.py [--requests 20000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from agentchat.catalog import load_catalog
from agentchat.policy.engine import CheckRequest, decide
from agentchat.policy.rules import read_folder, validate
from agentchat.policy.snapshot import ANY_DOMAIN, Snapshot
from agentchat.settings import PACKAGE_DATA
from testkit.policy_reference import ReferenceEnforcer
from testkit.synthetic_policies import random_requests, write_synthetic


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    catalog = load_catalog(PACKAGE_DATA / "catalog.yaml")
    folder = Path(tempfile.mkdtemp(prefix="policy-bench-")) / "policy"
    lines = write_synthetic(folder, catalog)
    source = read_folder(folder)
    validate(source, catalog)
    requests = random_requests(catalog, args.requests)

    t = time.perf_counter()
    snapshot = Snapshot(source, catalog)
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    cold = [snapshot.check(*r).allowed for r in requests]
    snap_cold_s = time.perf_counter() - t
    t = time.perf_counter()
    for r in requests:
        snapshot.check(*r)
    snap_warm_s = time.perf_counter() - t

    # Calls as the agent sends them (valid arguments, environment == the argument), so the
    # engine's time is a real decision, not an invalid_arguments refusal.
    calls = []
    for i, (roles, dom, obj) in enumerate(requests):
        tool = catalog.get(obj)
        if tool is None or (tool.environment is None) != (dom == ANY_DOMAIN):
            continue
        args_: dict[str, object] = {
            name: "task-1" if name == "task_id" else 1
            for name in tool.args.get("required", [])}
        env = None
        if tool.environment is not None:
            env = dom
            args_[tool.environment.argument] = dom
            if tool.environment.source_argument:
                args_[tool.environment.source_argument] = catalog.environments[
                    i % len(catalog.environments)]
        calls.append((roles, CheckRequest("bench", env, obj, args_, untrusted=i % 2 == 0)))
    t = time.perf_counter()
    for roles, req in calls:
        decide(snapshot, roles, req)
    decide_s = time.perf_counter() - t

    reference = ReferenceEnforcer(source, catalog)
    t = time.perf_counter()
    ref = [reference.allowed(*r) for r in requests]
    enforce_s = time.perf_counter() - t

    n = len(requests)
    mismatches = sum(a != b for a, b in zip(cold, ref, strict=True))
    per_enforce = enforce_s / n
    per_cold = snap_cold_s / n
    print(json.dumps({
        "benchmark": "policy_snapshot", "policy_lines": lines, "rules": len(source.rules),
        "requests": n, "allowed": sum(ref), "mismatches": mismatches,
        "enforce_us_per_check": round(per_enforce * 1e6, 1),
        "snapshot_cold_us_per_check": round(per_cold * 1e6, 3),
        "snapshot_warm_us_per_check": round(snap_warm_s / n * 1e6, 3),
        "engine_decide_us_per_call": round(decide_s / len(calls) * 1e6, 2),
        "compile_ms": round(compile_s * 1e3, 1),
        "speedup_cold": round(per_enforce / per_cold),
        "speedup_warm": round(per_enforce / (snap_warm_s / n)),
        "goal_speedup_1000x": per_enforce / per_cold >= 1000, "goal_zero_mismatches":
            mismatches == 0,
    }, sort_keys=True))


if __name__ == "__main__":
    main()
