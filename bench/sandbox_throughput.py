"""Sandbox throughput: what the full tool pipeline (two JWTs verified, arguments validated, RBAC,
audit) costs per request, against `/livez` on the same process as the baseline.

Starts `agentchat sandbox` as a real process with a fresh data folder, then, with CONCURRENCY
clients for REQUESTS requests each kind: GET /livez (baseline), GET /api/environments (a read
tool), GET /api/dashboards?query=… (a search), POST deploy replayed by one Idempotency-Key.
Prints one JSON object on its last line.

    .venv/bin/python bench/sandbox_throughput.py [--requests 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from agentchat.identity import DevUserIssuer
from agentchat.keys import ensure_ring, sign_service_token
from agentchat.settings import SharedSettings
from testkit.support import Service, free_port

ROOT = Path(__file__).resolve().parent.parent

Request = Callable[[httpx.AsyncClient], Any]


async def measure(url: str, make: Request, requests: int, concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    remaining = requests

    async def worker() -> None:
        nonlocal remaining
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            while remaining > 0:
                remaining -= 1
                t0 = time.perf_counter()
                r = await make(client)
                latencies.append(time.perf_counter() - t0)
                if r.status_code >= 300:
                    raise RuntimeError(f"unexpected {r.status_code}: {r.text[:200]}")

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    latencies.sort()
    return {"rps": round(len(latencies) / wall, 1),
            "p50_ms": round(statistics.median(latencies) * 1000, 2),
            "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 2)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    opts = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    settings = SharedSettings(data_dir=data_dir, mode="dev")
    ring = ensure_ring(settings.keys_dir, settings.jwks_path)
    issuer = DevUserIssuer(settings)
    headers = {
        "Authorization": "Bearer " + sign_service_token(
            ring, issuer=settings.service_issuer, audience=settings.service_audience,
            lifetime_s=3600),
        "X-User-JWT": issuer.mint("alice", lifetime_s=3600),
    }
    port = free_port()
    env = {"AGENTCHAT_DATA_DIR": str(data_dir), "AGENTCHAT_MODE": "dev",
           "AGENTCHAT_SANDBOX_WRITE_LATENCY_S": "0"}
    log = data_dir / "sandbox.log"
    kinds: dict[str, Request] = {
        "livez": lambda c: c.get("/livez"),
        "read_tool": lambda c: c.get("/api/environments", headers=headers),
        "search": lambda c: c.get("/api/dashboards", params={"query": "отчёт энергия"},
                                  headers=headers),
        "replayed_write": lambda c: c.post(
            "/api/dashboards/42/deploy", json={"env_id": "ss-dev"},
            headers={**headers, "Idempotency-Key": "bench"}),
    }
    results: dict[str, Any] = {}
    with Service(["sandbox", "--port", str(port)], env=env, port=port, log=log) as svc:
        for name, make in kinds.items():
            asyncio.run(measure(svc.url, make, 100, opts.concurrency))  # warm-up
            results[name] = asyncio.run(measure(svc.url, make, opts.requests, opts.concurrency))
    shutil.rmtree(data_dir, ignore_errors=True)
    base = results["livez"]["rps"]
    out = {
        "bench": "sandbox_throughput", "requests": opts.requests,
        "concurrency": opts.concurrency, **results,
        # Throughput of each pipeline request relative to the bare probe on the same process.
        "read_tool_vs_livez": round(results["read_tool"]["rps"] / base, 3),
        "search_vs_livez": round(results["search"]["rps"] / base, 3),
        "replayed_write_vs_livez": round(results["replayed_write"]["rps"] / base, 3),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
