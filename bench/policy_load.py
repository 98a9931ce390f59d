"""A lean HTTP/1.1 load generator for the policy benchmarks (asyncio streams, keep-alive,
pre-built request bytes), and a helper to run the sidecar as a real process.

The generator shares the machine's two cores with the sidecar, so it does as little as it
can per request: no HTTP library, no header parsing beyond Content-Length. Each benchmark
reports the generator's own CPU time next to the sidecar's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
AGENTCHAT = str(Path(sys.executable).parent / "agentchat")
TICKS = os.sysconf("SC_CLK_TCK")


def build_request(path: str, body: dict, headers: dict[str, str]) -> bytes:
    payload = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"{head}Content-Length: {len(payload)}\r\n\r\n").encode() + payload


async def _roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     request: bytes) -> tuple[int, bytes]:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return status, await reader.readexactly(length)


@dataclass
class LoadResult:
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    bodies: list[bytes] = field(default_factory=list)
    errors: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    max_send_lag_s: float = 0.0

    def pct(self, p: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall_s if self.wall_s else 0.0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def closed_loop(port: int, requests: list[bytes], *, connections: int, seconds: float,
                      keep_bodies: bool = False) -> LoadResult:
    """As fast as the server answers, `connections` requests in flight."""
    out = LoadResult()
    deadline = time.perf_counter() + seconds

    async def worker(offset: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        i = offset
        try:
            while time.perf_counter() < deadline:
                t = time.perf_counter()
                try:
                    status, body = await _roundtrip(reader, writer, requests[i % len(requests)])
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    out.errors += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                out.latencies.append(time.perf_counter() - t)
                out.statuses[status] = out.statuses.get(status, 0) + 1
                if keep_bodies:
                    out.bodies.append(body)
                i += connections
        finally:
            writer.close()

    cpu, t0 = _cpu(), time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(connections)))
    out.wall_s, out.client_cpu_s = time.perf_counter() - t0, _cpu() - cpu
    return out


async def paced(port: int, requests: list[bytes], *, rate: float, seconds: float,
                connections: int = 8) -> LoadResult:
    """Open loop: request i is due at t0 + i/rate; latency is counted from the actual send,
    and the worst lag of a send behind its schedule is reported (it would reveal a server
    too slow to keep up, which a closed loop hides)."""
    out = LoadResult()
    total = int(rate * seconds)
    next_i = 0
    t0 = time.perf_counter() + 0.05

    async def worker() -> None:
        nonlocal next_i
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while next_i < total:
                i, next_i = next_i, next_i + 1
                due = t0 + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                t = time.perf_counter()
                out.max_send_lag_s = max(out.max_send_lag_s, t - due)
                status, _ = await _roundtrip(reader, writer, requests[i % len(requests)])
                out.latencies.append(time.perf_counter() - t)
                out.statuses[status] = out.statuses.get(status, 0) + 1
        finally:
            writer.close()

    cpu, start = _cpu(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    out.wall_s, out.client_cpu_s = time.perf_counter() - start, _cpu() - cpu
    return out


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def sidecar(env: dict[str, str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """`agentchat policy serve` as a real process; the decision log goes to /dev/null."""
    proc = subprocess.Popen([AGENTCHAT, "policy", "serve", "--port", str(port)],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            if proc.poll() is not None:
                raise RuntimeError(f"sidecar exited with {proc.returncode}")
            time.sleep(0.1)
        else:
            raise TimeoutError("sidecar never became ready")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def data_dir_with_tokens() -> tuple[Path, dict[str, str], dict[str, str]]:
    """A data folder with service keys and the dev issuer; (folder, env, tokens by user)."""
    folder = Path(tempfile.mkdtemp(prefix="policy-bench-"))
    os.environ["AGENTCHAT_DATA_DIR"] = str(folder)
    os.environ["AGENTCHAT_MODE"] = "dev"  # the dev issuer mints the users' tokens
    from agentchat.identity import DevUserIssuer
    from agentchat.keys import ensure_ring, sign_service_token
    from agentchat.settings import SharedSettings

    settings = SharedSettings()
    ring = ensure_ring(settings.keys_dir, settings.jwks_path)
    issuer = DevUserIssuer(settings)
    tokens = {u: issuer.mint(u) for u in ("alice", "bob", "carol")}
    tokens["service"] = sign_service_token(ring, issuer=settings.service_issuer,
                                           audience=settings.service_audience, lifetime_s=3600)
    env = {"AGENTCHAT_DATA_DIR": str(folder), "AGENTCHAT_MODE": "dev"}
    return folder, env, tokens


def check_requests(tokens: dict[str, str]) -> list[bytes]:
    """A realistic mix: reads, writes with and without a card, denials, three users."""
    calls = [("search_dashboards", "prod", {"query": "energy"}),
             ("deploy_dashboard", "prod", {"dashboard_id": 42}),
             ("deploy_dashboard", "ss-dev", {"dashboard_id": 42}),
             ("delete_dashboard", "ss-stage", {"dashboard_id": 7}),
             ("start_migration", "ss-stage", {"dashboard_id": 1, "source_env": "ss-dev",
                                              "target_env": "ss-stage"}),
             ("show_capabilities", None, {})]
    out = []
    n = 0
    for user in ("alice", "bob", "carol"):
        for tool, env, args in calls:
            if env is not None and "target_env" not in args:  # the environment == the argument
                args = {**args, "env_id": env}
            n += 1
            out.append(build_request("/v1/check", {
                "request_id": f"bench-{n}", "environment": env, "tool": tool,
                "arguments": args}, {"Authorization": f"Bearer {tokens['service']}",
                                     "X-User-JWT": tokens[user]}))
    return out


def emit(result: dict) -> None:
    """The one JSON object on the last line."""
    print(json.dumps(result, sort_keys=True))
