"""Runs you can rejoin (docs/protocol.md §4, "Runs"), from outside over Gradio's HTTP queue:
a dropped stream is rejoined by `run_id` and `seq` on the same and on another replica with
nothing lost or repeated; a finished run replays its tail; a pending card and a confirm's
resumed run can be joined; the join's errors; Stop then send in one tab is never BUSY; a
tab keeps its lease across reconnects by `tab_id`; a SIGTERM'd replica finishes its run and
takes no new one, and one with takeovers off marks a run outliving its drain RUN_LOST, which
`retry` completes. A killed replica's run is taken over: tests/system/test_takeover.py.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import (
    audit_ok,
    history_items,
    rows,
    say,
    start_replica,
    wait_for,
    when_free,
)
from testkit.stack import Stack, running_stack
from testkit.support import Service, create_database, drop_database

# Paced like a slow model, so a run is still streaming when a client comes back; a short
# heartbeat so a dead replica's run is declared lost within seconds.
ENV = {"AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": "0.02",
       "AGENTCHAT_AGENT_TUNING__LEASE_S": "3", "AGENTCHAT_AGENT_TUNING__RUN_HEARTBEAT_S": "0.5",
       "AGENTCHAT_AGENT_TUNING__RUN_LOST_S": "3"}
LONG = "привет and echo 120 words"
BOUND_S = 60.0


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
             migrated_template: str) -> Iterator[tuple[Stack, Service, Service]]:
    url = create_database(pg_server, template=migrated_template)
    try:
        with running_stack(tmp_path_factory.mktemp("runs"), url, **ENV) as s:
            b, _ = start_replica(s, **ENV)
            yield s, s.agent, b
    finally:
        drop_database(pg_server, url)


def join_message(cid: str | None = None, run_id: str | None = None, last_seq: Any = None,
                 **extra: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"text": "", "files": [], "action": "join", "conversation_id": cid,
                           "run_id": run_id, **extra}
    if last_seq is not None:
        msg["last_seq"] = last_seq
    return msg


def join(agent: Service, token: str, cid: str | None, run_id: str | None = None,
         last_seq: Any = None, **kw: Any) -> Outcome:
    return say(agent, token, join_message(cid, run_id, last_seq), **kw)


def seqs(out: Outcome) -> list[int]:
    return [int(e["metadata"]["seq"]) for e in out.events]


def final_in_history(agent: Service, token: str, cid: str) -> str:
    items = history_items(agent, token, cid)
    return str([m for m in items if m["role"] == "assistant"][-1]["content"])


def assert_completes(first: Outcome, joined: Outcome) -> None:
    """The joined stream goes on exactly where the dropped one stopped."""
    last = first.events[-1]["metadata"]
    assert joined.kind == "final", joined.types()
    assert seqs(joined) == list(range(last["seq"] + 1, last["seq"] + 1 + len(joined.events)))
    assert {e["metadata"]["run_id"] for e in joined.events} == {last["run_id"]}
    tokens = [e for e in joined.events if e["metadata"].get("type") == "stream_token"]
    seen = first.events[-1]["content"] if last.get("type") == "stream_token" else ""
    if tokens:  # the whole answer so far: it extends what the dropped stream showed
        assert tokens[0]["content"].startswith(seen)
    assert joined.events[-1]["content"].startswith(seen)


@pytest.mark.parametrize("where", ["same", "other"])
def test_a_dropped_stream_is_rejoined_without_gap_or_repeat(
        replicas: tuple[Stack, Service, Service], where: str) -> None:
    stack, a, b = replicas
    alice = stack.token("alice")
    first = say(a, alice, LONG, drop_after=4)
    assert len(first.events) == 4 and first.kind != "final", first.types()
    assert seqs(first) == [1, 2, 3, 4]
    meta = first.events[-1]["metadata"]
    cid, run_id = meta["conversation_id"], meta["run_id"]
    assert run_id and all(e["metadata"]["run_id"] == run_id for e in first.events)
    joined = join(a if where == "same" else b, alice, cid, run_id, meta["seq"],
                  timeout=BOUND_S)
    assert_completes(first, joined)
    assert joined.events[-1]["content"] == final_in_history(a, alice, cid)


def test_a_finished_run_replays_its_tail_and_ends(
        replicas: tuple[Stack, Service, Service]) -> None:
    stack, a, b = replicas
    alice = stack.token("alice")
    done = say(a, alice, "привет")
    assert done.kind == "final", done.types()
    cid = done.conversation_id
    wait_for(lambda: rows(stack.database_url, "SELECT 1 FROM runs WHERE conversation_id=%s"
                          " AND status='completed'", cid), "the run stored")
    for agent in (a, b):
        whole = join(agent, alice, cid)  # the latest run, from the start
        assert [e["metadata"] for e in whole.events] == [e["metadata"] for e in done.events]
        assert [e["content"] for e in whole.events] == [e["content"] for e in done.events]
        tail = join(agent, alice, cid, last_seq=len(done.events) - 1)
        assert seqs(tail) == [len(done.events)] and tail.kind == "final"
    # Everything already seen: nothing more, and the stream ends.
    assert join(b, alice, cid, last_seq=len(done.events)).events == []


def test_a_pending_card_and_the_confirmed_run_can_be_joined(
        replicas: tuple[Stack, Service, Service]) -> None:
    stack, a, b = replicas
    stack.reset_sandbox()
    alice = stack.token("alice")
    tab = RawChat(a.url, alice, None)  # type: ignore[arg-type]
    card = say(a, alice, "задеплой дашборд 42 в прод", tab=tab)
    assert card.kind == "confirm_required", card.types()
    cid, confirm_id = card.conversation_id, card.last["confirm_id"]
    joined = join(b, alice, cid)
    assert joined.kind == "confirm_required" and joined.last["confirm_id"] == confirm_id
    assert joined.events[-1]["content"] == card.events[-1]["content"]
    # The confirm's own run: dropped after its first event, joined on the other replica.
    stack.fault(operation="deploy_dashboard", delay_s=1)
    resumed = say(a, alice, "__resume__", "confirm", cid, tab=tab, drop_after=1)
    assert resumed.events[0]["metadata"]["type"] == "confirm_resolved", resumed.types()
    run_id = resumed.last["run_id"]
    assert run_id != card.last["run_id"], "a confirm is a run of its own"
    rest = join(b, alice, cid, run_id, 1, timeout=BOUND_S)
    assert rest.kind == "final", rest.types()
    assert seqs(rest)[0] == 2
    assert len(audit_ok(stack, operation="deploy_dashboard", idempotency_key=confirm_id)) == 1


def test_join_errors(replicas: tuple[Stack, Service, Service]) -> None:
    stack, a, b = replicas
    alice, bob = stack.token("alice"), stack.token("bob")
    done = say(a, alice, "привет")
    cid, run_id = done.conversation_id, done.last["run_id"]
    wait_for(lambda: rows(stack.database_url, "SELECT 1 FROM runs WHERE id=%s"
                          " AND status='completed'", run_id), "the run stored")

    def code(out: Outcome) -> tuple[str, Any]:
        assert out.kind == "error", out.types()
        return out.last["code"], out.last["run_id"]

    assert code(join(b, bob, cid, run_id)) == ("NOT_FOUND", None)
    assert code(join(b, bob, cid)) == ("NOT_FOUND", None)
    forged = alice[:-4] + ("AAAA" if not alice.endswith("AAAA") else "BBBB")
    assert code(join(b, forged, cid, run_id))[0] == "UNAUTHORIZED"
    assert code(join(b, alice, cid, str(uuid.uuid4())))[0] == "NO_RUN"
    empty = httpx.post(a.url + "/api/assistant/conversations", json={"title": "пусто"},
                       headers={"Authorization": f"Bearer {alice}"}, timeout=10).json()["id"]
    assert code(join(b, alice, empty))[0] == "NO_RUN"
    assert code(join(b, alice, cid, run_id, len(done.events) + 1))[0] == "INVALID_REQUEST"
    assert code(join(b, alice, cid, run_id, -1))[0] == "INVALID_REQUEST"
    assert code(join(b, alice, cid, run_id, "7"))[0] == "INVALID_REQUEST"
    assert code(join(b, alice, None, run_id))[0] == "INVALID_REQUEST"
    assert code(join(b, alice, cid, "../../etc"))[0] == "INVALID_REQUEST"
    # An archived conversation can still be joined; the join changed nothing.
    httpx.delete(a.url + f"/api/assistant/conversations/{cid}",
                 headers={"Authorization": f"Bearer {alice}"}, timeout=10).raise_for_status()
    assert join(b, alice, cid).kind == "final"
    assert rows(stack.database_url, "SELECT count(*) AS n FROM runs WHERE conversation_id=%s",
                cid) == [{"n": 1}]


def test_join_expired_when_the_events_are_no_longer_kept(
        replicas: tuple[Stack, Service, Service]) -> None:
    stack, a, _ = replicas
    small = stack.start_agent(**ENV, AGENTCHAT_AGENT_TUNING__RUN_EVENTS_MAX="10",
                              AGENTCHAT_AGENT_TUNING__FLUSH_INTERVAL_S="0.01")
    alice = stack.token("alice")
    done = say(small, alice, "привет and echo 60 words")
    assert done.kind == "final" and len(done.events) > 12, done.types()
    cid, run_id, last = done.conversation_id, done.last["run_id"], len(done.events)
    wait_for(lambda: rows(stack.database_url, "SELECT 1 FROM runs WHERE id=%s"
                          " AND status='completed'", run_id), "the run stored")
    out = join(a, alice, cid, run_id, 1)
    assert out.kind == "error" and out.last["code"] == "JOIN_EXPIRED", out.types()
    kept = join(a, alice, cid, run_id, last - 10)
    assert seqs(kept) == list(range(last - 9, last + 1)) and kept.kind == "final"


async def _stop_then_send(agent: Service, token: str, rounds: int) -> list[str]:
    """`rounds` times: a message, Stop at its first event, another message at once."""
    seen: list[str] = []
    async with httpx.AsyncClient() as http:
        tab = RawChat(agent.url, token, http)
        cid: str | None = None
        for _ in range(rounds):
            started = asyncio.Event()
            box: dict[str, Outcome] = {}

            def on_event(out: Outcome, box: dict[str, Outcome] = box,
                         started: asyncio.Event = started) -> None:
                box["out"] = out
                started.set()

            first = asyncio.create_task(tab.submit(LONG, None, cid, on_event=on_event))
            await asyncio.wait_for(started.wait(), BOUND_S)
            cid = cid or box["out"].conversation_id
            await tab.cancel(box["out"])
            second = await tab.submit("привет", None, cid, timeout=BOUND_S)
            first.cancel()
            seen.append(second.kind if second.kind != "error" else second.last["code"])
    return seen


def test_stop_then_send_in_one_tab_is_never_busy(
        replicas: tuple[Stack, Service, Service]) -> None:
    stack, a, _ = replicas
    seen = asyncio.run(_stop_then_send(a, stack.token("alice"), 25))
    assert seen == ["final"] * 25, seen


def test_a_tab_keeps_its_lease_across_reconnects(
        replicas: tuple[Stack, Service, Service]) -> None:
    stack, a, b = replicas
    alice = stack.token("alice")
    tab_id = "tab-" + uuid.uuid4().hex
    first = say(a, alice, {"text": "привет", "files": [], "tab_id": tab_id})
    assert first.kind == "final", first.types()
    cid = first.conversation_id
    # A new Gradio session (a reconnect), same tab: sends at once, on either replica.
    for agent in (a, b):
        again = say(agent, alice, {"text": "привет", "files": [], "tab_id": tab_id}, None, cid)
        assert again.kind == "final", again.types()
    other = say(b, alice, {"text": "привет", "files": [], "tab_id": "tab-other"}, None, cid)
    assert other.kind == "error" and other.last["code"] == "CONVERSATION_BUSY"
    active = httpx.get(a.url + f"/api/agent/conversations/{cid}/active", timeout=10,
                       headers={"Authorization": f"Bearer {alice}"}).json()
    assert active["active"] is True
    assert active["run"]["status"] == "completed" and active["run"]["last_seq"] >= 1
    assert active["run"]["run_id"] == again.last["run_id"]


def test_a_replica_sent_sigterm_finishes_its_run_and_takes_no_new_one(
        replicas: tuple[Stack, Service, Service]) -> None:
    stack, _, _ = replicas
    leaving, leaving_policy = start_replica(stack, **ENV)
    try:
        alice = stack.token("alice")
        refused: dict[str, Any] = {}

        def submit_late() -> None:
            time.sleep(0.3)
            late = say(leaving, alice, "привет")
            refused["kind"] = (late.kind if late.kind != "error" else late.last["code"])

        def on_event(out: Outcome) -> None:
            if len(out.events) == 2:
                leaving.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
                late.start()

        late = threading.Thread(target=submit_late)
        out = say(leaving, alice, LONG, on_event=on_event, timeout=BOUND_S)
        late.join(BOUND_S)
        assert out.kind == "final", out.types()
        assert out.events[-1]["content"] == final_in_history(stack.agent, alice,
                                                              str(out.conversation_id))
        assert refused["kind"] in ("dropped", "AGENT_SATURATED"), refused
        wait_for(lambda: leaving.proc.poll() is not None,  # type: ignore[union-attr]
                 "the replica exits after its run", BOUND_S)
    finally:
        leaving.kill()
        leaving_policy.kill()


def test_a_run_outliving_the_drain_is_marked_lost_and_retry_completes_it(
        replicas: tuple[Stack, Service, Service]) -> None:
    stack, a, _ = replicas
    # With takeovers off (a replica's own choice at its drain), as before issue 33; with them
    # on the run is handed over instead (tests/system/test_takeover.py).
    leaving, leaving_policy = start_replica(
        stack, **{**ENV, "AGENTCHAT_AGENT_DRAIN_S": "1",
                  "AGENTCHAT_AGENT_TUNING__RUN_TAKEOVER": "false"})
    try:
        alice = stack.token("alice")
        tab_id = "tab-" + uuid.uuid4().hex
        # The tab drops after two events; the run goes on, longer than the 1 s drain.
        first = say(leaving, alice, {"text": "привет and echo 300 words", "files": [],
                                     "tab_id": tab_id}, drop_after=2)
        cid, run_id = first.conversation_id, first.last["run_id"]
        leaving.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        wait_for(lambda: leaving.proc.poll() is not None,  # type: ignore[union-attr]
                 "the replica exits after its drain", BOUND_S)
        # Marked lost at shutdown, not after the heartbeat bound: the joiner knows at once.
        assert rows(stack.database_url, "SELECT status FROM runs WHERE id=%s", run_id) == [
            {"status": "lost"}]
        lost = join(a, alice, cid, run_id, first.last["seq"])
        assert lost.kind == "error" and lost.last["code"] == "RUN_LOST", lost.types()
        retried = when_free(lambda: say(a, alice, {"text": "", "files": [], "tab_id": tab_id},
                                        "retry", cid), timeout=BOUND_S)
        assert retried.kind == "final", retried.types()
        assert retried.events[-1]["content"] == final_in_history(a, alice, str(cid))
    finally:
        leaving.kill()
        leaving_policy.kill()


STORED = "SELECT 1 FROM runs WHERE id=%s"
CANCELLED = "SELECT 1 FROM runs WHERE id=%s AND status='cancelled'"


def test_stop_by_run_id_from_either_replica(replicas: tuple[Stack, Service, Service]) -> None:
    """docs/protocol.md §4, "Stop by run_id": asked on the replica running it, the run stops
    at once; asked on another, that replica marks it and the running one stops it at its next
    heartbeat. Either way the run ends `cancelled` and its stream says so."""
    stack, a, b = replicas
    stack.reset_sandbox()
    alice = stack.token("alice")
    stack.fault(operation="search_dashboards", delay_s=8)
    for asked, name in ((a, "its own replica"), (b, "another replica")):
        tab_id = "tab-" + uuid.uuid4().hex
        started = say(a, alice, {"text": "найди дашборды про отчёты", "files": [],
                                 "tab_id": tab_id},
                      drop_after=1)  # the tab's connection is gone; the run goes on in a
        cid, run_id = started.conversation_id, started.last["run_id"]
        assert cid and run_id, started.types()
        wait_for(lambda rid=run_id: rows(stack.database_url, STORED, rid), "the run stored")
        t0 = time.monotonic()
        resp = httpx.post(f"{asked.url}/api/agent/conversations/{cid}/runs/{run_id}/cancel",
                          json={"tab_id": tab_id}, timeout=15,
                          headers={"Authorization": f"Bearer {alice}"})
        assert resp.status_code == 200, (name, resp.text)
        assert resp.json()["status"] in ("cancelled", "stopping"), (name, resp.json())
        wait_for(lambda rid=run_id: rows(stack.database_url, CANCELLED, rid),
                 f"stopped from {name}")
        assert time.monotonic() - t0 < 8, f"stopped from {name} before the slow tool ended"
