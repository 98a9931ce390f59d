"""bench/agent_scale.py --tracemalloc: put on the agent process's PYTHONPATH, this dumps a
snapshot to AGENTCHAT_BENCH_TRACEMALLOC_DIR (snap-1.tracemalloc, snap-2…) at each SIGUSR2,
tracing from the first one (traced from start-up, the agent does not start within its bound:
what grows after the idle snapshot is what the diff needs); `--memstats`: see below.
Bench-only: nothing in the product imports it.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import tracemalloc
from pathlib import Path

# Probes for benchmarks, like the product's benchmark switches: refused outside dev mode, so an
# environment copied from a benchmark never turns them on in a deployment.
_PROBES = sorted(k for k in os.environ if k.startswith("AGENTCHAT_BENCH_"))
if _PROBES and os.environ.get("AGENTCHAT_MODE") != "dev":
    print(f"bench/memprobe: refusing to start: {', '.join(_PROBES)}: for benchmarks only, "
          "refused outside dev mode (AGENTCHAT_MODE=dev)", file=sys.stderr, flush=True)
    os._exit(2)  # sitecustomize: SystemExit would end in a "Fatal Python error" traceback

_DIR = os.environ.get("AGENTCHAT_BENCH_TRACEMALLOC_DIR")
if _DIR:
    _count = itertools.count(1)

    def _dump(signum: int, frame: object) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(int(os.environ.get("AGENTCHAT_BENCH_TRACEMALLOC_FRAMES", "8")))
        path = Path(_DIR) / f"snap-{next(_count)}.tracemalloc"
        tracemalloc.take_snapshot().dump(str(path) + ".part")
        os.replace(str(path) + ".part", path)  # whole, or not there yet

    signal.signal(signal.SIGUSR2, _dump)

# AGENTCHAT_BENCH_MEMSTATS_DIR (bench/agent_scale.py --memstats): at each SIGUSR1, what holds
# the process's memory, as JSON (stats-1.json, stats-2.json…): pymalloc's arenas and blocks
# (sys._debugmallocstats), the live gc-tracked objects by type, and the threads. No tracing,
# so the run itself is not slowed.
_STATS_DIR = os.environ.get("AGENTCHAT_BENCH_MEMSTATS_DIR")
if _STATS_DIR:
    import collections
    import gc
    import json
    import sys
    import tempfile
    import threading

    _stats_count = itertools.count(1)

    def _pymalloc() -> dict[str, int]:
        # _debugmallocstats writes to the C-level stderr: borrow fd 2 for a moment.
        with tempfile.TemporaryFile(mode="w+") as out:
            sys.stderr.flush()
            saved = os.dup(2)
            try:
                os.dup2(out.fileno(), 2)
                sys._debugmallocstats()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            out.seek(0)
            text = out.read()
        wanted = {"# arenas allocated current": "arenas_current",
                  "# arenas highwater mark": "arenas_highwater",
                  "bytes in allocated blocks": "allocated_bytes",
                  "bytes in available blocks": "available_bytes",
                  "unused pools": "unused_pool_bytes"}
        found: dict[str, int] = {}
        for line in text.splitlines():
            for prefix, key in wanted.items():
                if prefix in line and "=" in line:
                    found[key] = int(line.rsplit("=", 1)[1].replace(",", "").strip())
        return found

    def _stats(signum: int, frame: object) -> None:
        types = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        path = Path(_STATS_DIR) / f"stats-{next(_stats_count)}.json"
        path.with_suffix(".part").write_text(json.dumps({
            "pymalloc": _pymalloc(), "blocks": sys.getallocatedblocks(),
            "threads": threading.active_count(), "types": dict(types.most_common(400))}))
        os.replace(path.with_suffix(".part"), path)

    signal.signal(signal.SIGUSR1, _stats)

# AGENTCHAT_BENCH_GCSTATS_FILE (bench/agent_scale.py --gcstats): the garbage collector's
# pauses by generation (count, total ms, how many over 50 ms, the garbage found, and the
# thread's CPU ms, which another process's load does not stretch), rewritten
# once a second by a thread, so the file holds the figures up to the last second whatever
# way the process ends.
_GC_FILE = os.environ.get("AGENTCHAT_BENCH_GCSTATS_FILE")
if _GC_FILE:
    import gc
    import json
    import threading
    import time

    _gc_started = [0.0, 0.0]
    _gc_stats = {g: {"count": 0, "total_ms": 0.0, "cpu_ms": 0.0, "over_50ms": 0, "collected": 0}
                 for g in (0, 1, 2)}

    def _on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            _gc_started[:] = [time.perf_counter(), time.thread_time()]
            return
        ms = (time.perf_counter() - _gc_started[0]) * 1000
        s = _gc_stats[info["generation"]]
        s["count"] += 1
        s["total_ms"] += ms
        s["cpu_ms"] += (time.thread_time() - _gc_started[1]) * 1000
        s["over_50ms"] += ms > 50
        s["collected"] += info["collected"]

    def _gc_writer() -> None:
        while True:
            time.sleep(1.0)
            # No gc.get_objects() here: a list of every object each second would load the
            # process being measured.
            Path(_GC_FILE + ".part").write_text(json.dumps(
                {"stats": _gc_stats, "frozen": gc.get_freeze_count()}))
            os.replace(_GC_FILE + ".part", _GC_FILE)

    gc.callbacks.append(_on_gc)
    threading.Thread(target=_gc_writer, daemon=True, name="bench-gcstats").start()
