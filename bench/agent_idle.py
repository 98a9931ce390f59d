"""What an agent replica costs before it serves anyone: the CPU of its start (imports, the app,
the tool selector) and of idling, with Gradio's own idle queue poll (every 1 ms, the
baseline, in the same run) against ours (`AGENTCHAT_AGENT_TUNING__GRADIO_QUEUE_POLL_S`, 10 ms).

    .venv/bin/python bench/agent_idle.py [--seconds 20]

Each agent is a real process on the stack of tests/testkit/stack.py; CPU is the process's own
(user + system from /proc), so other load on the machine changes it little. Prints one JSON
object on its last line: start CPU seconds and idle share of one core, each way.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from common import bench_env

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    out: dict[str, object] = {"seconds": args.seconds}
    with bench_env("agent-idle") as (stack, _):
        for name, poll in (("gradio_1ms", "0.001"), ("ours_10ms", None)):
            env = {"AGENTCHAT_AGENT_TUNING__GRADIO_QUEUE_POLL_S": poll} if poll else {}
            agent = stack.start_agent(**env)
            assert agent.proc is not None
            started = cpu_s(agent.proc.pid)
            time.sleep(args.seconds)
            idle = cpu_s(agent.proc.pid) - started
            out[name] = {"start_cpu_s": round(started, 2),
                         "idle_core_share": round(idle / args.seconds, 4)}
            print(name, out[name], flush=True)
            agent.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
