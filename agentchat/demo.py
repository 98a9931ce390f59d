"""`agentchat demo`: the whole system on this machine, on embedded defaults.

Starts PostgreSQL (embedded unless DATABASE_URL is set), the sandbox ss-tools API, the policy
sidecar and the agent as child processes, prints the pages' URLs and the demo users' tokens,
and stops everything on Ctrl-C or SIGTERM, within 10 s.

Stopping. A Ctrl-C reaches the whole foreground process group, and `make`
forwards a SIGTERM it gets to us again: the first signal starts the stop, every later one is
ignored (a second KeyboardInterrupt used to abort the cleanup half-way, leaving children and
running turns). The children run in their own sessions, so only we signal them, in order: the
agent first, while the sidecar and the sandbox still answer (it drains for
AGENTCHAT_AGENT_DRAIN_S, 2 s here, then marks what still runs lost), then the others. Each
child also gets SIGTERM if we die (PR_SET_PDEATHSIG).
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

from agentchat.settings import SharedSettings

DEMO_CLIENT_SECRET = "dev-client-secret"
# The demo's own defaults for two of the agent's tuning settings; the shell may set them.
PLANNER_DELAY = "AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S"
TAKEOVER = "AGENTCHAT_AGENT_TUNING__RUN_TAKEOVER"


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


class _Stop:
    """The first SIGINT or SIGTERM raises KeyboardInterrupt (the stop); later ones are ignored
    so the cleanup always runs to its end."""

    def __init__(self) -> None:
        self.stopping = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.stopping:
            return
        self.stopping = True
        raise KeyboardInterrupt

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)


def _child_setup() -> None:
    """In each child: SIGTERM when the demo dies, even by SIGKILL (else it would run on)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop_children(children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    """The agent first (its drain needs the sidecar, the sandbox and the database), then the
    rest together; SIGKILL for whoever outlives its share of the 10 s."""
    agent = [p for n, p in children if n == "agent"]
    rest = [p for n, p in children if n != "agent"]
    for group, wait_s in ((agent, 6.0), (rest, 2.5)):
        for proc in group:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        for proc in group:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(2)


def _run(args: argparse.Namespace) -> int:
    stop = _Stop()
    stop.install()
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
    base = dict(os.environ)
    env = {**base, "DATABASE_URL": url, "AGENTCHAT_MODE": "dev",
           "AGENTCHAT_DATA_DIR": str(settings.data_dir),
           "AGENTCHAT_SANDBOX_CLIENT_SECRET": DEMO_CLIENT_SECRET,
           "AGENTCHAT_AGENT_SSTOOLS_URL": f"http://127.0.0.1:{args.sandbox_port}",
           "AGENTCHAT_AGENT_SERVICE_TOKEN_URL":
               f"http://127.0.0.1:{args.sandbox_port}/api/auth/service-token",
           "AGENTCHAT_AGENT_SERVICE_CLIENT_SECRET": DEMO_CLIENT_SECRET,
           "AGENTCHAT_AGENT_POLICY_URL": f"http://127.0.0.1:{args.policy_port}",
           # Links (an approval's, an MCP call's approve_url) and the MCP endpoint's
           # resource name this address, as `agentchat mcp config` does.
           "AGENTCHAT_AGENT_PUBLIC_URL": base.get("AGENTCHAT_AGENT_PUBLIC_URL",
                                                  f"http://127.0.0.1:{args.port}"),
           PLANNER_DELAY: base.get(PLANNER_DELAY, "0.03"),
           # A stop must end within 10 s: live turns get 2 s, then are marked lost. The demo
           # is one replica: no other would take a released run over (docs/protocol.md §4,
           # "Takeover"), and its user token would wait in the database until the next start.
           "AGENTCHAT_AGENT_DRAIN_S": base.get("AGENTCHAT_AGENT_DRAIN_S", "2"),
           TAKEOVER: base.get(TAKEOVER, "false")}
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    plan: list[tuple[str, list[str], str]] = [
        ("sandbox", ["sandbox", "--port", str(args.sandbox_port)],
         f"http://127.0.0.1:{args.sandbox_port}/livez"),
        ("policy sidecar", ["policy", "serve", "--port", str(args.policy_port)],
         f"http://127.0.0.1:{args.policy_port}/readyz"),
        ("agent", ["serve", "--host", args.host, "--port", str(args.port)],
         f"http://127.0.0.1:{args.port}/livez"),
    ]
    try:
        for name, cmd, ready in plan:
            proc = subprocess.Popen([exe, *cmd], env=env, start_new_session=True,
                                    preexec_fn=_child_setup)
            children.append((name, proc))
            _wait_ready(name, ready, proc, timeout=90)
        print("\nAgentChat is running.\n")
        print(f"  panel:       http://127.0.0.1:{args.port}/api/agent/ui/")
        print(f"  Gradio page: http://127.0.0.1:{args.port}/api/agent/gradio/")
        print(f"  API docs:    http://127.0.0.1:{args.port}/docs")
        print(f"  MCP:         http://127.0.0.1:{args.port}/api/agent/mcp "
              "(AGENTCHAT_MODE=dev agentchat mcp config --user alice)")
        print(f"  sandbox:     http://127.0.0.1:{args.sandbox_port}/docs")
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
        print("\nstopping…", file=sys.stderr, flush=True)
        return 0
    finally:
        stop.stopping = True  # whatever ended the loop, a signal now must not cut the cleanup
        _stop_children(children)


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the whole system locally and print demo tokens")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--sandbox-port", type=int, default=8800)
    p.add_argument("--policy-port", type=int, default=8181)
    p.set_defaults(func=_run)
