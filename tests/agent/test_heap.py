"""The agent's and the sidecar's garbage-collector settings (agentchat/heap.py): what
survives start-up is frozen (and the agent's first-generation threshold raised), as each
started process's own log says; the settings turn it back to Python's behaviour."""

from __future__ import annotations

import re
import subprocess
import sys

from testkit.stack import Stack

LOG_LINE = re.compile(
    r"garbage collector: thresholds \((\d+), (\d+), (\d+)\), (\d+) objects frozen")


def test_a_started_agent_freezes_its_start_up_heap(stack: Stack) -> None:
    found = LOG_LINE.search(stack.agent.log_tail(200_000))
    assert found, "the agent logs its collector's settings once started"
    gen0, gen1, gen2, frozen = map(int, found.groups())
    assert (gen0, gen1, gen2) == (50_000, 10, 10)
    # Gradio, LangChain, LangGraph, the catalog and the embedding model: far over 10,000.
    assert frozen > 10_000


def test_a_started_sidecar_freezes_its_start_up_heap(stack: Stack) -> None:
    found = LOG_LINE.search(stack.policy.log_tail(200_000))
    assert found, "the sidecar logs its collector's settings once started"
    gen0, _, _, frozen = map(int, found.groups())
    assert gen0 == 700  # the sidecar keeps Python's first generation
    assert frozen > 10_000  # FastAPI, pydantic, Casbin, OpenTelemetry


def test_the_settings_turn_it_off() -> None:
    # Its own process: a freeze in the test runner would keep the runner's garbage for good.
    code = ("import gc\n"
            "from agentchat import heap\n"
            "from agentchat.agent.settings import AgentSettings\n"
            "s = AgentSettings()\n"
            "print(heap.tune(freeze=s.tuning.gc_freeze, gen0_threshold=s.tuning.gc_gen0_threshold),"
            " gc.get_threshold()[0])\n")
    env = {"AGENTCHAT_AGENT_TUNING__GC_FREEZE": "false",
           "AGENTCHAT_AGENT_TUNING__GC_GEN0_THRESHOLD": "0", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert out == ["0", "700"]
