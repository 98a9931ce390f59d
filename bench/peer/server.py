"""LangGraph Agent Server for bench/agent_scale.py --peer langgraph, started with the peer's
own Python (`make peer-langgraph`: .cache/peer-langgraph/bin/python bench/peer/server.py ...).

What `langgraph dev --no-reload --no-browser --n-jobs-per-worker N --port P` runs, through
`langgraph_api.cli.run_server`, which can also turn file persistence off (the CLI cannot).
The in-memory runtime is the only one obtainable offline. `--poll-s`: the in-memory queue's
0.5 s poll for new runs shortened (the labelled sensitivity run); `--blocking-check`: the dev
server's blocking-call checker on (the CLI's default; off unless asked).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SHIPPED_POLL_S = 0.5  # langgraph_runtime_inmem.ops.Runs.next


def shorten_poll(poll_s: float) -> None:
    """Runs.next sleeps 0.5 s when told to wait for a run: that sleep, and only it, shortened."""
    from langgraph_runtime_inmem import ops

    real = ops.asyncio

    class Asyncio:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        @staticmethod
        async def sleep(delay: float, result: Any = None) -> Any:
            return await real.sleep(poll_s if delay == SHIPPED_POLL_S else delay, result)

    ops.asyncio = Asyncio()  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jobs", type=int, required=True, help="--n-jobs-per-worker")
    parser.add_argument("--checkpointer", choices=["memory", "postgres"], default="memory")
    parser.add_argument("--poll-s", type=float, default=None)
    parser.add_argument("--blocking-check", action="store_true")
    parser.add_argument("--workdir", required=True,
                        help="its working directory (the dev server writes .langgraph_api/ there)")
    opts = parser.parse_args()
    os.chdir(opts.workdir)
    for name, value in {"LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true",
                        "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false"}.items():
        os.environ[name] = value
    if opts.poll_s is not None:
        shorten_poll(opts.poll_s)
    from langgraph_api.cli import run_server

    graph = str(HERE / "graph.py")
    run_server(host="127.0.0.1", port=opts.port, reload=False, graphs={"echo": f"{graph}:graph"},
               n_jobs_per_worker=opts.jobs, open_browser=False, disable_persistence=True,
               allow_blocking=not opts.blocking_check, server_level="WARNING",
               checkpointer={"path": f"{graph}:checkpointer"}
               if opts.checkpointer == "postgres" else None)


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
