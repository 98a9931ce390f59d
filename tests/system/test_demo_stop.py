"""`make demo` stops cleanly however it is stopped (issue 19 item 6): Ctrl-C in a terminal (SIGINT
to the foreground process group) or SIGTERM to that whole group. Within 10 s, with no child
process left and no turn left `running` in the database, while a turn was streaming.

`make demo` itself runs (its prerequisites marked up to date with `-o`, so no install or web
build happens here), in a process group of its own, on this test's database (DATABASE_URL:
no embedded server to start) and free ports.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from agentchat.identity import DevUserIssuer
from agentchat.settings import SharedSettings
from testkit.raw_chat import RawChat
from testkit.reliability import wait_for
from testkit.support import ROOT, free_port

READY = "Ctrl-C stops everything."


def _start_demo(tmp: Path, database_url: str) -> tuple[subprocess.Popen[str], int, list[str]]:
    port, sandbox, policy = free_port(), free_port(), free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "AGENTCHAT_DATA_DIR": str(tmp / "data"),
           # A lean start: no embedding model to load (keyword selection suffices here).
           "AGENTCHAT_AGENT_TUNING__SELECTION_EMBEDDINGS": "none"}
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "-o", ".venv/.installed-stamp", "-o", "web", "demo",
         f"DEMO_ARGS=--port {port} --sandbox-port {sandbox} --policy-port {policy}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)  # its own process group, as a terminal's foreground job
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout
        for line in proc.stdout:
            lines.append(line.rstrip())

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 150
    while not any(READY in line for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("the demo did not start:\n" + "\n".join(lines[-40:]))
        time.sleep(0.2)
    return proc, port, lines


def _runs(database_url: str) -> dict[str, int]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT status, count(*) FROM runs GROUP BY status").fetchall()
    return {str(s): int(n) for s, n in rows}


async def _start_turn(port: int, token: str) -> None:
    """A long turn (200 words at the demo's 30 tokens/s, ~7 s) whose connection drops after
    its first events: it runs on in the agent, as a closed browser tab's would."""
    async with httpx.AsyncClient(timeout=30) as http:
        chat = RawChat(f"http://127.0.0.1:{port}", token, http)
        out = await chat.submit("echo 200 words", drop_after=2)
        assert len(out.events) == 2, out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_make_demo_stops_cleanly_mid_turn(tmp_path: Path, database_url: str,
                                          sig: signal.Signals) -> None:
    proc, port, lines = _start_demo(tmp_path, database_url)
    try:
        # The panel's URL comes first, before the Gradio page's.
        shown = lines[next(i for i, x in enumerate(lines) if "AgentChat is running" in x):]
        urls = [line for line in shown if "http://" in line]
        assert "/api/agent/ui/" in urls[0] and "/api/agent/gradio/" in urls[1], urls
        token = DevUserIssuer(SharedSettings(data_dir=tmp_path / "data", mode="dev")).mint("alice")
        asyncio.run(_start_turn(port, token))
        # The run's row is stored by the replica's writer just after its first events.
        wait_for(lambda: _runs(database_url).get("running") == 1, "the run's row", 20,
                 pause=0.05)
        family = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()[1:3]) for p in family)
        assert all(part in names for part in ("demo", "sandbox", "policy", "serve")), names

        started = time.monotonic()
        os.killpg(proc.pid, sig)
        proc.wait(20)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = "\n".join(lines[-30:])
    assert took < 10, f"stopped in {took:.1f} s\n{log}"
    alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running: {[p.cmdline() for p in alive]}\n{log}"
    runs = _runs(database_url)
    assert "running" not in runs and sum(runs.values()) == 1, runs
    assert "Traceback" not in log, log
