"""bench/agent_scale.py --tracemalloc: put on the agent process's PYTHONPATH, this dumps a
snapshot to AGENTCHAT_BENCH_TRACEMALLOC_DIR (snap-1.tracemalloc, snap-2…) at each SIGUSR2,
tracing from the first one (traced from start-up, the agent does not start within its bound:
what grows after the idle snapshot is what the diff needs). Bench-only: nothing in the product
imports it.
"""

from __future__ import annotations

import itertools
import os
import signal
import tracemalloc
from pathlib import Path

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
