"""`agentchat demo`: the whole system on this machine, on embedded defaults.

Starts PostgreSQL (embedded unless DATABASE_URL is set), the sandbox ss-tools API, the policy
sidecar and the agent as child processes, prints the page's URL and the demo users' tokens,
and stops everything on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from agentchat.settings import SharedSettings, renamed

DEMO_CLIENT_SECRET = "dev-client-secret"


def _wait_ready(name: str, url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{name} did not become ready at {url}")


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # same clean stop as Ctrl-C, so the embedded server stops too


def _run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    from agentchat.db import migrate_url, resolve_database_url
    from agentchat.identity import DEMO_USERS, DevUserIssuer
    from agentchat.keys import ensure_ring

    # The demo is dev by definition (demo issuer, sandbox, placeholder secrets), whatever the
    # shell says; its children get AGENTCHAT_MODE=dev below.
    settings = SharedSettings(mode="dev")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    ensure_ring(settings.keys_dir, settings.jwks_path)
    issuer = DevUserIssuer(settings)
    url = resolve_database_url(settings)
    asyncio.run(migrate_url(url))

    exe = str(Path(sys.executable).parent / "agentchat")
    base = renamed(os.environ)  # the agent's old variable names, if any, under the new ones
    env = {**base, "DATABASE_URL": url, "AGENTCHAT_MODE": "dev",
           "AGENTCHAT_DATA_DIR": str(settings.data_dir),
           "AGENTCHAT_SANDBOX_CLIENT_SECRET": DEMO_CLIENT_SECRET,
           "AGENTCHAT_AGENT_SSTOOLS_URL": f"http://127.0.0.1:{args.sandbox_port}",
           "AGENTCHAT_AGENT_SERVICE_TOKEN_URL":
               f"http://127.0.0.1:{args.sandbox_port}/api/auth/service-token",
           "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET": DEMO_CLIENT_SECRET,
           "AGENTCHAT_AGENT_POLICY_URL": "http://127.0.0.1:8181",
           "AGENTCHAT_AGENT_PLANNER_TOKEN_DELAY_S": base.get(
               "AGENTCHAT_AGENT_PLANNER_TOKEN_DELAY_S", "0.03")}
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    plan: list[tuple[str, list[str], str]] = [
        ("sandbox", ["sandbox", "--port", str(args.sandbox_port)],
         f"http://127.0.0.1:{args.sandbox_port}/livez"),
        ("policy sidecar", ["policy", "serve"], "http://127.0.0.1:8181/readyz"),
        ("agent", ["serve", "--host", args.host, "--port", str(args.port)],
         f"http://127.0.0.1:{args.port}/livez"),
    ]
    try:
        for name, cmd, ready in plan:
            proc = subprocess.Popen([exe, *cmd], env=env)
            children.append((name, proc))
            _wait_ready(name, ready, proc, timeout=90)
        print("\nAgentChat is running.\n")
        print(f"  page:     http://127.0.0.1:{args.port}{'/api/agent/gradio'}/")
        print(f"  API docs: http://127.0.0.1:{args.port}/docs")
        print(f"  sandbox:  http://127.0.0.1:{args.sandbox_port}/docs")
        print("\nDemo users' tokens (Authorization: Bearer …):")
        for user, roles in DEMO_USERS.items():
            print(f"\n  {user} ({', '.join(roles)}):\n  {issuer.mint(user)}")
        print("\nCtrl-C stops everything.", flush=True)
        while all(p.poll() is None for _, p in children):
            time.sleep(0.5)
        dead = [n for n, p in children if p.poll() is not None]
        print(f"stopping: {', '.join(dead)} exited", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for _, proc in reversed(children):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in children:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the whole system locally and print demo tokens")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--sandbox-port", type=int, default=8800)
    p.set_defaults(func=_run)
