"""Helpers the tests share: free ports, real service processes, fresh databases."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg

from testkit.forkserver import PR_SET_PDEATHSIG, Forked, ForkServer, forkable, prctl

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
AGENTCHAT = str(Path(sys.executable).parent / "agentchat")


def _child_setup() -> None:
    """In the child: its own process group, and SIGTERM when the test process dies (so a
    killed test run leaves no services behind)."""
    os.setsid()
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def eventually(read: Callable[[], T], want: T, timeout: float = 10.0) -> T:
    """`read()` until it gives `want` or `timeout` passes (a liveness bound); the last value,
    for the caller's assert."""
    deadline = time.monotonic() + timeout
    got = read()
    while got != want and time.monotonic() < deadline:
        time.sleep(0.1)
        got = read()
    return got


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def admin_url(server_url: str) -> str:
    """The same server, connected to a database that always exists."""
    return server_url


def create_database(server_url: str, template: str | None = None) -> str:
    """Create a uniquely named database on the server and return its URL."""
    name = "agentchat_t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server_url, autocommit=True) as conn:
        tpl = f" TEMPLATE {template}" if template else ""
        conn.execute(f'CREATE DATABASE "{name}"{tpl}')
    return with_database(server_url, name)


def drop_database(server_url: str, url: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def with_database(server_url: str, dbname: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(server_url)
    params["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]


class Service:
    """A component started as a real process (`agentchat <args>`), stopped on exit.

    `agentchat` services are forks of a template that has imported the product already
    (testkit/forkserver.py); other executables are started as they are."""

    def __init__(self, args: list[str], *, env: dict[str, str], port: int,
                 ready_path: str = "/livez", log: Path | None = None,
                 exe: list[str] | None = None) -> None:
        self.args = args
        self.exe = exe or [AGENTCHAT]
        self.env = {**os.environ, **env}
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.ready_path = ready_path
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | Forked | None = None

    def start(self, timeout: float = 60.0) -> Service:
        return self.spawn().wait_ready(timeout)

    def spawn(self) -> Service:
        """Start the process without waiting for it: services that do not need each other
        at start (a stack's three, a module's extra agents) start side by side, then
        `wait_ready` each."""
        if self.exe == [AGENTCHAT] and forkable(self.env):
            self.proc = ForkServer.spawn(self.args, env=self.env, cwd=ROOT, log=self.log_path)
        else:
            out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
            self.proc = subprocess.Popen(
                [*self.exe, *self.args], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                cwd=ROOT, preexec_fn=_child_setup,
            )
        return self

    def wait_ready(self, timeout: float = 60.0) -> Service:
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.args} exited with {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + self.ready_path, timeout=1).status_code < 500:
                    return self
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{self.args} did not answer {self.ready_path}: {self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-n:]
        return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        self.terminate(sig)
        self.reap(timeout)

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        """`sig` to the service's process group, without waiting for it to exit."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def reap(self, timeout: float = 10.0) -> None:
        """Wait for the exit; SIGKILL what is still running after `timeout`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> Service:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_all(services: Iterable[Service | None], timeout: float = 10.0) -> None:
    """`stop` several services side by side: SIGTERM to each, then each reaped as `stop` does.
    A graceful stop can take seconds (an agent's drain, an operator's cleanup); one after the
    other, those add up."""
    listed = [svc for svc in services if svc is not None]
    for svc in listed:
        svc.terminate()
    for svc in listed:
        svc.reap(timeout)


@contextlib.contextmanager
def running(args: list[str], *, env: dict[str, str], port: int, ready_path: str = "/livez",
            log: Path | None = None) -> Iterator[Service]:
    svc = Service(args, env=env, port=port, ready_path=ready_path, log=log)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def start_openai_stub() -> Service:
    """The OpenAI-compatible model server (testkit/openai_stub.py) as its own process."""
    port = free_port()
    script = str(Path(__file__).resolve().parent / "openai_stub.py")
    return Service([str(port)], env={}, port=port, exe=[sys.executable, script]).start()


def stub_model_env(model: Service) -> dict[str, str]:
    """An agent's settings for the stub model (keyword selection only: no embeddings)."""
    return {"AGENTCHAT_AGENT_LLM": "openai:stub-model",
            "AGENTCHAT_AGENT_LLM_BASE_URL": model.url + "/v1",
            "AGENTCHAT_AGENT_LLM_API_KEY": "sk-local", "AGENTCHAT_AGENT_LLM_TIMEOUT_S": "10",
            "AGENTCHAT_AGENT_TUNING__SELECTION_EMBEDDINGS": "none"}


def script_model(model: Service, *replies: list[dict[str, Any]]) -> None:
    """What the stub model says next: one list of tool calls per model request."""
    httpx.post(model.url + "/script", json={"turns": list(replies)},
               timeout=5).raise_for_status()
