"""Takeover latency (issue 33, docs/protocol.md §4 "Takeover"): how long a run goes without a
replica when its replica is SIGKILLed or drains, over many rounds. Goals: p99 ≤ RUN_LOST_S +
5 s after a SIGKILL; ≤ 2 s after a drain; every taken-over run ends final.

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/takeover.py [--rounds 10] [--kinds sigkill,drain] \\
        [--run-lost-s S] [--heartbeat-s S] [--drain-s 0.5] [--words 150]

The stack of tests/testkit/stack.py as real processes, a paced offline planner
(AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S), the product's own RUN_LOST_S (10 s) and run
heartbeat (2 s) unless a flag sets them. Two replicas at a time: the survivor (started with the
stack, lives for the run) and a victim started fresh for each round; the rounds alternate kinds, so
a busy moment on the machine hurts both alike. Per round, a long answer is asked of the
victim, the client drops after a few events, the run's row is stored, then:

- sigkill: the victim's process group gets SIGKILL (as testkit's Service.kill); a client joins
  the run on the survivor at once (`run_id` + its last `seq`, RawChat over Gradio's queue);
  latency = the kill → the `run_resumed` event at that client.
- drain: the victim (AGENTCHAT_AGENT_DRAIN_S short, the run outlives it) gets SIGTERM and the
  same join starts on the survivor; latency = the drain's end (SIGTERM + DRAIN_S) →
  `run_resumed` at the client. Conservative: the replica releases its runs at or after that
  moment (after uvicorn's shutdown); `from_exit_s` (the victim's exit → `run_resumed`, the
  figure tests/system/test_takeover.py asserts) is printed too, and may be below zero.

Each round also reads the survivor's `agentchat_run_takeover_seconds` (its own view: the old
owner's last heartbeat or release → its claim) and checks the run: the join ends final, one
`run_resumed` (attempt 2), the run `completed`, the final text equal to the stored answer. A
round that does not end so is reported in `failures`, never left out silently. The figures'
floor is the design's own (RUN_LOST_S after the run's last beat, and a streaming run beats
with every stored batch; the drain's end), so there is no other baseline; `over_run_lost_s`
is what the product adds beyond its designed wait.
Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentchat.agent.settings import AgentTuning
from common import Stack, bench_env, summary
from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import rows, say, wait_for
from testkit.support import Service

DRAIN_BOUND_S = 2.0
SIGKILL_MARGIN_S = 5.0
METRIC = "agentchat_run_takeover_seconds"


def default(name: str) -> float:
    return float(AgentTuning.default_of(name))


@dataclass
class Round:
    kind: str
    index: int
    victim_start_s: float = 0.0
    latency_s: float | None = None  # the kill / the drain's end → run_resumed at the client
    from_exit_s: float | None = None  # drain: the victim's exit → run_resumed
    unowned_s: float | None = None  # the survivor's metric for this takeover
    outcome: str = "?"  # resumed_final, or what went wrong
    detail: dict[str, Any] = field(default_factory=dict)


def metric(agent: Service) -> tuple[float, float]:
    """The survivor's takeover histogram so far: (sum, count)."""
    text = httpx.get(agent.url + "/metrics", timeout=10).text
    got = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for part in got:
            if line.startswith(f"{METRIC}_{part} "):
                got[part] = float(line.split()[-1])
    return got["sum"], got["count"]


def join_message(cid: str, run_id: str, last_seq: int) -> dict[str, Any]:
    return {"text": "", "files": [], "action": "join", "conversation_id": cid,
            "run_id": run_id, "last_seq": last_seq}


def join(agent: Service, token: str, cid: str, run_id: str, last_seq: int, timeout: float,
         seen: dict[str, float]) -> Outcome:
    """Join on `agent`; `seen["resumed"]` is the monotonic time `run_resumed` arrived."""
    def on_event(out: Outcome) -> None:
        if out.events[-1]["metadata"].get("type") == "run_resumed" and "resumed" not in seen:
            seen["resumed"] = time.monotonic()

    async def go() -> Outcome:
        async with httpx.AsyncClient() as http:
            return await RawChat(agent.url, token, http).submit(
                join_message(cid, run_id, last_seq), timeout=timeout, on_event=on_event)

    return asyncio.run(go())


