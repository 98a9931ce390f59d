"""PostgreSQL failing under the agent: restarted mid-turn (the pool recovers; the turn fails
with STORAGE_UNAVAILABLE or completes; the next turn works), down while a turn needs it, and
down when a card's confirm arrives (STORAGE_UNAVAILABLE, nothing runs, the card stays
pending and is answered once the database is back: exactly once).

The stack runs on a private server (tests/testkit/private_pg.py), never the shared one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from testkit.private_pg import PrivatePostgres
from testkit.raw_chat import RawChat
from testkit.reliability import (
    assert_consistent,
    at_first,
    audit_ok,
    rows,
    say,
    turn_settled,
    wait_for,
    when_free,
)
from testkit.stack import Stack, running_stack

ENV = {"AGENTCHAT_AGENT_TUNING__LEASE_S": "2",
       "AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": "0.02"}
BOUND_S = 60.0  # the pool waits up to 10 s for a connection; generous on 2 loaded cores


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> PrivatePostgres:
    return PrivatePostgres(tmp_path_factory.mktemp("private-pg"))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg: PrivatePostgres) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("storage"), pg.url, **ENV) as s:
        yield s


@pytest.fixture
def up(pg: PrivatePostgres) -> Iterator[PrivatePostgres]:
    """Whatever a test does, the server is running again after it."""
    yield pg
    if not pg.server.get_postmaster_info().is_running():
        pg.start()


def test_restart_mid_stream_the_turn_completes_or_fails_named(stack: Stack,
                                                             up: PrivatePostgres) -> None:
    alice = stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    on_event, restarted = at_first("stream_token", up.restart, background=True)

    started = time.monotonic()
    out = say(stack.agent, alice, "привет and echo 300 words", tab=tab, on_event=on_event,
              timeout=BOUND_S)
    assert time.monotonic() - started < BOUND_S
    assert restarted.is_set()
    assert out.kind in ("final", "error"), out.types()
    if out.kind == "error":
        assert out.last["code"] == "STORAGE_UNAVAILABLE" and out.last["retryable"] is True
    cid = out.conversation_id
    assert cid
    wait_for(lambda: up.server.get_postmaster_info().is_running(), "the server back")
    turns = wait_for(lambda: turn_settled(stack.database_url, cid), "the turn recorded",
                     BOUND_S)
    assert turns[0]["status"] == ("completed" if out.kind == "final" else "failed")
    # The pool recovered: the next turn works.
    nxt = when_free(lambda: say(stack.agent, alice, "привет", None, cid, tab=tab))
    assert nxt.kind == "final", nxt.types()
    assert nxt.last["message_id"]
    assert_consistent(stack.database_url, cid)


def test_down_mid_tool_call_storage_unavailable_then_recorded(stack: Stack,
                                                             up: PrivatePostgres) -> None:
    alice = stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    stack.fault(operation="search_dashboards", delay_s=2)
    on_event, _ = at_first("tool_start", up.stop, background=True)

    started = time.monotonic()
    out = say(stack.agent, alice, "найди дашборды про энергопотребление", tab=tab,
              on_event=on_event, timeout=BOUND_S)
    assert time.monotonic() - started < BOUND_S, "a named error, not a hang"
    assert out.kind == "error", out.types()
    assert out.last["code"] == "STORAGE_UNAVAILABLE" and out.last["retryable"] is True
    cid = out.conversation_id
    assert cid
    up.start()
    # The failed turn is recorded once the database is back (the agent retries the record).
    turns = wait_for(lambda: turn_settled(stack.database_url, cid), "the failure recorded",
                     BOUND_S)
    assert [(t["status"], t["error_code"]) for t in turns] == [
        ("failed", "STORAGE_UNAVAILABLE")]
    again = when_free(lambda: say(stack.agent, alice, "__resume__", "retry", cid, tab=tab))
    assert again.kind == "final", again.types()
    assert "энергопотреблению" in again.events[-1]["content"]
    assert_consistent(stack.database_url, cid)


def test_confirm_during_a_database_outage(stack: Stack, up: PrivatePostgres) -> None:
    stack.reset_sandbox()
    alice = stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    first = say(stack.agent, alice, "задеплой дашборд 42 в прод", tab=tab)
    assert first.kind == "confirm_required", first.types()
    cid, key = first.conversation_id, first.last["confirm_id"]
    up.stop()
    try:
        started = time.monotonic()
        out = say(stack.agent, alice, "__resume__", "confirm", cid, tab=tab, timeout=BOUND_S)
        assert time.monotonic() - started < BOUND_S
        assert out.kind == "error" and out.last["code"] == "STORAGE_UNAVAILABLE", out.types()
        assert out.last["retryable"] is True
        assert not audit_ok(stack, operation="deploy_dashboard"), "nothing ran"
    finally:
        up.start()
    pending = rows(stack.database_url, "SELECT status FROM confirmations"
                   " WHERE confirm_id=%s", key)
    assert pending == [{"status": "pending"}], "the card survived the outage"
    answer = when_free(lambda: say(stack.agent, alice, "__resume__", "confirm", cid, tab=tab))
    assert answer.kind == "final", answer.events[-1]
    assert answer.of("confirm_resolved")[0]["result"] == "confirmed"
    assert len(audit_ok(stack, operation="deploy_dashboard", idempotency_key=key)) == 1
    assert_consistent(stack.database_url, cid)
