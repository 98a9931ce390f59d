"""A run survives its replica (issue 33, docs/protocol.md §4 "Takeover"), from outside: real
agent processes on one PostgreSQL, the Gradio queue protocol, the sandbox's audit.

- SIGKILL of the replica streaming a paced run: a join on the survivor gets `run_resumed`
  (attempt 2, `after_seq`), contiguous seq under the same run_id, a final equal to history;
- a confirmed deploy whose replica is killed while the sandbox runs it: it ends final on the
  survivor and the sandbox executed it once;
- SIGTERM with a run outliving the drain: released, resumed on the survivor within 2 s;
- a stale owner revived (SIGSTOP until the takeover, SIGCONT) writes nothing more for it;
- attempts used up (every replica that takes it killed): RUN_LOST, its detail and `reason`.

The survivor (`stack.agent`) lives for the module; each test starts the replicas it kills.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import audit_ok, history_items, rows, say, wait_for
from testkit.stack import Stack, running_stack
from testkit.support import Service, create_database, drop_database

# A paced model so a run is still streaming when its replica dies; a short heartbeat and lost
# bound so a dead replica's run is taken over within seconds; a lease longer than that (the
# orphan sweep settles a turn whose lease lapsed, and the takeover must come first); two
# attempts, so "attempts used up" needs only two kills.
ENV = {"AGENTCHAT_AGENT_PLANNER_TOKEN_DELAY_S": "0.02", "AGENTCHAT_AGENT_LEASE_S": "15",
       "AGENTCHAT_AGENT_RUN_HEARTBEAT_S": "0.5", "AGENTCHAT_AGENT_RUN_LOST_S": "2",
       "AGENTCHAT_AGENT_RUN_TAKEOVER_POLL_S": "0.25", "AGENTCHAT_AGENT_RUN_MAX_ATTEMPTS": "2"}
LONG = "привет and echo 150 words"
BOUND_S = 45.0
LATENCIES: dict[str, list[float]] = {"sigkill": [], "drain": []}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    url = create_database(pg_server, template=migrated_template)
    try:
        with running_stack(tmp_path_factory.mktemp("takeover"), url,
                           AGENTCHAT_AGENT_REPLICA="survivor", **ENV) as s:
            yield s
    finally:
        drop_database(pg_server, url)
        for kind, got in LATENCIES.items():
            if got:
                print(f"\ntakeover latency {kind}: n={len(got)} "
                      f"p50={statistics.median(got):.2f}s max={max(got):.2f}s")


def victim(stack: Stack, name: str, **env: str) -> Service:
    return stack.start_agent(**{**ENV, "AGENTCHAT_AGENT_REPLICA": name, **env})


def join_message(cid: str, run_id: str, last_seq: int) -> dict[str, Any]:
    return {"text": "", "files": [], "action": "join", "conversation_id": cid,
            "run_id": run_id, "last_seq": last_seq}


async def _join(agent: Service, token: str, cid: str, run_id: str, last_seq: int,
                on_event: Any = None) -> Outcome:
    async with httpx.AsyncClient() as http:
        return await RawChat(agent.url, token, http).submit(
            join_message(cid, run_id, last_seq), timeout=BOUND_S, on_event=on_event)


def seqs(out: Outcome) -> list[int]:
    return [int(e["metadata"]["seq"]) for e in out.events]


def run_row(stack: Stack, run_id: str) -> dict[str, Any]:
    return rows(stack.database_url, "SELECT status, replica, epoch, attempt, resumed_after,"
                " resume_token IS NULL AS token_cleared FROM runs WHERE id=%s", run_id)[0]


def assert_resumed(stack: Stack, joined: Outcome, run_id: str, seen: int, token: str,
                   cid: str) -> dict[str, Any]:
    """The join's stream: run_resumed (attempt 2) at after_seq + 1, contiguous seq under the
    same run_id, the answer starting again, a final equal to what history stores."""
    assert joined.kind == "final", joined.types()
    resumed = joined.of("run_resumed")
    assert len(resumed) == 1, joined.types()
    meta = resumed[0]
    assert meta["attempt"] == 2 and meta["run_id"] == run_id
    after = int(meta["after_seq"])
    assert meta["seq"] == after + 1 and after <= seen
    got = seqs(joined)
    assert got == list(range(got[0], got[0] + len(got))), got
    assert {e["metadata"]["run_id"] for e in joined.events} == {run_id}
    start = got.index(after + 1)
    assert joined.events[start]["content"] == ""  # the client clears the run's partial text
    items = history_items(stack.agent, token, cid)
    assert joined.events[-1]["content"] == [m for m in items
                                            if m["role"] == "assistant"][-1]["content"]
    row = run_row(stack, run_id)
    assert row["status"] == "completed" and row["attempt"] == 2 and row["epoch"] >= 2
    assert row["resumed_after"] == after and row["token_cleared"] is True
    return meta


def test_sigkill_mid_stream_the_survivor_goes_on_with_the_same_run(stack: Stack) -> None:
    doomed = victim(stack, "doomed-kill")
    alice = stack.token("alice")
    killed: dict[str, float] = {}

    def kill_after_tokens(out: Outcome) -> None:
        if len(out.of("stream_token")) == 4 and not killed:
            doomed.stop(signal.SIGKILL)
            killed["at"] = time.monotonic()

    try:
        first = say(doomed, alice, LONG, on_event=kill_after_tokens, timeout=BOUND_S)
        assert first.kind == "dropped" and killed, first.types()
        cid, run_id = str(first.conversation_id), str(first.last["run_id"])
        seen = int(first.last["seq"])
        got: dict[str, float] = {}

        def on_event(out: Outcome) -> None:
            if out.of("run_resumed") and "at" not in got:
                got["at"] = time.monotonic()

        # The client reconnects to the survivor with what it saw (perhaps more than stored).
        joined = asyncio.run(_join(stack.agent, alice, cid, run_id, seen, on_event))
        assert_resumed(stack, joined, run_id, seen, alice, cid)
        took = got["at"] - killed["at"]
        LATENCIES["sigkill"].append(took)
        assert took <= 2 + 5, f"takeover p99 bound: RUN_LOST_S + 5 s ({took:.1f} s)"
        assert run_row(stack, run_id)["replica"] == "survivor"
    finally:
        doomed.kill()


def test_a_confirmed_deploy_killed_mid_call_runs_once_and_ends_on_the_survivor(
        stack: Stack) -> None:
    stack.reset_sandbox()
    doomed = victim(stack, "doomed-deploy")
    try:
        alice = stack.token("alice")
        tab = "tab-" + uuid.uuid4().hex
        card = say(doomed, alice, {"text": "задеплой дашборд 42 в прод", "files": [],
                                   "tab_id": tab})
        assert card.kind == "confirm_required", card.types()
        cid, key = str(card.conversation_id), card.last["confirm_id"]
        stack.fault(operation="deploy_dashboard", delay_s=2)  # the call is in flight when killed

        def kill_at_tool_start(out: Outcome) -> None:
            if out.of("tool_start") and doomed.proc and doomed.proc.poll() is None:
                time.sleep(0.3)  # the request has reached the sandbox
                doomed.stop(signal.SIGKILL)

        confirmed = say(doomed, alice, {"text": "__resume__", "files": [], "tab_id": tab},
                        "confirm", cid, on_event=kill_at_tool_start, timeout=BOUND_S)
        assert confirmed.kind == "dropped", confirmed.types()
        run_id = str(confirmed.last["run_id"])
        joined = asyncio.run(_join(stack.agent, alice, cid, run_id,
                                   int(confirmed.last["seq"])))
        assert_resumed(stack, joined, run_id, int(confirmed.last["seq"]), alice, cid)
        assert joined.of("tool_end"), joined.types()
        time.sleep(2.5)  # the killed replica's request, still in the sandbox, has landed
        assert len(audit_ok(stack, operation="deploy_dashboard", idempotency_key=key)) == 1
        turns = rows(stack.database_url, "SELECT status FROM turns WHERE conversation_id=%s",
                     cid)
        assert [t["status"] for t in turns] == ["completed"]
    finally:
        stack.fault(operation="deploy_dashboard", delay_s=0)
        doomed.kill()


def test_sigterm_hands_a_run_outliving_the_drain_over_within_2_s(stack: Stack) -> None:
    leaving = victim(stack, "leaving", AGENTCHAT_AGENT_DRAIN_S="0.5")
    try:
        alice = stack.token("alice")
        first = say(leaving, alice, "привет and echo 300 words", drop_after=3)
        cid, run_id = str(first.conversation_id), str(first.last["run_id"])
        leaving.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        wait_for(lambda: leaving.proc.poll() is not None,  # type: ignore[union-attr]
                 "the replica exits after its drain", BOUND_S, pause=0.02)
        exited = time.monotonic()
        wait_for(lambda: rows(stack.database_url, "SELECT 1 FROM run_events WHERE run_id=%s"
                              " AND event->'metadata'->>'type' = 'run_resumed'", run_id),
                 "run_resumed stored", BOUND_S, pause=0.02)
        took = time.monotonic() - exited
        LATENCIES["drain"].append(took)
        assert took <= 2.0, f"resumed {took:.2f} s after the drain"
        joined = asyncio.run(_join(stack.agent, alice, cid, run_id, int(first.last["seq"])))
        assert_resumed(stack, joined, run_id, int(first.last["seq"]), alice, cid)
    finally:
        leaving.kill()


def test_a_stale_owner_revived_writes_nothing_more(stack: Stack) -> None:
    paused = victim(stack, "paused")
    alice = stack.token("alice")
    try:
        first = say(paused, alice, LONG, drop_after=3)
        cid, run_id = str(first.conversation_id), str(first.last["run_id"])
        os_pid = paused.proc.pid  # type: ignore[union-attr]
        paused.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            wait_for(lambda: run_row(stack, run_id)["replica"] == "survivor",
                     "the takeover", BOUND_S, pause=0.1)
        finally:
            paused.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        joined = asyncio.run(_join(stack.agent, alice, cid, run_id, int(first.last["seq"])))
        meta = assert_resumed(stack, joined, run_id, int(first.last["seq"]), alice, cid)
        time.sleep(1.5)  # the revived replica's writer and turn have run by now
        assert paused.proc.poll() is None, f"the revived replica {os_pid} lives on"
        stored = rows(stack.database_url, "SELECT seq, event FROM run_events WHERE run_id=%s"
                      " AND seq > %s ORDER BY seq", run_id, meta["after_seq"])
        assert [r["seq"] for r in stored] == [e["metadata"]["seq"] for e in joined.events
                                              if e["metadata"]["seq"] > meta["after_seq"]]
        assert [r["event"]["metadata"].get("type", "final") for r in stored] == joined.types()[
            -len(stored):]
        answers = rows(stack.database_url, "SELECT content FROM messages WHERE"
                       " conversation_id=%s AND role='assistant'", cid)
        assert [a["content"] for a in answers] == [joined.events[-1]["content"]]
        row = run_row(stack, run_id)
        assert row["replica"] == "survivor" and row["status"] == "completed"
    finally:
        paused.kill()


def test_attempts_used_up_end_run_lost_with_the_reason(stack: Stack) -> None:
    first_owner, second_owner = victim(stack, "first-owner"), victim(stack, "second-owner")
    survivor = stack.agent
    alice = stack.token("alice")
    try:
        first = say(first_owner, alice, "привет and echo 400 words", drop_after=3)
        cid, run_id = str(first.conversation_id), str(first.last["run_id"])
        survivor.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            first_owner.stop(signal.SIGKILL)
            wait_for(lambda: run_row(stack, run_id)["replica"] == "second-owner",
                     "the second owner's takeover", BOUND_S, pause=0.1)
            second_owner.stop(signal.SIGKILL)
        finally:
            survivor.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        lost = asyncio.run(_join(survivor, alice, cid, run_id, int(first.last["seq"])))
        assert lost.kind == "error" and lost.last["code"] == "RUN_LOST", lost.types()
        assert lost.last["reason"] == "attempts_used_up" and lost.last["retryable"] is True
        assert "исчерпаны" in lost.last["detail"]
        row = run_row(stack, run_id)
        assert row["status"] == "lost" and row["attempt"] == 2 and row["token_cleared"]
        assert rows(stack.database_url, "SELECT status, error_code FROM turns WHERE"
                    " conversation_id=%s", cid) == [{"status": "failed",
                                                     "error_code": "RUN_LOST"}]
    finally:
        first_owner.kill()
        second_owner.kill()