def run_row(stack: Stack, run_id: str) -> dict[str, Any] | None:
    got = rows(stack.database_url, "SELECT status, replica, attempt, resumed_after FROM runs"
               " WHERE id=%s", run_id)
    return got[0] if got else None


def stored_answer(stack: Stack, cid: str) -> str | None:
    got = rows(stack.database_url, "SELECT content FROM messages WHERE conversation_id=%s AND"
               " role='assistant' AND NOT partial ORDER BY pos DESC LIMIT 1", cid)
    return str(got[0]["content"]) if got else None


def judge(stack: Stack, r: Round, joined: Outcome, cid: str, run_id: str) -> None:
    """Did the run go on once, under its run_id, and end final with the stored answer?"""
    row = run_row(stack, run_id) or {}
    resumed = joined.of("run_resumed")
    final = joined.events[-1]["content"] if joined.kind == "final" else None
    r.detail.update({
        "after_seq": resumed[0].get("after_seq") if resumed else None,
        "attempt": resumed[0].get("attempt") if resumed else None,
        "claimed_by": row.get("replica"), "run_status": row.get("status"),
        "join_ended": joined.kind if joined.kind != "error" else
        f"error:{joined.last.get('code')}:{joined.last.get('reason')}"})
    if joined.transport_error:
        r.outcome = f"join_dropped:{joined.transport_error}"
    elif not resumed:
        r.outcome = ("finished_before_takeover" if row.get("attempt") == 1
                     and row.get("status") == "completed" else "not_resumed")
    elif len(resumed) != 1 or resumed[0].get("attempt") != 2:
        r.outcome = "resumed_oddly"
    elif joined.kind != "final" or row.get("status") != "completed":
        r.outcome = "lost"  # resumed, but did not end final
    elif final != stored_answer(stack, cid):
        r.outcome = "final_not_equal_stored"
    else:
        r.outcome = "resumed_final"


def start_long_run(stack: Stack, victim: Service, token: str, words: int,
                   r: Round) -> tuple[str, str, int] | None:
    """A paced answer on the victim, dropped by its client after a few events; waits until
    the run's row is stored (a run not stored yet cannot be taken over). (cid, run_id, seq)."""
    first = say(victim, token, f"привет and echo {words} words", drop_after=4, timeout=60)
    if not first.events or not first.last.get("run_id"):
        r.outcome, r.detail["first"] = "no_run_started", first.types()
        return None
    cid, run_id = str(first.conversation_id), str(first.last["run_id"])
    wait_for(lambda: run_row(stack, run_id), "the run's row", 30, pause=0.02)
    if (run_row(stack, run_id) or {}).get("status") != "running":
        r.outcome = "finished_before_the_fault"  # the answer was too short for this machine
        return None
    return cid, run_id, int(first.last["seq"])


@contextlib.contextmanager
def victim_with_run(stack: Stack, r: Round, opts: argparse.Namespace, token: str,
                    **env: str) -> Iterator[tuple[Service, str, str, int,
                                                  tuple[float, float]] | None]:
    """A fresh victim replica (its start time noted in `r`) with a long run stored on it:
    (victim, cid, run_id, seq, the survivor's takeover metric before the fault), or None if
    no run was left to take over. The victim is killed after the round."""
    started = time.monotonic()
    victim = stack.start_agent(**env)
    r.victim_start_s = time.monotonic() - started
    try:
        run = start_long_run(stack, victim, token, opts.words, r)
        yield None if run is None else (victim, *run, metric(stack.agent))
    finally:
        victim.kill()


