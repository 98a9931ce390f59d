"""What the agent benchmarks share: a database, the stack, the bare Gradio baseline, the Node
client (bench/js/client.mjs with the real @gradio/client), RSS sampling and percentiles.

The stack is tests/testkit/stack.py's (sandbox, policy sidecar and agent as real processes); the
database is TEST_DATABASE_URL's server when set, else an embedded PostgreSQL in a temp dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

from agentchat.db import embedded_url, migrate_url
from testkit.stack import Stack, running_stack
from testkit.support import Service, create_database, drop_database, free_port

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
MEMPROBE = BENCH / "memprobe"  # put on a process's PYTHONPATH: bench/memprobe/sitecustomize.py

__all__ = ["ROOT", "RssSampler", "Stack", "bare_server", "bench_env", "percentile",
           "run_client", "scratch_database", "summary"]


@contextlib.contextmanager
def scratch_database(tmp: Path, *, keep: bool = False) -> Iterator[str]:
    """A fresh, empty database for one benchmark run, dropped afterwards unless `keep`:
    on TEST_DATABASE_URL's server when set, else on an embedded PostgreSQL under `tmp`."""
    server = os.environ.get("TEST_DATABASE_URL") or embedded_url(tmp / "pg")
    url = create_database(server)
    try:
        yield url
    finally:
        if not keep:
            drop_database(server, url)


@contextlib.contextmanager
def bench_env(prefix: str, **agent_env: str) -> Iterator[tuple[Stack, Path]]:
    """A fresh migrated database and the whole stack on it; yields the stack and a temp dir."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    try:
        with scratch_database(tmp) as url:
            asyncio.run(migrate_url(url))
            with running_stack(tmp / "data", url, **agent_env) as stack:
                yield stack, tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def bare_server(tmp: Path, token_delay_s: float = 0.0) -> Iterator[Service]:
    """The bare ChatInterface (bench/bare_chat.py) as a real process, mounted like the agent."""
    port = free_port()
    svc = Service(["--port", str(port), "--token-delay", str(token_delay_s)], env={},
                  port=port, log=tmp / "bare.log",
                  exe=[sys.executable, str(BENCH / "bare_chat.py")])
    svc.start(timeout=90)
    try:
        yield svc
    finally:
        svc.stop()


def gradio_url(service: Service) -> str:
    return service.url + "/api/agent/gradio/"


def run_client(spec: dict[str, Any], timeout: float = 1800,
               on_mark: Callable[[str], None] | None = None,
               script: str = "client.mjs") -> dict[str, Any]:
    """Run bench/js/client.mjs (or `script`, e.g. langgraph.mjs for the peer) with this spec;
    returns the JSON object it prints last.
    `on_mark` is called, from a reader thread and as they come, with the client's
    `BENCH-MARK ...` stderr lines (e.g. `all-first` for a spec with `mark_first`)."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("Node 20 is required (and `make js` for @gradio/client)")
    proc = subprocess.Popen([node, str(BENCH / "js" / script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "BENCH_SPEC": json.dumps(spec)})
    err: list[str] = []

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("BENCH-MARK ") and on_mark is not None:
                on_mark(line.removeprefix("BENCH-MARK ").strip())
            else:
                err.append(line)

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        stdout = proc.stdout.read()
        proc.wait()
    finally:
        timer.cancel()
    reader.join(timeout=10)
    stderr = "".join(err)
    if proc.returncode != 0:
        raise RuntimeError(f"client.mjs failed:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    return dict(json.loads(stdout.strip().splitlines()[-1]))


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: Sequence[float], digits: int = 1) -> dict[str, float]:
    return {"p50": round(percentile(values, 50), digits),
            "p99": round(percentile(values, 99), digits),
            "max": round(max(values), digits) if values else math.nan}


class RssSampler:
    """Samples a process tree's resident memory every `interval_s` in a thread."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self.proc = psutil.Process(pid)
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        procs = [self.proc, *self.proc.children(recursive=True)]
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(self.interval_s)

    def __enter__(self) -> RssSampler:
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def read_gcstats(path: Path | None) -> dict[str, Any]:
    """bench/memprobe's garbage-collector figures so far (written once a second)."""
    if path is None or not path.exists():
        return {}
    return json.loads(path.read_text())


def gcstats_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The collections between two reads, by generation: how many, their total and mean ms
    (wall) and mean CPU ms,
    how many took over 50 ms, and the cyclic garbage they found."""
    if not after:
        return {}
    out: dict[str, Any] = {"frozen": after["frozen"]}
    zero = {"count": 0, "total_ms": 0.0, "cpu_ms": 0.0, "over_50ms": 0, "collected": 0}
    for gen, a in after["stats"].items():
        b = before.get("stats", {}).get(gen, zero)
        count = a["count"] - b["count"]
        total = a["total_ms"] - b["total_ms"]
        cpu = a.get("cpu_ms", 0.0) - b.get("cpu_ms", 0.0)
        out[f"gen{gen}"] = {"count": count, "total_ms": round(total, 1),
                            "mean_ms": round(total / count, 1) if count else 0.0,
                            "mean_cpu_ms": round(cpu / count, 2) if count else 0.0,
                            "over_50ms": a["over_50ms"] - b["over_50ms"],
                            "collected": a["collected"] - b["collected"]}
    return out
