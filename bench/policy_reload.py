"""Reload storm: the policy folder is swapped every 50 ms while the sidecar answers under load.

The folder is laid out like a ConfigMap (`..data` symlink swapped in one rename) and
alternates between two valid policies, A and B, whose answers differ for a probe user (B
lets role `auditor` read). Every answer names the revision it was decided by; an answer that
does not match that revision's expected decision is wrong. Baseline in the same run: the
same load with no reloads. Goals: 0 wrong decisions and 0 errors.

    .venv/bin/python bench/policy_reload.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import uvloop

from agentchat.policy.reload import build_snapshot
from agentchat.settings import PACKAGE_DATA
from policy_load import (
    build_request,
    closed_loop,
    data_dir_with_tokens,
    emit,
    free_port,
    process_cpu,
    sidecar,
)
from testkit.synthetic_policies import SHIPPED_POLICY

SWAP_EVERY_S = 0.05
EXTRA_B = "p, auditor, *, read, allow\n"


def make_versions(base: Path) -> tuple[Path, Path]:
    a, b = base / "A", base / "B"
    shutil.copytree(SHIPPED_POLICY, a)
    shutil.copytree(SHIPPED_POLICY, b)
    with (b / "policy.csv").open("a") as f:
        f.write(EXTRA_B)
    return a, b


def swapper(root: Path, versions: tuple[Path, Path], stop: threading.Event,
            counter: list[int]) -> None:
    """Swap `..data` between A and B every 50 ms, as kubelet does (new folder, one rename)."""
    i = 0
    while not stop.is_set():
        i += 1
        name = f"..v{i}-{uuid.uuid4().hex[:6]}"
        shutil.copytree(versions[i % 2], root / name)
        tmp = root / "..data_tmp"
        tmp.symlink_to(name)
        old = os.readlink(root / "..data")
        os.rename(tmp, root / "..data")
        shutil.rmtree(root / old, ignore_errors=True)
        counter[0] += 1
        time.sleep(SWAP_EVERY_S)


async def run(port: int, requests: list[bytes], seconds: float) -> object:
    return await closed_loop(port, requests, connections=8, seconds=seconds, keep_bodies=True)


def judge(result: object, expected: dict[str, str]) -> dict:  # type: ignore[no-untyped-def]
    wrong = 0
    seen: dict[str, int] = {}
    for body in result.bodies:  # type: ignore[attr-defined]
        answer = json.loads(body)
        rev = answer.get("policy_revision")
        seen[rev] = seen.get(rev, 0) + 1
        if expected.get(rev) != answer.get("decision"):
            wrong += 1
    n = len(result.latencies)  # type: ignore[attr-defined]
    return {
        "requests": n, "wrong_decisions": wrong,
        "errors": result.errors + n - result.statuses.get(200, 0),  # type: ignore[attr-defined]
        "per_s": round(result.rate, 1),  # type: ignore[attr-defined]
        "p50_ms": round(result.pct(50) * 1e3, 3),  # type: ignore[attr-defined]
        "p99_ms": round(result.pct(99) * 1e3, 3),  # type: ignore[attr-defined]
        "revisions_seen": len(seen),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    _folder, env, tokens = data_dir_with_tokens()
    base = Path(tempfile.mkdtemp(prefix="policy-storm-"))
    versions = make_versions(base)
    catalog = PACKAGE_DATA / "catalog.yaml"
    rev = {name: build_snapshot(v, catalog)[0].revision for name, v in zip("AB", versions,
                                                                         strict=True)}
    expected = {rev["A"]: "deny", rev["B"]: "allow"}

    root = base / "live"
    root.mkdir()
    shutil.copytree(versions[0], root / "..v0")
    (root / "..data").symlink_to("..v0")
    for name in ("model.conf", "policy.csv", "tests"):
        (root / name).symlink_to(f"..data/{name}")

    from agentchat.identity import DevUserIssuer
    from agentchat.settings import SharedSettings

    auditor = DevUserIssuer(SharedSettings()).mint("ann", ["auditor"])
    requests = [build_request("/v1/check", {
        "request_id": f"storm-{i}", "environment": "prod", "tool": "list_databases",
        "arguments": {"env_id": "prod"}}, {"Authorization": f"Bearer {tokens['service']}",
                                             "X-User-JWT": auditor}) for i in range(10)]
    port = free_port()
    out: dict = {"benchmark": "policy_reload", "swap_every_ms": SWAP_EVERY_S * 1000}
    with sidecar({**env, "AGENTCHAT_POLICY_DIR": str(root),
                  "AGENTCHAT_POLICY_TUNING__RELOAD_DEBOUNCE_MS": "10"}, port) as proc:
        out["baseline_no_reloads"] = judge(uvloop.run(run(port, requests, args.seconds / 2)),
                                           expected)
        stop, swaps = threading.Event(), [0]
        thread = threading.Thread(target=swapper, args=(root, versions, stop, swaps))
        cpu = process_cpu(proc.pid)
        thread.start()
        try:
            storm = uvloop.run(run(port, requests, args.seconds))
        finally:
            stop.set()
            thread.join()
        out["storm"] = judge(storm, expected)
        out["storm"]["swaps"] = swaps[0]
        out["storm"]["server_cpu_s"] = round(process_cpu(proc.pid) - cpu, 2)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        for line in metrics.splitlines():
            if line.startswith("agentchat_policy_reloads_total{"):
                result = line.split('"')[1]
                out["storm"][f"reloads_{result}"] = int(float(line.split()[-1]))
    out["goal_zero_wrong"] = out["storm"]["wrong_decisions"] == 0
    out["goal_zero_errors"] = out["storm"]["errors"] == 0
    emit(out)


if __name__ == "__main__":
    main()
