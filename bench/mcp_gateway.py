"""What the gate costs an MCP client (docs/protocol.md §12): a read tool called through the
agent's MCP endpoint (guard, token exchange kept, the sidecar's check, the request builder,
the fenced runtime) against a bare MCP server on the same SDK (low-level `Server`, the same
stateless Streamable HTTP transport with JSON responses) that forwards the same call to the
sandbox with no gate, through the agent's own HTTP client (agentchat/http_clients.py: what is
compared is the gate, not two HTTP stacks), in one run, at 1, 50 and 200 concurrent clients.

Each client is a loop of 2026-07-28 `tools/call` POSTs (`get_health_summary` of dashboard 42
in ss-dev) over one shared keep-alive pool; both servers get the same client, in alternating
turns (`--turns`, each side first in every other one), so a change in the machine's load
falls on both alike. CPU per call is the servers' own: the agent and the policy sidecar for
the gateway, the bare server for the baseline (the sandbox does the same work for both and is
reported apart).

    .venv/bin/python bench/mcp_gateway.py [--seconds 8] [--levels 1,50,200] [--turns 4]

Prints one JSON object on its last line: per level and side p50/p99 (ms), calls/s, errors
(and their kinds: an exception, an HTTP status, a JSON-RPC code or the refusal's `code`),
CPU ms per call; the ratios; and whether each goal holds: p50 ≤ 1.3× the bare server's,
p99 ≤ 1.5×, throughput ≥ 0.75× at 50 clients, 0 errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from agentchat.http_clients import async_client
from agentchat.identity import DevUserIssuer
from agentchat.keys import ensure_ring, sign_service_token
from agentchat.settings import SharedSettings
from common import bench_env, percentile
from testkit.support import Service, free_port

TOOL = "get_health_summary"
ARGS = {"env_id": "ss-dev", "dashboard_id": 42}
MODERN = "2026-07-28"
GOALS = {"p50_ratio": 1.3, "p99_ratio": 1.5, "throughput_ratio_at_50": 0.75}


# -- the bare server: the same SDK, no gate -------------------------------------------------

def serve_bare(port: int, sandbox: str, data_dir: Path) -> None:
    """A bare MCP server as a real process: one tool, forwarded to the sandbox with our
    service token and a fixed user token, no check of anything."""
    import mcp_types as types
    import uvicorn
    from mcp.server.lowlevel.server import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    settings = SharedSettings(data_dir=data_dir, mode="dev")
    ring = ensure_ring(settings.keys_dir, settings.jwks_path)
    headers = {"Authorization": "Bearer " + sign_service_token(
                   ring, issuer=settings.service_issuer, audience=settings.service_audience,
                   lifetime_s=3600),
               "X-User-JWT": DevUserIssuer(settings).mint("alice")}
    # The agent's own client (agentchat/http_clients.py, the same pool and limits): the
    # comparison is of the gate, not of two HTTP clients.
    http = async_client(base_url=sandbox, headers=headers, timeout=30,
                        limits=httpx.Limits(max_connections=200, max_keepalive_connections=50))
    tool = types.Tool(name=TOOL, input_schema={"type": "object"},
                      annotations=types.ToolAnnotations(read_only_hint=True))

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        r = await http.get("/api/health", params=params.arguments or {})
        body = r.json()
        return types.CallToolResult(content=[types.TextContent(type="text", text=r.text)],
                                    structured_content=body, is_error=r.status_code >= 400)

    server: Server[Any] = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        async with manager.run():
            yield

    async def livez(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    class Endpoint:  # an ASGI app, so Starlette hands it the raw request
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    app = Starlette(routes=[Route("/mcp", Endpoint(), methods=["POST"]),
                            Route("/livez", livez)], lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


@contextlib.contextmanager
def bare_mcp(tmp: Path, sandbox: str, data_dir: Path) -> Iterator[Service]:
    port = free_port()
    svc = Service(["--bare-server", "--port", str(port), "--sandbox", sandbox,
                   "--data-dir", str(data_dir)], env={}, port=port, log=tmp / "bare-mcp.log",
                  exe=[sys.executable, __file__])
    svc.start(timeout=60)
    try:
        yield svc
    finally:
        svc.stop()


# -- the load -----------------------------------------------------------------------------

def call_body(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": TOOL, "arguments": ARGS,
                       "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {}}}}


def failure(response: httpx.Response) -> str | None:
    """None for a done call; else what went wrong, short (an HTTP status, the JSON-RPC error's
    code, or the refusal's `code`)."""
    if response.status_code != 200:
        return f"http {response.status_code}"
    answer = response.json()
    if "error" in answer:
        return f"jsonrpc {answer['error'].get('code')}"
    result = answer.get("result") or {}
    if result.get("isError", True) or result.get("structuredContent") is None:
        return str((result.get("structuredContent") or {}).get("code") or "isError")
    return None


@dataclass
class Slice:
    """One side's share of a level: what its clients saw, and the CPU its processes spent."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall: float = 0.0
    cpu: list[float] = field(default_factory=list)  # per server process
    sandbox_cpu: float = 0.0

    def add(self, other: Slice) -> None:
        self.latencies += other.latencies
        self.errors.update(other.errors)
        self.wall += other.wall
        self.cpu = ([a + b for a, b in zip(self.cpu, other.cpu, strict=True)] if self.cpu
                    else list(other.cpu))
        self.sandbox_cpu += other.sandbox_cpu

    def summary(self) -> dict[str, Any]:
        latencies = sorted(self.latencies)
        calls = max(1, len(latencies))
        return {"calls": len(latencies), "errors": sum(self.errors.values()),
                "error_kinds": dict(self.errors),
                "p50_ms": round(percentile(latencies, 50) * 1000, 2),
                "p99_ms": round(percentile(latencies, 99) * 1000, 2),
                "calls_per_s": round(len(latencies) / max(self.wall, 1e-9), 1),
                "cpu_ms_per_call": round(sum(self.cpu) * 1000 / calls, 3),
                # per process: the gateway's agent, then its sidecar
                "cpu_ms_per_call_by_process": [round(c * 1000 / calls, 3) for c in self.cpu],
                "sandbox_cpu_ms_per_call": round(self.sandbox_cpu * 1000 / calls, 3)}


def cpu_seconds(proc: psutil.Process) -> float:
    return float(sum(proc.cpu_times()[:2]))


async def load(url: str, token: str | None, clients: int, seconds: float,
               pids: list[int], sandbox: psutil.Process) -> Slice:
    headers = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": "tools/call", "Mcp-Name": TOOL}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    procs = [psutil.Process(p) for p in pids]
    out = Slice()
    # Idle connections are dropped before the servers' own keep-alive (uvicorn: 5 s) ends
    # them: otherwise a request sent as the server closes its connection fails (ECONNRESET),
    # the harness's error, not the server's.
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients,
                          keepalive_expiry=2.0)
    async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as http:
        for n in range(3):  # warm: the exchange, the connections, the caches
            await http.post(url, json=call_body(n))
        cpu0 = [cpu_seconds(p) for p in procs]
        sandbox0 = cpu_seconds(sandbox)
        stop = time.perf_counter() + seconds
        counter = iter(range(10, 10**9))

        async def client() -> None:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                try:
                    r = await http.post(url, json=call_body(next(counter)))
                    failed = failure(r)
                except httpx.HTTPError as e:
                    failed = type(e).__name__
                out.latencies.append(time.perf_counter() - t0)
                if failed is not None:
                    out.errors[failed] += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        out.wall = time.perf_counter() - t0
        out.cpu = [cpu_seconds(p) - c for p, c in zip(procs, cpu0, strict=True)]
        out.sandbox_cpu = cpu_seconds(sandbox) - sandbox0
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--levels", default="1,50,200")
    parser.add_argument("--turns", type=int, default=4,
                        help="each level's seconds split into this many alternating turns")
    parser.add_argument("--bare-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sandbox", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        serve_bare(args.port, args.sandbox, args.data_dir)
        return 0
    levels = [int(x) for x in args.levels.split(",")]
    load_avg = os.getloadavg()
    out: dict[str, Any] = {"bench": "mcp_gateway", "tool": TOOL, "seconds": args.seconds,
                           "cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in
                                                                      load_avg],
                           "levels": {}}
    with bench_env("mcp-gateway") as (stack, tmp):
        assert stack.sandbox and stack.policy and stack.agent.proc and stack.policy.proc
        gateway = stack.agent.url + "/api/agent/mcp"
        token = stack.token("alice", extra={"aud": gateway})
        with bare_mcp(tmp, stack.sandbox.url, stack.data_dir) as bare:
            assert bare.proc is not None
            sides = {"gateway": (gateway, token, [stack.agent.proc.pid, stack.policy.proc.pid]),
                     "bare": (bare.url + "/mcp", None, [bare.proc.pid])}
            assert stack.sandbox.proc is not None
            sandbox = psutil.Process(stack.sandbox.proc.pid)
            out["turns"] = args.turns
            for clients in levels:
                slices = {"bare": Slice(), "gateway": Slice()}
                # Short turns, each side first in every other one: a change in the machine's
                # load (other work on it) falls on both sides alike.
                for turn in range(args.turns):
                    order = ("bare", "gateway") if turn % 2 == 0 else ("gateway", "bare")
                    for name in order:
                        url, tok, pids = sides[name]
                        slices[name].add(asyncio.run(load(
                            url, tok, clients, args.seconds / args.turns, pids, sandbox)))
                row = {name: part.summary() for name, part in slices.items()}
                g, b = row["gateway"], row["bare"]
                row["ratios"] = {
                    "p50": round(g["p50_ms"] / max(b["p50_ms"], 1e-9), 2),
                    "p99": round(g["p99_ms"] / max(b["p99_ms"], 1e-9), 2),
                    "throughput": round(g["calls_per_s"] / max(b["calls_per_s"], 1e-9), 2),
                    "cpu_per_call": round(g["cpu_ms_per_call"] / max(b["cpu_ms_per_call"],
                                                                     1e-9), 2)}
                out["levels"][str(clients)] = row
                print(json.dumps({str(clients): row}), file=sys.stderr, flush=True)
    out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    rows = out["levels"]
    goals = {
        "p50_within_1.3x": all(r["ratios"]["p50"] <= GOALS["p50_ratio"] for r in rows.values()),
        "p99_within_1.5x": all(r["ratios"]["p99"] <= GOALS["p99_ratio"] for r in rows.values()),
        "throughput_at_50_at_least_0.75x": ("50" in rows and rows["50"]["ratios"]["throughput"]
                                            >= GOALS["throughput_ratio_at_50"]),
        "zero_errors": all(r[s]["errors"] == 0 for r in rows.values()
                           for s in ("gateway", "bare")),
    }
    out["goals"] = goals
    out["goals_met"] = all(goals.values())
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