def sigkill_round(stack: Stack, r: Round, opts: argparse.Namespace, lost_s: float,
                  token: str) -> None:
    with victim_with_run(stack, r, opts, token,
                         AGENTCHAT_AGENT_TUNING__REPLICA=f"victim-k{r.index}") as got:
        if got is None:
            return
        victim, cid, run_id, seq, before = got
        assert victim.proc is not None
        os.killpg(victim.proc.pid, signal.SIGKILL)  # the whole group, as Service.kill
        killed = time.monotonic()
        victim.proc.wait(10)
        seen: dict[str, float] = {}
        joined = join(stack.agent, token, cid, run_id, seq, lost_s + 90, seen)
        if "resumed" in seen:
            r.latency_s = seen["resumed"] - killed
        r.unowned_s = unowned(stack.agent, before)
        judge(stack, r, joined, cid, run_id)


def drain_round(stack: Stack, r: Round, opts: argparse.Namespace, lost_s: float,
                token: str) -> None:
    with victim_with_run(stack, r, opts, token,
                         AGENTCHAT_AGENT_TUNING__REPLICA=f"victim-d{r.index}",
                         AGENTCHAT_AGENT_DRAIN_S=str(opts.drain_s)) as got:
        if got is None:
            return
        victim, cid, run_id, seq, before = got
        assert victim.proc is not None
        seen: dict[str, float] = {}
        out: dict[str, Outcome] = {}
        victim.proc.send_signal(signal.SIGTERM)  # the process, as the kubelet does
        termed = time.monotonic()
        # The client reconnects on the survivor at once, while the victim drains.
        joiner = threading.Thread(target=lambda: out.setdefault("joined", join(
            stack.agent, token, cid, run_id, seq, lost_s + 90, seen)), daemon=True)
        joiner.start()
        proc = victim.proc
        wait_for(lambda: proc.poll() is not None, "the victim exits after its drain", 60,
                 pause=0.01)
        exited = time.monotonic()
        joiner.join(lost_s + 120)
        if "resumed" in seen:
            r.latency_s = seen["resumed"] - (termed + opts.drain_s)
            r.from_exit_s = seen["resumed"] - exited
        r.detail["exit_after_sigterm_s"] = round(exited - termed, 2)
        r.unowned_s = unowned(stack.agent, before)
        if "joined" not in out:
            r.outcome = "join_hung"
            return
        judge(stack, r, out["joined"], cid, run_id)


def unowned(agent: Service, before: tuple[float, float]) -> float | None:
    """The survivor's own figure for this round's takeover (None if it claimed none)."""
    with contextlib.suppress(httpx.HTTPError):
        total, count = metric(agent)
        if count > before[1]:
            return (total - before[0]) / (count - before[1])
    return None


def stats(values: list[float], digits: int = 2) -> dict[str, float] | None:
    return summary(values, digits) if values else None


