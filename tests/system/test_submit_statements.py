"""One submit, one transaction (issue 32): what a submit asks PostgreSQL before its turn runs,
counted on the wire (testkit/pg_wire.py, a proxy in front of the server). A round trip is a
Sync or a simple query: a point where the agent waits for the server.

The window runs from the submit to the turn's first tool call (`INSERT INTO tool_calls`).
Left out: the graph's own statements (LangGraph's checkpoints, which a card's re-check reads
too) and the run writer's (`runs`, `run_events`: one task per replica stores every run's
events in batches, beside the turn, never on its path), the approvals' notifier's (the
outbox it polls), the takeover poller's and the sweeper's, each as the whole transaction it is
in; and the pool's check of a connection idle for 100 ms or more (an empty query, skipped
under load: agentchat/db.py), counted apart. The run's epoch read right before a tool call's
request (agent/storage/fencing.py) is the call's, not the submit's: it races the tool call's
row into the window, and is left out too.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from testkit.pg_wire import Message, PgWire
from testkit.raw_chat import RawChat
from testkit.reliability import say
from testkit.stack import Stack

# LangGraph's tables; the run writer's inserts and updates (a submit only reads `runs`); the
# approvals' notifier (its own task, polling the outbox: agent/chat/notify.py); the takeover
# poller (its own task, looking for dead replicas' runs: agent/storage/takeovers.py); the
# sweeper's first pass, which a fast start can bring into the first window (its orphans, the
# audit's retention cut and the stored MCP calls' prune: agent/chat/sweeper.py).
NOT_THE_SUBMITS = re.compile(r"\bcheckpoint\w*|\brun_events\b|\b(INSERT INTO|UPDATE) runs\b"
                             r"|\bSELECT epoch FROM runs WHERE id\b"
                             r"|\bapproval_outbox\b|'attempts_used_up'|\bWITH orphans AS\b"
                             r"|\bmin\(seq\) - 1 FROM audit_rows\b|\bDELETE FROM gated_calls\b",
                             re.I)
TOOL_STARTS = re.compile(r"INSERT INTO tool_calls\b", re.I)
GRAPH = re.compile(r"\bcheckpoint", re.I)


@pytest.fixture(scope="module")
def wired(stack: Stack) -> Iterator[tuple[Any, PgWire]]:
    info = psycopg.conninfo.conninfo_to_dict(stack.database_url)
    proxy = PgWire(int(info.get("port") or 5432), str(info.get("host") or "127.0.0.1")).start()
    # A long lease: its heartbeat (every lease_s / 3) and the sweeper's later passes stay out
    # of the windows (its first, at start, is left out by NOT_THE_SUBMITS).
    agent = stack.start_agent(DATABASE_URL=proxy.url(stack.database_url),
                              AGENTCHAT_AGENT_TUNING__LEASE_S="120")
    yield agent, proxy
    agent.stop()


def units(log: list[Message]) -> list[list[Message]]:
    """Each connection's messages cut into what the agent sent together: a transaction
    (BEGIN … COMMIT) whole, else up to each round trip; in the order they ended. The tail of
    a transaction that began before the window (its COMMIT comes before any BEGIN on its
    connection) is left out: what the window's submit sends begins in it."""
    begun_before = _begun_before(log)
    open_: dict[int, list[Message]] = {}
    in_tx: dict[int, bool] = {}
    done: list[list[Message]] = []
    for i, m in enumerate(log):
        if i <= begun_before.get(m.conn, -1):
            continue
        unit = open_.setdefault(m.conn, [])
        unit.append(m)
        word = m.sql.strip().upper()
        if word.startswith("BEGIN"):
            in_tx[m.conn] = True
        elif word.startswith(("COMMIT", "ROLLBACK")):
            in_tx[m.conn] = False
        if m.kind in ("sync", "query") and not in_tx.get(m.conn):
            done.append(open_.pop(m.conn))
    return done


def _begun_before(log: list[Message]) -> dict[int, int]:
    """Per connection, the index of the COMMIT or ROLLBACK ending a transaction that was
    already open when the log began (a background pass the window cut into)."""
    seen: set[int] = set()
    ends: dict[int, int] = {}
    for i, m in enumerate(log):
        if m.conn in seen:
            continue
        word = m.sql.strip().upper()
        if word.startswith("BEGIN"):
            seen.add(m.conn)
        elif word.startswith(("COMMIT", "ROLLBACK")):
            ends[m.conn] = i
            seen.add(m.conn)
    return ends


