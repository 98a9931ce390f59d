"""Service processes forked from one that has already imported the product (the suite's time).

An agent spends ~3.4 s of CPU importing Gradio, LangGraph and the rest before it serves, and
the suite starts about sixty. One template process per test process imports them once; each
service is then a fork of it running the same entry point as the console script
(`agentchat.cli.main(args)`), with its own environment, working directory, log and process
group. The test process is a child subreaper: the intermediate process of the double fork
exits, and the service (its orphan) becomes the test process's child, so `wait`, `poll`,
signals and the exit code work as for a `subprocess.Popen`.

The template also reads the agent's default tool-selection model once (the product's
`preload_use`, agent/selection/embeddings.py): USE v3's tokenizer and weights, which every
agent otherwise reads at start (an agent's start: ~3.1 s of CPU, with them read here ~1.9 s).
A fork shares those pages; what it computes with them is unchanged.

What a fork cannot give: environment read while importing is the template's. Gradio reads
its GRADIO_* variables on import (GRADIO_TEMP_DIR, the upload folder, is read per call too,
and the copies taken on import feed only features the agent does not mount), so a service
started with any other GRADIO_* value is a plain process, as is every service when
TESTKIT_FORK=0 and outside pytest (bench/ starts real processes). The console script
itself still runs in the CLI and demo tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# What the template imports: everything `agentchat serve`, `sandbox` and `policy serve` need.
PRELOAD = ("agentchat.cli", "agentchat.agent.cli", "agentchat.agent.main",
           "agentchat.sandbox.app", "agentchat.policy.app", "uvicorn")
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int) -> None:
    """Linux prctl(2), where libc has it (elsewhere a no-op)."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value)


def forkable(env: dict[str, str]) -> bool:
    """Whether a service with this environment may be a fork of the template: in the tests
    only (the benchmarks time and weigh processes started as the console script starts them)."""
    if "_pytest" not in sys.modules or os.environ.get("TESTKIT_FORK", "1") == "0":
        return False
    return all(os.environ.get(k) == v for k, v in env.items()
               if k.startswith("GRADIO_") and k != "GRADIO_TEMP_DIR")


class Forked:
    """A forked service, as much of `subprocess.Popen` as the tests use."""

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1  # reaped elsewhere: gone, its code unknown
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.01)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The template process of this test process, started on first use."""

    _lock = threading.Lock()
    _proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def spawn(cls, args: list[str], *, env: dict[str, str], cwd: Path,
              log: Path | None) -> Forked:
        with cls._lock:
            proc = cls._template()
            assert proc.stdin and proc.stdout
            request = {"args": args, "env": env, "cwd": str(cwd),
                       "log": str(log) if log else None, "reaper": os.getpid()}
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
            reply = json.loads(proc.stdout.readline() or b'{"error": "template exited"}')
        if "pid" not in reply:
            raise RuntimeError(f"the fork server could not start {args}: {reply['error']}")
        return Forked(int(reply["pid"]), args)

    @classmethod
    def _template(cls) -> subprocess.Popen[bytes]:
        if cls._proc is None or cls._proc.poll() is not None:
            prctl(PR_SET_CHILD_SUBREAPER, 1)
            cls._proc = subprocess.Popen(
                [sys.executable, "-m", "testkit.forkserver"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, preexec_fn=lambda: prctl(PR_SET_PDEATHSIG,
                                                                  signal.SIGTERM))
        return cls._proc


# --- the template process -------------------------------------------------------------------

def _serve() -> None:
    import importlib

    from agentchat.agent.selection.embeddings import preload_use

    for name in PRELOAD:
        importlib.import_module(name)
    # The agent's tool-selection model, read once here for every agent forked after.
    preload_use()
    # Replies go on a private copy of stdout; what the product prints must not land there.
    replies = os.fdopen(os.dup(1), "wb")
    _point(1, os.devnull, os.O_WRONLY)
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            pid = _fork()
        except OSError as e:
            replies.write(json.dumps({"error": repr(e)}).encode() + b"\n")
            replies.flush()
            continue
        if pid == 0:  # the service
            replies.close()
            sys.exit(_become(request))
        replies.write(json.dumps({"pid": pid}).encode() + b"\n")
        replies.flush()


def _point(fd: int, path: str, flags: int) -> None:
    """Make `fd` an open file of `path`, leaving no other descriptor behind."""
    opened = os.open(path, flags, 0o644)
    if opened != fd:
        os.dup2(opened, fd)
        os.close(opened)


def _fork() -> int:
    """Fork twice; the service's pid in the template, 0 in the service. The intermediate
    process exits at once, so the service is reparented to the test process (the subreaper)."""
    r, w = os.pipe()
    mid = os.fork()
    if mid == 0:
        try:
            os.close(r)
            pid = os.fork()
        except BaseException:
            os._exit(1)
        if pid == 0:
            os.close(w)
            os.setsid()  # its own session and process group: the tests signal the group
            return 0
        try:
            os.write(w, str(pid).encode())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 32)
    os.close(r)
    os.waitpid(mid, 0)
    if not got:
        raise OSError("the intermediate process exited without the service's pid")
    return int(got)


def _become(request: dict[str, Any]) -> int:
    """Turn this fork into the service `agentchat <args>` and run it; its exit code."""
    deadline = time.monotonic() + 5
    while os.getppid() != request["reaper"]:  # until the intermediate has exited
        if time.monotonic() > deadline:
            return 1  # the test process is gone
        time.sleep(0.001)
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != request["reaper"]:
        return 1
    _point(0, os.devnull, os.O_RDONLY)
    _point(1, request["log"] or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.dup2(1, 2)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    tempfile.tempdir = None  # recomputed from this service's TMPDIR
    sys.argv = ["agentchat", *request["args"]]
    from agentchat.cli import main

    return int(main(request["args"]) or 0)


if __name__ == "__main__":
    _serve()
