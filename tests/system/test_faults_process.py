"""Processes dying under a turn: `kill -9` of the agent mid-stream and mid-tool-call, the
sidecar killed and restarted, the client's connection dropped mid-turn.

Each test checks what the client saw (a named error, a completed turn, or a connection reset:
never a hang past a generous bound) and what is stored afterwards (assert_consistent, the
sandbox audit against what the client was told). A killed agent's turn is settled by the
surviving replica's sweeper (agent/chat/sweeper.py); `retry` finishes a run that died mid-call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import (
    assert_consistent,
    at_first,
    audit_ok,
    history_items,
    rows,
    say,
    turn_settled,
    wait_for,
    when_free,
)
from testkit.stack import Stack, running_stack
from testkit.support import create_database, drop_database

# A 2 s lease: a dead replica's turns are orphans 2 s later and the sweeper runs every 2 s.
# Takeovers off: these tests drive what a person does when a run is not taken over (Retry,
# a new message); tests/system/test_takeover.py drives the takeover. With takeovers on, the
# survivor may take the run over before its turn is swept (a refused submit of the waiting
# client takes the expired lease again), and Retry then re-runs a finished turn.
ENV = {"AGENTCHAT_AGENT_TUNING__LEASE_S": "2", "AGENTCHAT_AGENT_TUNING__RUN_TAKEOVER": "false"}
BOUND_S = 45.0  # a liveness bound for the client's view, generous for a loaded 2-core box


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    url = create_database(pg_server, template=migrated_template)
    try:
        with running_stack(tmp_path_factory.mktemp("faults"), url, **ENV) as s:
            yield s
    finally:
        drop_database(pg_server, url)


def submit_and_kill(stack: Stack, kind: str, *args: object, **victim_env: str) -> Outcome:
    victim = stack.start_agent(**ENV, **victim_env)

    on_event, _ = at_first(kind, victim.kill)

    started = time.monotonic()
    out = say(victim, stack.token("alice"), *args, on_event=on_event, timeout=BOUND_S)
    assert time.monotonic() - started < BOUND_S, "the client saw the end: no hang"
    assert victim.proc is not None and victim.proc.poll() is not None, "the agent was killed"
    assert out.kind == "dropped", ("a killed agent is a reset connection", out.types())
    return out


def test_kill_9_mid_stream(stack: Stack) -> None:
    out = submit_and_kill(stack, "stream_token", "привет and echo 400 words",
                          AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S="0.02")
    cid = out.conversation_id
    assert cid
    turns = wait_for(lambda: turn_settled(stack.database_url, cid), "the sweeper", BOUND_S)
    assert [(t["status"], t["error_code"]) for t in turns] == [("failed", "INTERNAL")]
    assert_consistent(stack.database_url, cid)
    # The next turn works on the surviving replica (once the dead tab's lease lapsed).
    alice = stack.token("alice")
    nxt = when_free(lambda: say(stack.agent, alice, "привет", None, cid))
    assert nxt.kind == "final", nxt.types()
    assert nxt.last["message_id"]
    assert [m["role"] for m in history_items(stack.agent, alice, cid)] == [
        "user", "user", "assistant"]
    assert_consistent(stack.database_url, cid)


def test_kill_9_mid_tool_call_then_a_new_message(stack: Stack) -> None:
    stack.fault(operation="search_dashboards", delay_s=3)
    out = submit_and_kill(stack, "tool_start", "найди дашборды про энергопотребление")
    cid = out.conversation_id
    assert cid
    wait_for(lambda: turn_settled(stack.database_url, cid), "the sweeper", BOUND_S)
    calls = rows(stack.database_url, "SELECT tool, outcome, error FROM tool_calls"
                 " WHERE conversation_id=%s", cid)
    assert [(c["tool"], c["outcome"]) for c in calls] == [("search_dashboards", "error")]
    assert "interrupted" in calls[0]["error"]
    alice = stack.token("alice")
    nxt = when_free(lambda: say(stack.agent, alice, "найди дашборды про энергопотребление",
                                None, cid))
    assert nxt.kind == "final", nxt.types()
    assert "энергопотреблению" in nxt.events[-1]["content"]
    assert_consistent(stack.database_url, cid)


def test_kill_9_mid_confirmed_call_then_retry_runs_it_exactly_once(stack: Stack) -> None:
    stack.reset_sandbox()
    alice = stack.token("alice")
    victim = stack.start_agent(**ENV)
    tab = RawChat(victim.url, alice, None)  # type: ignore[arg-type]
    first = say(victim, alice, "задеплой дашборд 44 в ss-stage", tab=tab)
    assert first.kind == "confirm_required", first.types()
    cid, key = first.conversation_id, first.last["confirm_id"]
    stack.fault(operation="deploy_dashboard", delay_s=3)

    on_event, _ = at_first("tool_start", victim.kill)

    started = time.monotonic()
    answer = say(victim, alice, "__resume__", "confirm", cid, tab=tab, on_event=on_event,
                 timeout=BOUND_S)
    assert time.monotonic() - started < BOUND_S
    assert answer.of("confirm_resolved")[0]["result"] == "confirmed"
    assert answer.kind == "dropped", answer.types()
    # The frontend reconnects (to the other replica) and presses Retry: the run goes on
    # from its checkpoint with the card's idempotency key.
    again = when_free(lambda: say(stack.agent, alice, "__resume__", "retry", cid))
    assert again.kind == "final", again.types()
    assert [e["tool"] for e in again.of("tool_end")] == ["deploy_dashboard"]
    runs = wait_for(lambda: audit_ok(stack, operation="deploy_dashboard",
                                     idempotency_key=key), "the deploy", BOUND_S)
    time.sleep(4)  # the killed agent's call, if it reached the sandbox, has landed by now
    runs = audit_ok(stack, operation="deploy_dashboard", idempotency_key=key)
    assert len(runs) == 1, runs
    calls = rows(stack.database_url, "SELECT tool, outcome FROM tool_calls"
                 " WHERE conversation_id=%s", cid)
    assert {c["tool"] for c in calls} >= {"deploy_dashboard"}
    assert all(c["outcome"] == "ok" for c in calls), calls
    turns = rows(stack.database_url, "SELECT status FROM turns WHERE conversation_id=%s", cid)
    assert [t["status"] for t in turns] == ["completed"]
    assert_consistent(stack.database_url, cid)


def test_sidecar_killed_mid_conversation_then_restarted(stack: Stack) -> None:
    """Issue 5: POLICY_UNAVAILABLE, no call ran, then recovery once it is back."""
    stack.reset_sandbox()
    alice = stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    first = say(stack.agent, alice, "найди дашборды про энергопотребление", tab=tab)
    assert first.kind == "final"
    cid = first.conversation_id
    before = len(stack.audit())
    policy = stack.policy
    assert policy is not None
    policy.kill()
    try:
        for text in ("задеплой дашборд 42 в ss-dev", "найди дашборды про продажи"):
            started = time.monotonic()
            out = say(stack.agent, alice, text, None, cid, tab=tab)
            assert time.monotonic() - started < BOUND_S
            assert out.kind == "error", out.types()
            assert out.last["code"] == "POLICY_UNAVAILABLE" and out.last["retryable"] is True
            assert "tool_start" not in out.types()
        assert len(stack.audit()) == before, "no call ran while the sidecar was down"
    finally:
        stack.start_policy(port=policy.port)
    turns = rows(stack.database_url, "SELECT status, error_code FROM turns"
                 " WHERE conversation_id=%s ORDER BY started_at", cid)
    assert [(t["status"], t["error_code"]) for t in turns] == [
        ("completed", None), ("failed", "POLICY_UNAVAILABLE"), ("failed", "POLICY_UNAVAILABLE")]
    again = say(stack.agent, alice, "__resume__", "retry", cid, tab=tab)
    assert again.kind == "final", again.types()
    assert [e["tool"] for e in again.of("tool_end")] == ["search_dashboards"]
    assert_consistent(stack.database_url, cid)


def test_dropped_connection_after_confirm_the_call_runs_once_and_is_in_history(
        stack: Stack) -> None:
    stack.reset_sandbox()
    alice = stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    first = say(stack.agent, alice, "задеплой дашборд 46 в ss-stage", tab=tab)
    cid, key = first.conversation_id, first.last["confirm_id"]
    dropped = say(stack.agent, alice, "__resume__", "confirm", cid, tab=tab, drop_after=1)
    assert dropped.types() == ["confirm_resolved"]
    turns = wait_for(lambda: turn_settled(stack.database_url, cid), "the turn", BOUND_S)
    assert [t["status"] for t in turns] == ["completed"]
    assert len(audit_ok(stack, operation="deploy_dashboard", idempotency_key=key)) == 1
    items = history_items(stack.agent, alice, cid)
    assert items[-1]["role"] == "assistant" and not items[-1]["partial"]
    assert_consistent(stack.database_url, cid)