def figures(rounds: list[Round], kind: str, bound_s: float, lost_s: float) -> dict[str, Any]:
    mine = [r for r in rounds if r.kind == kind]
    ok = [r for r in mine if r.outcome == "resumed_final" and r.latency_s is not None]
    lat = [r.latency_s for r in ok if r.latency_s is not None]
    out: dict[str, Any] = {
        "rounds": len(mine), "resumed_final": len(ok),
        "latency_s": stats(lat),
        "bound_s": bound_s,
        "p99_within_bound": bool(lat) and summary(lat, 2)["p99"] <= bound_s,
        "survivor_unowned_s": stats([r.unowned_s for r in ok if r.unowned_s is not None]),
        "victim_start_s": stats([r.victim_start_s for r in mine], 1),
        "outcomes": {o: sum(r.outcome == o for r in mine) for o in sorted({r.outcome
                                                                          for r in mine})},
    }
    if kind == "sigkill":
        out["measured_from"] = "SIGKILL of the victim's process group"
        out["over_run_lost_s"] = stats([x - lost_s for x in lat])
    else:
        out["measured_from"] = "the drain's end (SIGTERM + DRAIN_S); the release is at or after"
        out["from_exit_s"] = stats([r.from_exit_s for r in ok if r.from_exit_s is not None])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10, help="rounds of each kind")
    ap.add_argument("--kinds", default="sigkill,drain", help="sigkill, drain or both")
    ap.add_argument("--run-lost-s", type=float, default=None,
                    help="AGENTCHAT_AGENT_TUNING__RUN_LOST_S (default: the product's, 10 s)")
    ap.add_argument("--heartbeat-s", type=float, default=None,
                    help="AGENTCHAT_AGENT_TUNING__RUN_HEARTBEAT_S (default: the product's, 2 s)")
    ap.add_argument("--drain-s", type=float, default=0.5,
                    help="the victim's AGENTCHAT_AGENT_DRAIN_S (the run outlives it)")
    ap.add_argument("--token-delay", type=float, default=0.02,
                    help="AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S (the paced model)")
    ap.add_argument("--words", type=int, default=150, help="the answer's length")
    opts = ap.parse_args()
    kinds = [k for k in ("sigkill", "drain") if k in opts.kinds.split(",")]
    lost_s = opts.run_lost_s if opts.run_lost_s is not None else default("run_lost_s")
    heartbeat_s = opts.heartbeat_s if opts.heartbeat_s is not None else default(
        "run_heartbeat_s")
    env = {"AGENTCHAT_AGENT_TUNING__REPLICA": "survivor",
           "AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": str(opts.token_delay)}
    if opts.run_lost_s is not None:
        env["AGENTCHAT_AGENT_TUNING__RUN_LOST_S"] = str(opts.run_lost_s)
        # The orphan sweep settles a turn whose lease lapsed: the lease stays well above.
        env["AGENTCHAT_AGENT_TUNING__LEASE_S"] = str(max(default("lease_s"), 3 * opts.run_lost_s))
    if opts.heartbeat_s is not None:
        env["AGENTCHAT_AGENT_TUNING__RUN_HEARTBEAT_S"] = str(opts.heartbeat_s)
    bounds = {"sigkill": lost_s + SIGKILL_MARGIN_S, "drain": DRAIN_BOUND_S}
    rounds: list[Round] = []
    with bench_env("takeover", **env) as (stack, _):
        token = stack.token("alice")
        say(stack.agent, token, "привет and echo 5 words", timeout=60)  # warm-up
        for i in range(opts.rounds):
            for kind in kinds:
                r = Round(kind, i)
                rounds.append(r)
                try:
                    (sigkill_round if kind == "sigkill" else drain_round)(
                        stack, r, opts, lost_s, token)
                except Exception as e:  # one bad round is reported, the others go on
                    r.outcome = f"failed:{type(e).__name__}"
                    r.detail["error"] = str(e)[:300]
                print(f"{kind:7s} round {i}: {r.outcome} latency "
                      f"{'-' if r.latency_s is None else f'{r.latency_s:.2f} s'}"
                      f" unowned {r.unowned_s} {r.detail}", file=sys.stderr, flush=True)
    result = {k: figures(rounds, k, bounds[k], lost_s) for k in kinds}
    for k, f in result.items():
        print(f"{k}: {f['resumed_final']}/{f['rounds']} resumed and final; latency "
              f"{f['latency_s']} s ({f['measured_from']}); bound {f['bound_s']:g} s "
              f"{'met' if f['p99_within_bound'] else 'NOT met'}", flush=True)
    failures = [{"kind": r.kind, "round": r.index, "outcome": r.outcome, **r.detail}
                for r in rounds if r.outcome != "resumed_final"]
    lost = [f for f in failures if f["outcome"] not in ("finished_before_the_fault",
                                                         "finished_before_takeover")]
    goals: dict[str, bool] = {f"{k}_p99_within_bound": result[k]["p99_within_bound"]
                              for k in kinds}
    goals["every_run_resumed_and_final"] = not lost
    print(json.dumps({
        "bench": "takeover", "rounds_each": opts.rounds, "run_lost_s": lost_s,
        "run_heartbeat_s": heartbeat_s, "drain_s": opts.drain_s,
        "run_takeover_poll_s": default("run_takeover_poll_s"),
        "token_delay_s": opts.token_delay, "words": opts.words,
        **result, "runs_not_resumed_final": len(lost), "failures": failures[:10],
        "goals": goals}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
