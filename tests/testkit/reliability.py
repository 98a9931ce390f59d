"""Shared by the reliability, fault and hostile-input tests: replicas with a sidecar each,
reading our tables, waiting with a bound, and the checks every fault test ends with."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import httpx
import psycopg
from psycopg.rows import dict_row

from testkit.raw_chat import Outcome, RawChat
from testkit.stack import Stack
from testkit.support import Service, free_port

T = TypeVar("T")


def rows(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row, connect_timeout=5) as conn:
        return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]


def wait_for(check: Callable[[], T], what: str, timeout: float = 60.0,
             pause: float = 0.25) -> T:
    """Poll `check` until it returns something truthy; a generous liveness bound."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except Exception as e:  # e.g. the database is still coming back
            last_error = e
        time.sleep(pause)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} ({last_error})")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def start_replica(stack: Stack, **env: str) -> tuple[Service, Service]:
    """One more agent with a sidecar of its own (as in a pod), on the stack's database; the
    two start side by side (the agent needs its sidecar only per request)."""
    port = free_port()
    policy = Service(["policy", "serve", "--port", str(port)],
                     env={**stack.base_env(), "AGENTCHAT_POLICY_DECISION_LOG_STDOUT": "false",
                          "AGENTCHAT_POLICY_DIR": str(stack.self_approved_policy()),
                          **stack.policy_env},
                     port=port, ready_path="/readyz",
                     log=stack.data_dir / f"policy-{port}.log").spawn()
    try:
        agent = stack.start_agent(AGENTCHAT_AGENT_POLICY_URL=policy.url, **env)
        policy.wait_ready()
    except BaseException:
        policy.stop()
        raise
    return agent, policy


async def submit(agent_url: str, token: str, *args: Any, tab: RawChat | None = None,
                 **kw: Any) -> Outcome:
    async with httpx.AsyncClient() as http:
        chat = tab or RawChat(agent_url, token, http)
        chat.http = http
        return await chat.submit(*args, **kw)


def say(agent: Service, token: str, *args: Any, **kw: Any) -> Outcome:
    return run(submit(agent.url, token, *args, **kw))


def at_first(kind: str, action: Callable[[], object], *, background: bool = False
             ) -> tuple[Callable[[Outcome], None], threading.Event]:
    """An `on_event` for `say` that runs `action` once, at the first event of this type (in a
    thread when it blocks, like restarting PostgreSQL); the Event tells that it ran."""
    done = threading.Event()

    def on_event(out: Outcome) -> None:
        if out.events[-1]["metadata"].get("type") == kind and not done.is_set():
            done.set()
            if background:
                threading.Thread(target=action).start()
            else:
                action()

    return on_event, done


def audit_ok(stack: Stack, **filters: str) -> list[dict[str, Any]]:
    return [a for a in stack.audit(**filters) if a["outcome"] == "ok"]


def turn_settled(url: str, cid: str) -> list[dict[str, Any]] | None:
    got = rows(url, "SELECT id, status, error_code FROM turns WHERE conversation_id=%s"
               " ORDER BY started_at", cid)
    return got if got and all(t["status"] != "running" for t in got) else None


def assert_consistent(url: str, cid: str) -> None:
    """What every fault test checks afterwards: no turn left running, no tool call without its
    result, no duplicate rows, one user message per turn, one final answer per completed turn,
    at most one pending card."""
    turns = rows(url, "SELECT id, status FROM turns WHERE conversation_id=%s", cid)
    assert turns, "the turn was recorded"
    assert all(t["status"] != "running" for t in turns), turns
    calls = rows(url, "SELECT call_id, tool, outcome FROM tool_calls WHERE conversation_id=%s",
                 cid)
    assert all(c["outcome"] != "running" for c in calls), calls
    per_turn = rows(url, """
        SELECT t.id, t.status,
               count(*) FILTER (WHERE m.role = 'user') AS users,
               count(*) FILTER (WHERE m.role = 'assistant' AND NOT m.partial) AS finals,
               count(m.id) - count(DISTINCT m.content || m.role || m.partial::text) AS dupes
          FROM turns t LEFT JOIN messages m ON m.turn_id = t.id
         WHERE t.conversation_id = %s GROUP BY t.id, t.status""", cid)
    for t in per_turn:
        assert t["users"] <= 1, t
        assert t["dupes"] == 0, t
        if t["status"] == "completed":
            assert t["finals"] >= 1, t
    pending = rows(url, "SELECT count(*) AS n FROM confirmations WHERE conversation_id=%s"
                   " AND status='pending'", cid)
    assert pending[0]["n"] <= 1


def history_items(agent: Service, token: str, cid: str) -> list[dict[str, Any]]:
    """The conversation as the frontend reloads it (REST history, oldest first)."""
    resp = httpx.get(agent.url + "/api/assistant/history", timeout=30,
                     params={"conversation_id": cid, "limit": 100},
                     headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["items"])


def when_free(call: Callable[[], Outcome], timeout: float = 60.0,
              tolerate: tuple[str, ...] = ("CONVERSATION_BUSY",)) -> Outcome:
    """Repeat a submit while it is refused with a retryable code the situation explains (the
    other tab's lease still running out); anything else is returned at once to be asserted."""
    deadline = time.monotonic() + timeout
    while True:
        out = call()
        busy = out.kind == "error" and out.last.get("code") in tolerate
        if not busy or time.monotonic() > deadline:
            return out
        time.sleep(0.5)