def window(log: list[Message], end: re.Pattern[str] = TOOL_STARTS
           ) -> tuple[list[list[Message]], int]:
    """The submit's own units before the first that matches `end` (the first tool call, or
    for a turn with none the graph's first read), and the pool's checks among them."""
    out, checks = [], 0
    for unit in units(log):
        if any(end.search(m.sql) for m in unit):
            break
        if any(NOT_THE_SUBMITS.search(m.sql) for m in unit):
            continue
        if [m.kind for m in unit] == ["query"] and not unit[0].sql.strip():
            checks += 1
            continue
        out.append(unit)
    return out, checks


def round_trips(found: list[list[Message]]) -> int:
    return sum(1 for unit in found for m in unit if m.kind in ("sync", "query"))


def statements(found: list[list[Message]]) -> list[str]:
    return [" ".join(m.sql.split())[:60] for unit in found for m in unit if m.sql.strip()]


def measured(proxy: PgWire, action: Any,
             end: re.Pattern[str] = TOOL_STARTS) -> tuple[int, list[str], int]:
    proxy.clear()
    action()
    found, checks = window(proxy.messages(), end)
    return round_trips(found), statements(found), checks


def test_each_kind_of_submit_costs_at_most_three_round_trips(
        stack: Stack, wired: tuple[Any, PgWire]) -> None:
    agent, proxy = wired
    token = stack.token("alice")
    tab = RawChat(agent.url, token, None)  # type: ignore[arg-type]
    out: dict[str, Any] = {}

    def send(name: str, *args: Any) -> None:
        out[name] = say(agent, token, *args, tab=tab)

    new = measured(proxy, lambda: send("new", "покажи дашборды в ss-dev"))
    assert out["new"].kind == "final", out["new"].types()
    cid = out["new"].conversation_id
    time.sleep(0.5)  # the run writer's last batch
    follow = measured(proxy, lambda: send("follow", "найди дашборды про продажи в ss-dev",
                                          None, cid))
    assert out["follow"].kind == "final", out["follow"].types()
    time.sleep(0.5)
    retry = measured(proxy, lambda: send("retry", "__resume__", "retry", cid))
    assert out["retry"].kind == "final", out["retry"].types()
    send("card", "задеплой дашборд 42 в prod", None, cid)
    assert out["card"].kind == "confirm_required", out["card"].types()
    time.sleep(0.5)
    confirm = measured(proxy, lambda: send("confirm", "__resume__", "confirm", cid))
    assert out["confirm"].kind == "final", out["confirm"].types()
    assert any(e["metadata"].get("type") == "tool_start" for e in out["confirm"].events)
    send("card2", "задеплой дашборд 7 в prod", None, cid)
    assert out["card2"].kind == "confirm_required", out["card2"].types()
    time.sleep(0.5)
    # A deny resumes the graph with no tool call: its window ends at the graph's first read.
    deny = measured(proxy, lambda: send("deny", "__resume__", "deny", cid), GRAPH)
    assert out["deny"].kind == "final", out["deny"].types()

    report = {"new": new, "follow-up": follow, "confirm": confirm, "deny": deny,
              "retry": retry}
    print({k: (v[0], v[2]) for k, v in report.items()})
    for name, (trips, sent, _) in report.items():
        assert 1 <= trips <= 3, (name, trips, sent)
    # A follow-up is one transaction in one round trip: the lock, the statement that checks,
    # takes the lease and stores the turn and its message, and the commit.
    assert follow[1] == ["BEGIN", "SELECT pg_advisory_xact_lock($1, $2)",
                         follow[1][2], "COMMIT"], follow[1]
    assert follow[1][2].startswith("WITH conv AS ( SELECT id, is_archived FROM conversa")
    assert follow[0] == 1


def test_a_background_transaction_cut_by_the_window_is_not_the_submits() -> None:
    """A pass that began before the window (its BEGIN cleared with the log) ends inside it:
    its tail is left out, while the submit's own transaction is counted whole."""
    def msg(conn: int, kind: str, sql: str = "") -> Message:
        return Message(conn, kind, sql, 0.0)

    log = [msg(1, "parse", "SELECT pg_advisory_xact_lock($1)"), msg(1, "sync"),
           msg(2, "query", "BEGIN"),
           msg(1, "parse", "SELECT seq, hash FROM audit_head"), msg(1, "sync"),
           msg(2, "parse", "INSERT INTO conversations"), msg(2, "sync"),
           msg(1, "query", "COMMIT"),
           msg(2, "query", "COMMIT"),
           msg(1, "parse", "SELECT 1"), msg(1, "sync")]
    found, checks = window(log)
    assert [[m.sql for m in unit if m.sql] for unit in found] == [
        ["BEGIN", "INSERT INTO conversations", "COMMIT"], ["SELECT 1"]]
    assert round_trips(found) == 4 and checks == 0
