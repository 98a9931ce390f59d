"""The process's heap: the garbage collector's settings for a replica, and the idle trim.

    start-up ─► tune() ─► gen0 threshold; gc.collect(); gc.freeze()   (once, after build_services)
    a burst of runs ends ─► RunHub waits idle_trim_s ─► trim() ─► gc.collect(); malloc_trim(0)

Why freeze: the agent's heap holds ~360,000 gc-tracked objects after start-up (Gradio,
LangChain, LangGraph, the catalog, the embedding model), almost none of which ever becomes
garbage. A full collection walks them all: at 200 live streams, 7 full collections took 3.0 s
of the round's CPU, ~430 ms each, a pause every stream saw as a gap (bench/agent_scale.py
--gcstats; bench/HISTORY.md, "The garbage collector"). Frozen, they are left out of every
collection (~140 ms each then); refcounting still frees them if they ever go.

Why a first-generation threshold of 50,000 (Python's is 700): a young collection cost ~2.8 ms
here at 700 (one at 50,000, ~40 ms), and 200 streams made ~900 of them a round (2.5 s of CPU;
they also promoted short-lived objects into the older generations, whose collections cost
~1.4 s more). At 50,000 the round made 5 (0.2 s), with CPU per token 26-32 % lower and the p99
gap halved in paired runs. The cycles a turn leaves wait longer for their collection; the idle
trim collects them when the burst ends, and the peak RSS a conversation was lower, not higher.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), or None where the C library has none (musl, macOS)."""
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: fn(0)


MALLOC_TRIM = _malloc_trim()


def tune(*, freeze: bool, gen0_threshold: int) -> int:
    """After start-up: `gen0_threshold` > 0 sets the first generation's threshold; `freeze`
    collects once, then moves every object that survived start-up out of the collector's
    reach. Returns how many objects are frozen."""
    if gen0_threshold > 0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(gen0_threshold, gen1, gen2)
    if freeze:
        gc.collect()
        gc.freeze()
    return gc.get_freeze_count()


def trim() -> None:
    """The cyclic garbage collected now rather than at the next full collection, and the heap
    glibc keeps after it handed back to the OS."""
    gc.collect()
    if MALLOC_TRIM is not None:
        MALLOC_TRIM()
