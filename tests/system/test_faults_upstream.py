"""The agent's upstreams failing: the LLM endpoint refusing, hanging or cutting its stream
halfway; the ss-tools API slow, failing or returning garbage, including under a confirmed
write. The client gets a named error or a completed turn within a bound; the records and the
sandbox audit agree with what it was told."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from testkit.reliability import (
    assert_consistent,
    audit_ok,
    rows,
    say,
    turn_settled,
    wait_for,
    when_free,
)
from testkit.stack import Stack, catalog_with_timeouts, stack_on_own_database
from testkit.support import Service, start_openai_stub

BOUND_S = 45.0
TOOL_TIMEOUT_S = 2


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("upstream")
    # search_dashboards times out after 2 s here (the slow-API case).
    catalog = catalog_with_timeouts(tmp, {"search_dashboards": TOOL_TIMEOUT_S})
    with stack_on_own_database(pg_server, migrated_template, tmp, catalog_path=catalog,
                               AGENTCHAT_AGENT_TUNING__LEASE_S="1") as s:
        yield s


@pytest.fixture(scope="module")
def llm(stack: Stack) -> Iterator[tuple[Service, Service]]:
    """An OpenAI-compatible endpoint (tests/testkit/openai_stub.py) and an agent using it."""
    stub = start_openai_stub()
    agent = stack.start_agent(AGENTCHAT_AGENT_LLM="openai:stub-model",
                              AGENTCHAT_AGENT_LLM_BASE_URL=stub.url + "/v1",
                              AGENTCHAT_AGENT_LLM_API_KEY="sk-local",
                              AGENTCHAT_AGENT_LLM_TIMEOUT_S="4")
    yield stub, agent
    agent.stop()
    stub.stop()


@pytest.mark.parametrize("mode", ["refuse", "hang", "cut"])
def test_llm_endpoint_failing(stack: Stack, llm: tuple[Service, Service], mode: str) -> None:
    stub, agent = llm
    alice = stack.token("alice")
    httpx.post(stub.url + "/mode", json={"mode": mode}).raise_for_status()
    try:
        started = time.monotonic()
        out = say(agent, alice, "найди дашборды про энергопотребление", timeout=BOUND_S)
        assert time.monotonic() - started < BOUND_S, "bounded by the LLM timeout"
    finally:
        httpx.post(stub.url + "/mode", json={"mode": "ok"}).raise_for_status()
    assert out.kind == "error", out.types()
    assert out.last["code"] == "LLM_UNAVAILABLE" and out.last["retryable"] is True
    cid = out.conversation_id
    assert cid
    turns = wait_for(lambda: turn_settled(stack.database_url, cid), "the turn", BOUND_S)
    assert [(t["status"], t["error_code"]) for t in turns] == [("failed", "LLM_UNAVAILABLE")]
    msgs = rows(stack.database_url, "SELECT role, partial FROM messages"
                " WHERE conversation_id=%s ORDER BY pos", cid)
    assert msgs[0] == {"role": "user", "partial": False}, "the user's message is kept"
    # A stream cut halfway keeps the text that arrived, marked partial (002: "partial text
    # preserved"); nothing else is stored as an answer.
    assert all(m["partial"] for m in msgs[1:]), msgs
    assert len(msgs) == (2 if out.of("stream_token") else 1), (msgs, out.types())
    # The endpoint is back: the frontend's Retry completes the same turn.
    again = when_free(lambda: say(agent, alice, "__resume__", "retry", cid))
    assert again.kind == "final", again.types()
    assert "энергопотреблению" in again.events[-1]["content"]
    assert_consistent(stack.database_url, cid)


def search(stack: Stack) -> tuple[object, str]:
    out = say(stack.agent, stack.token("alice"), "найди дашборды про энергопотребление",
              timeout=BOUND_S)
    assert out.kind == "final", out.types()
    cid = out.conversation_id
    assert cid
    assert_consistent(stack.database_url, cid)
    return out, cid


def calls_of(stack: Stack, cid: str) -> list[dict[str, object]]:
    return rows(stack.database_url, "SELECT tool, outcome, attempts FROM tool_calls"
                " WHERE conversation_id=%s", cid)


def test_sstools_slow_within_and_past_the_tool_timeout(stack: Stack) -> None:
    stack.fault(operation="search_dashboards", delay_s=0.5)
    out, cid = search(stack)
    assert "tool_end" in out.types()  # type: ignore[attr-defined]
    stack.fault(operation="search_dashboards", delay_s=TOOL_TIMEOUT_S + 3)
    started = time.monotonic()
    out, cid = search(stack)
    assert time.monotonic() - started < TOOL_TIMEOUT_S + 20
    timeouts = out.of("tool_timeout")  # type: ignore[attr-defined]
    assert len(timeouts) == 1 and timeouts[0]["timeout_seconds"] == TOOL_TIMEOUT_S
    assert "tool_retry" not in out.types(), "a timed-out attempt is not retried"  # type: ignore[attr-defined]
    assert [c["outcome"] for c in calls_of(stack, cid)] == ["timeout"]


def test_sstools_failing_transient_and_not(stack: Stack) -> None:
    stack.fault(operation="search_dashboards", status=502, times=2)
    out, cid = search(stack)
    assert out.of("tool_retry")[0]["attempt"] == 1  # type: ignore[attr-defined]
    err = out.of("tool_error")[0]  # type: ignore[attr-defined]
    assert err["retry_exhausted"] is True and err["retry_count"] == 2
    assert calls_of(stack, cid) == [{"tool": "search_dashboards", "outcome": "error",
                                     "attempts": 2}]
    stack.fault(operation="search_dashboards", status=500)
    out, cid = search(stack)
    assert "tool_retry" not in out.types()  # type: ignore[attr-defined]
    assert out.of("tool_error")[0]["retryable"] is False  # type: ignore[attr-defined]


def test_sstools_returning_garbage(stack: Stack) -> None:
    stack.fault(operation="search_dashboards", garbage=True)
    out, cid = search(stack)
    err = out.of("tool_error")[0]  # type: ignore[attr-defined]
    assert "unreadable" in err["error"]
    assert [c["outcome"] for c in calls_of(stack, cid)] == ["error"]


def test_sstools_refusing_a_call_the_policy_allowed_ends_the_turn_forbidden(
        stack: Stack) -> None:
    """The sidecar allowed the call and ss-tools refused it (403: its own RBAC has the last
    word): the turn ends with a FORBIDDEN that is not retryable, the call is recorded as an
    error, and the conversation goes on. The refusal's halt belongs to its own run: the next
    turn, which calls no tool, answers (an earlier run's halt once failed it)."""
    alice = stack.token("alice")
    stack.fault(operation="search_dashboards", status=403)
    out = say(stack.agent, alice, "найди дашборды про энергопотребление", timeout=BOUND_S)
    assert out.kind == "error" and out.last["code"] == "FORBIDDEN", out.types()
    assert out.last["retryable"] is False
    assert "tool_error" in out.types()
    cid = out.conversation_id
    assert cid
    turns = wait_for(lambda: turn_settled(stack.database_url, cid), "the turn stored", BOUND_S)
    assert [(t["status"], t["error_code"]) for t in turns] == [("failed", "FORBIDDEN")]
    assert [c["outcome"] for c in calls_of(stack, cid)] == ["error"]
    nxt = when_free(lambda: say(stack.agent, alice, "привет", None, cid, timeout=BOUND_S))
    assert nxt.kind == "final", nxt.types()
    assert_consistent(stack.database_url, cid)


def test_confirmed_write_through_a_flapping_api_runs_exactly_once(stack: Stack) -> None:
    stack.reset_sandbox()
    alice = stack.token("alice")
    first = say(stack.agent, alice, "задеплой дашборд 42 в прод")
    assert first.kind == "confirm_required"
    cid, key = first.conversation_id, first.last["confirm_id"]
    stack.fault(operation="deploy_dashboard", status=503)
    answer = when_free(lambda: say(stack.agent, alice, "__resume__", "confirm", cid))
    assert answer.kind == "final", answer.types()
    assert answer.of("tool_retry")[0]["attempt"] == 1
    assert answer.of("tool_end")[0]["tool"] == "deploy_dashboard"
    audit = [a for a in stack.audit(operation="deploy_dashboard") if
             a["idempotency_key"] == key]
    assert [a["outcome"] for a in audit] == ["error", "ok"], "the 503, then one execution"
    assert len(audit_ok(stack, operation="deploy_dashboard", idempotency_key=key)) == 1
    assert_consistent(stack.database_url, cid)
