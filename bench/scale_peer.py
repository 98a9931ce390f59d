"""bench/agent_scale.py's other sides: the peer, LangGraph Agent Server (bench/peer/, from its own
virtualenv: `make peer-langgraph`), and the paced OpenAI-compatible model both the agent and the
peer call in the `http` model setup (tests/testkit/openai_stub.py, OPENAI_STUB_TOKEN_DELAY_S).

The peer runs as `langgraph dev` would (one process, `--no-reload`, jobs per worker ≥ the
conversations, an explicit port), offline, file persistence off, its log at WARNING (the dev
server logs every run at INFO otherwise: a cost no deployment would keep), a fresh server per
round; checkpoints in memory or in PostgreSQL (LangGraph's own saver on a pool of 20, the
agent's pool size).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import BENCH, ROOT, RssSampler, run_client, scratch_database
from scale_measure import measure
from scale_profile import cpu_seconds
from testkit.support import Service, free_port

PEER_PYTHON = ROOT / ".cache" / "peer-langgraph" / "bin" / "python"
# The peer's variants: checkpoints (memory | postgres) x its queue's poll for new runs (as
# shipped, 0.5 s | patched to POLL_SHORT_S: the labelled sensitivity run).
POLL_SHORT_S = 0.005
OFFLINE = {"LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGGRAPH_NO_VERSION_CHECK": "true",
           "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false",
           "LOG_LEVEL": "WARNING", "PYTHONPATH": ""}


def peer_ready() -> None:
    if not PEER_PYTHON.exists():
        raise SystemExit("the peer's virtualenv is missing: run `make peer-langgraph` first")


@contextlib.contextmanager
def stub_model(tmp: Path, token_delay_s: float) -> Iterator[Service]:
    """The paced OpenAI-compatible model of the `http` setup, as its own process."""
    port = free_port()
    svc = Service([str(port)], env={"OPENAI_STUB_TOKEN_DELAY_S": str(token_delay_s)},
                  port=port, log=tmp / "model.log", ready_path="/livez",
                  exe=[sys.executable, str(ROOT / "tests" / "testkit" / "openai_stub.py")])
    svc.start(timeout=60)
    try:
        yield svc
    finally:
        svc.stop()


def agent_model_env(model: Service | None) -> dict[str, str]:
    """The agent's settings for the `http` setup (the model over ChatOpenAI, as in production)."""
    if model is None:
        return {}
    return {"AGENTCHAT_AGENT_LLM": "openai:stub-model",
            "AGENTCHAT_AGENT_LLM_BASE_URL": model.url + "/v1",
            "AGENTCHAT_AGENT_LLM_API_KEY": "sk-local", "AGENTCHAT_AGENT_LLM_TIMEOUT_S": "60"}


@contextlib.contextmanager
def peer_server(tmp: Path, n: int, token_delay_s: float, model: Service | None,
                persistence: str, poll_s: float | None,
                blocking_check: bool) -> Iterator[Service]:
    """A fresh LangGraph Agent Server (bench/peer/server.py), and its database if any."""
    env = {**OFFLINE, "PEER_TOKEN_DELAY_S": str(token_delay_s)}
    if model is not None:
        env.update(PEER_MODEL="openai", PEER_OPENAI_BASE_URL=model.url + "/v1")
    with contextlib.ExitStack() as stack:
        if persistence == "postgres":
            env["PEER_PG_URL"] = stack.enter_context(scratch_database(tmp))
        port = free_port()
        workdir = tmp / f"peer-{port}"
        workdir.mkdir()
        args = ["--port", str(port), "--jobs", str(max(n, 10)), "--checkpointer", persistence,
                "--workdir", str(workdir),
                *(["--poll-s", str(poll_s)] if poll_s is not None else []),
                *(["--blocking-check"] if blocking_check else [])]
        svc = Service(args, env=env, port=port, ready_path="/ok", log=tmp / "peer.log",
                      exe=[str(PEER_PYTHON), str(BENCH / "peer" / "server.py")])
        svc.start(timeout=120)
        try:
            yield svc
        finally:
            svc.stop()


def variants(persistence: str, poll: str) -> list[tuple[str, str, float | None]]:
    """(label, persistence, poll_s) for each peer variant asked for."""
    stores = ["memory", "postgres"] if persistence == "both" else [persistence]
    polls = {"shipped": [None], "short": [POLL_SHORT_S],
             "both": [None, POLL_SHORT_S]}[poll]
    return [(f"peer_{s}_{'poll_short' if p else 'shipped'}", s, p) for s in stores for p in polls]


def peer_run(tmp: Path, spec: dict[str, Any], token_delay_s: float, model: Service | None,
             persistence: str, poll_s: float | None, blocking_check: bool) -> dict[str, Any]:
    """The same streams from the peer: a warm-up, then the measured burst."""
    n = spec["n"]
    with peer_server(tmp, n, token_delay_s, model, persistence, poll_s, blocking_check) as peer:
        pspec = {**spec, "url": peer.url, "agent": False, "token": None, "tokens": []}
        run_client({**pspec, "n": 10}, script="langgraph.mjs")  # warm-up
        pid = peer.proc.pid  # type: ignore[union-attr]
        return measured(pid, n, token_delay_s, model,
                        lambda: run_client(pspec, script="langgraph.mjs"))


def measured(pid: int, n: int, token_delay_s: float, model: Service | None,
             run: Any) -> dict[str, Any]:
    """One side's burst: its streams, its process tree's CPU and memory, the model's CPU."""
    model_pid = model.proc.pid if model is not None else None  # type: ignore[union-attr]
    with RssSampler(pid) as rss:
        before = rss.rss()
        cpu0 = cpu_seconds(pid)
        m0 = cpu_seconds(model_pid) if model_pid else 0.0
        result = run()
        cpu1 = cpu_seconds(pid)
        m1 = cpu_seconds(model_pid) if model_pid else 0.0
    out = measure(result, token_delay_s)
    out["cpu_ms_per_token"] = round((cpu1 - cpu0) * 1000 / max(1, out["tokens"]), 3)
    out["kb_per_conversation"] = {"peak": round((rss.peak - before) / 1024 / n, 1)}
    out["rss_mb"] = {"before": round(before / 2**20, 1), "peak": round(rss.peak / 2**20, 1)}
    if model_pid:
        out["model_cpu_ms_per_token"] = round((m1 - m0) * 1000 / max(1, out["tokens"]), 3)
    return out
