"""bench/agent_scale.py --tracemalloc: put on the agent process's PYTHONPATH, this starts
tracemalloc at interpreter start-up and dumps a snapshot to AGENTCHAT_BENCH_TRACEMALLOC_DIR
(snap-1.tracemalloc, snap-2…) at each SIGUSR2. Bench-only: nothing in the product imports it.
"""

from __future__ import annotations

import itertools
import os
import signal
import tracemalloc
from pathlib import Path

_DIR = os.environ.get("AGENTCHAT_BENCH_TRACEMALLOC_DIR")
if _DIR:
    tracemalloc.start(int(os.environ.get("AGENTCHAT_BENCH_TRACEMALLOC_FRAMES", "8")))
    _count = itertools.count(1)

    def _dump(signum: int, frame: object) -> None:
        path = Path(_DIR) / f"snap-{next(_count)}.tracemalloc"
        tracemalloc.take_snapshot().dump(str(path) + ".part")
        os.replace(str(path) + ".part", path)  # whole, or not there yet

    signal.signal(signal.SIGUSR2, _dump)
