"""bench/agent_scale.py's memory probes: `--memstats` (pymalloc, objects, RSS by mapping, from
bench/memprobe inside the agent), `--tracemalloc` (a separate run, snapshots diffed per live
conversation) and what one streamed answer holds (`model_retained_kb`)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx

from common import MEMPROBE, bench_env, run_client


def smaps_kb(pid: int) -> dict[str, int]:
    """The process's RSS by kind of mapping (/proc/PID/smaps), in KB: glibc's main heap,
    anonymous mappings (pymalloc's arenas, glibc's thread arenas and large blocks, thread
    stacks: the kernel merges adjacent ones, so their sizes do not tell them apart; pymalloc's
    own figures do), and file-backed ones (code, wheels' shared objects)."""
    kinds: dict[str, int] = collections.Counter()
    kind = "other"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                name = head[5] if len(head) > 5 else ""
                kind = ("anon" if not name else "heap" if name == "[heap]"
                        else "stack" if name.startswith("[stack") else
                        "files" if name.startswith("/") else "other")
            elif head and head[0] == "Rss:":
                kinds[kind] += int(head[1])
    return dict(kinds)


def memstats_diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What grew between two memstats probes (bench/memprobe): RSS by mapping, pymalloc,
    live objects by type (the 15 that grew most)."""
    keys = sorted(set(before["smaps"]) | set(after["smaps"]))
    types = collections.Counter(after["types"])
    types.subtract(before["types"])
    return {
        "smaps_kb": {k: [before["smaps"].get(k, 0), after["smaps"].get(k, 0)] for k in keys},
        "pymalloc": {k: [before["pymalloc"].get(k), after["pymalloc"].get(k)]
                     for k in after["pymalloc"]},
        "blocks": [before["blocks"], after["blocks"]],
        "threads": [before["threads"], after["threads"]],
        "types_grown": dict(types.most_common(15)),
    }


class MemStats:
    """bench/memprobe's memstats, taken from outside: SIGUSR1, then the JSON it writes,
    joined with /proc/PID/smaps read at the same moment."""

    def __init__(self, pid: int, directory: Path) -> None:
        self.pid, self.directory = pid, directory
        self.taken: dict[str, dict[str, Any]] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def take(self, label: str) -> None:
        with self._lock:
            self._count += 1
            path = self.directory / f"stats-{self._count}.json"
            os.kill(self.pid, signal.SIGUSR1)
            deadline = time.monotonic() + 60
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            stats = json.loads(path.read_text())
            stats["smaps"] = smaps_kb(self.pid)
            self.taken[label] = stats

    def take_when_live(self, url: str, n: int, delay_s: float) -> None:
        """"live": once nearly all n runs are live, `delay_s` later (in a thread)."""
        def wait_then_take() -> None:
            deadline = time.monotonic() + 120
            while live_runs(url) < 0.9 * n and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(delay_s)
            self.take("live")
        self._thread = threading.Thread(target=wait_then_take, daemon=True)
        self._thread.start()

    def result(self) -> dict[str, Any]:
        if self._thread is not None:
            self._thread.join()
        shutil.rmtree(self.directory, ignore_errors=True)
        base = self.taken["before"]
        return {label: memstats_diff(base, self.taken[label])
                for label in ("live", "after") if label in self.taken}


def print_memstats(result: dict[str, Any], n: int) -> None:
    for label, d in result.items():
        print(f"\nmemstats, {label} against after the warm-up (KB per conversation):",
              file=sys.stderr)
        for kind, (b, a) in d["smaps_kb"].items():
            print(f"  RSS {kind:11} {b:9,} -> {a:9,} KB  ({(a - b) / n:+8.1f})",
                  file=sys.stderr)
        for key, (b, a) in d["pymalloc"].items():
            if b is not None and a is not None:
                print(f"  pymalloc {key:17} {b:13,} -> {a:13,}", file=sys.stderr)
        print(f"  threads {d['threads'][0]} -> {d['threads'][1]}; objects grown: "
              + ", ".join(f"{k} {v:+}" for k, v in list(d["types_grown"].items())[:10]),
              file=sys.stderr)


def live_runs(url: str) -> int:
    try:  # a traced agent under load answers slowly
        text = httpx.get(url + "/metrics", timeout=60).text
    except httpx.HTTPError:
        return -1
    for line in text.splitlines():
        if line.startswith("agentchat_live_runs "):
            return int(float(line.split()[1]))
    return -1


def tracemalloc_run(opts: argparse.Namespace) -> dict[str, Any]:
    """Snapshots of the agent idle (after a warm-up) and with N live streams, diffed."""
    stages = [int(x) for x in opts.stages.split(",")]
    snaps = Path(os.environ.get("TMPDIR", "/tmp")) / f"agent-scale-tm-{os.getpid()}"
    snaps.mkdir(parents=True, exist_ok=True)
    probe = str(MEMPROBE)
    prompt = f"echo {opts.words} words"
    text = " ".join(f"w{i}" for i in range(opts.words))
    out: dict[str, Any] = {"bench": "agent_scale_tracemalloc", "stages": {}}
    with bench_env("agent-scale-tm",
                   AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S=str(opts.token_delay),
                   PYTHONPATH=probe, AGENTCHAT_BENCH_TRACEMALLOC_DIR=str(snaps),
                   AGENTCHAT_BENCH_TRACEMALLOC_FRAMES="1") as (stack, _):
        pid = stack.agent.proc.pid  # type: ignore[union-attr]
        spec = {"mode": "streams", "n": 10, "expect": text, "url": stack.gradio_url,
                "agent": True, "token": stack.token("alice"), "message": prompt}
        run_client(spec)  # warm-up
        taken = 0

        def snapshot() -> tracemalloc.Snapshot:
            nonlocal taken
            taken += 1
            os.kill(pid, signal.SIGUSR2)
            path = snaps / f"snap-{taken}.tracemalloc"
            deadline = time.monotonic() + 300
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            return tracemalloc.Snapshot.load(str(path))

        time.sleep(2.0)
        idle = snapshot()
        for n in stages:
            box: dict[str, Any] = {}
            client = threading.Thread(target=lambda n=n, box=box: box.update(
                run=run_client({**spec, "n": n})))
            client.start()
            deadline = time.monotonic() + 120
            while live_runs(stack.agent.url) < n and time.monotonic() < deadline:
                time.sleep(0.2)
            # three quarters into the model's own time: most of each answer is out
            time.sleep(0.75 * opts.words * opts.token_delay)
            live = live_runs(stack.agent.url)
            snap = snapshot()
            client.join()
            stats = snap.compare_to(idle, "filename")
            lines = snap.compare_to(idle, "lineno")
            grown = sum(st.size_diff for st in stats)
            out["stages"][n] = {
                "live_at_snapshot": live,
                "kb_per_conversation": round(grown / 1024 / max(1, live), 1),
                "by_file": [{"file": str(st.traceback[0].filename).rsplit("site-packages/", 1)[-1],
                             "kb_per_conversation": round(st.size_diff / 1024 / max(1, live), 2)}
                            for st in stats[:12]],
                "by_line": [{"at": f"{str(st.traceback[0].filename).rsplit('/', 2)[-1]}:"
                                   f"{st.traceback[0].lineno}",
                             "kb_per_conversation": round(st.size_diff / 1024 / max(1, live), 2)}
                            for st in lines[:12]],
                "streams_ok": sum(s["final_ok"] for s in box["run"]["rounds"][0]["streams"]),
            }
            print(f"\n{n} live streams (at snapshot: {live}): "
                  f"{out['stages'][n]['kb_per_conversation']} KB per conversation (tracemalloc)",
                  file=sys.stderr)
            for row in out["stages"][n]["by_file"][:8]:
                print(f"  {row['kb_per_conversation']:8.2f} KB  {row['file']}", file=sys.stderr)
    shutil.rmtree(snaps, ignore_errors=True)
    return out


# Issue 32, item 6: the agent's time to first token over the bare's in the same run, at most
# this much, read off the median of the rounds.


def model_retained_kb(words: int) -> dict[str, float]:
    """What one streamed answer of `words` tokens holds at its last token, measured with
    tracemalloc on the offline planner's real streaming path: `ainvoke` under a per-token
    callback (the old path: BaseChatModel keeps every chunk until the end, to merge them for
    on_llm_end) and the model node's own stream (agent/graph/model.py stream_reply)."""
    import asyncio

    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import HumanMessage

    from agentchat.agent.graph.model import stream_reply
    from agentchat.agent.graph.offline.planner import OfflinePlanner

    held: list[int] = []

    class AtToken(BaseCallbackHandler):
        run_inline = True

        def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
            held.append(tracemalloc.get_traced_memory()[0])

    async def old() -> None:
        await OfflinePlanner().ainvoke([HumanMessage(f"echo {words} words")],
                                       config={"callbacks": [AtToken()]}, stream=True)

    async def lean() -> None:
        await stream_reply(OfflinePlanner(), [HumanMessage(f"echo {words} words")], [],
                           lambda _: held.append(tracemalloc.get_traced_memory()[0]))

    out = {}
    for name, one in (("ainvoke_with_callbacks", old), ("model_node_stream", lean)):
        asyncio.run(one())  # warm: imports, caches
        held.clear()
        tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        asyncio.run(one())
        tracemalloc.stop()
        out[name] = round((max(held) - start) / 1024, 1)
    return out
