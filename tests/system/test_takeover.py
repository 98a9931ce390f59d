"""A run survives its replica (issue 33, docs/protocol.md §4 "Takeover"), from outside: real
agent processes on one PostgreSQL, the Gradio queue protocol, the sandbox's audit.

- SIGKILL of the replica streaming a paced run: a `@gradio/client` join on the survivor
  (tests/js/join_child.mjs) gets `run_resumed`
  (attempt 2, `after_seq`), contiguous seq under the same run_id, a final equal to history;
- a confirmed deploy whose replica is killed while the sandbox runs it: it ends final on the
  survivor and the sandbox executed it once;
- SIGTERM with a run outliving the drain: released, resumed on the survivor within 2 s;
- a stale owner revived (SIGSTOP until the takeover, SIGCONT) writes nothing more for it;
- ... nor sends the ss-tools request it was about to retry, nor appends an audit row (every
  side effect fenced in PostgreSQL: agent/storage/fencing.py);
- a write killed mid-call runs once though the model, asked again, would plan it differently
  (the planned step stored before the write ran: agent/graph/plans.py);
- attempts used up (every replica that takes it stopped): RUN_LOST, its detail and `reason`.

The survivor (`stack.agent`) lives for the module; a test starts the replica it kills (one
replica dies with two runs, to spare a start: seconds on a loaded 2-core machine), and the
paused replica serves the last two tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from agentchat.agent.storage.sealing import TokenSeal
from agentchat.db import CONVERSATION_LOCK_NS, conversation_lock_key
from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import audit_ok, history_items, rows, say, submit, wait_for
from testkit.stack import CLIENT_SECRET, Stack, running_stack
from testkit.support import (
    Service,
    create_database,
    drop_database,
    start_openai_stub,
    stub_model_env,
)

# A paced model so a run is still streaming when its replica dies; a short heartbeat and lost
# bound so a dead replica's run is taken over within seconds; a lease longer than that (the
# orphan sweep settles a turn whose lease lapsed, and the takeover must come first); two
# attempts, so "attempts used up" needs only two kills. A replica's session idle in a
# transaction is ended after RUN_LOST_S too (AGENTCHAT_AGENT_DB_IDLE_IN_TRANSACTION_S unset).
ENV = {"AGENTCHAT_AGENT_TUNING__PLANNER_TOKEN_DELAY_S": "0.02",
       "AGENTCHAT_AGENT_TUNING__LEASE_S": "15", "AGENTCHAT_AGENT_TUNING__RUN_HEARTBEAT_S": "0.5",
       "AGENTCHAT_AGENT_TUNING__RUN_LOST_S": "2",
       "AGENTCHAT_AGENT_TUNING__RUN_TAKEOVER_POLL_S": "0.25",
       "AGENTCHAT_AGENT_TUNING__RUN_MAX_ATTEMPTS": "2"}
LONG = "привет and echo 80 words"
BOUND_S = 45.0
LATENCIES: dict[str, list[float]] = {"sigkill": [], "drain": []}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    url = create_database(pg_server, template=migrated_template)
    try:
        with running_stack(tmp_path_factory.mktemp("takeover"), url,
                           AGENTCHAT_AGENT_TUNING__REPLICA="survivor", **ENV) as s:
            yield s
    finally:
        drop_database(pg_server, url)
        for kind, got in LATENCIES.items():
            if got:
                print(f"\ntakeover latency {kind}: n={len(got)} "
                      f"p50={statistics.median(got):.2f}s max={max(got):.2f}s")


def victim(stack: Stack, name: str, **env: str) -> Service:
    return stack.start_agent(**{**ENV, "AGENTCHAT_AGENT_TUNING__REPLICA": name, **env})


def join_message(cid: str, run_id: str, last_seq: int) -> dict[str, Any]:
    return {"text": "", "files": [], "action": "join", "conversation_id": cid,
            "run_id": run_id, "last_seq": last_seq}


async def _join(agent: Service, token: str, cid: str, run_id: str, last_seq: int,
                on_event: Any = None) -> Outcome:
    async with httpx.AsyncClient() as http:
        return await RawChat(agent.url, token, http).submit(
            join_message(cid, run_id, last_seq), timeout=BOUND_S, on_event=on_event)


JS = Path(__file__).resolve().parents[1] / "js"


async def _js_join(stack: Stack, agent: Service, token: str, cid: str, run_id: str,
                   last_seq: int, on_event: Any = None) -> Outcome:
    """The same join with the real @gradio/client (tests/js/join_child.mjs), as a tab does."""
    if not (JS / "node_modules" / "@gradio" / "client").exists():
        await asyncio.to_thread(subprocess.run, ["npm", "ci", "--no-audit", "--no-fund",
                                                 "--loglevel=error"], cwd=JS, check=True)
    child = await asyncio.create_subprocess_exec(
        "node", "join_child.mjs", agent.url + "/api/agent/gradio/", token, cid, run_id,
        str(last_seq), cwd=JS, env=stack.node_env(), stdout=asyncio.subprocess.PIPE)
    out = Outcome()
    assert child.stdout is not None
    async with asyncio.timeout(BOUND_S):
        async for line in child.stdout:
            out.events.append(json.loads(line))
            if on_event is not None:
                on_event(out)
        await child.wait()
    assert child.returncode == 0
    return out


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
    assert meta["seq"] == after + 1
    got = seqs(joined)
    # The stored events the client had not seen, then the new attempt's: no gap, no repeat.
    assert got == list(range(min(seen, after) + 1, min(seen, after) + 1 + len(got))), got
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


def test_a_burst_of_new_runs_on_one_replica_all_end_final(stack: Stack) -> None:
    """Runs made while the writer stores a batch have no row yet when the heartbeat after it
    goes out: a beat must not take them for another replica's (at 200 conversations started
    together, 40 % of the runs stopped with nothing said, bench/agent_scale.py)."""
    alice = stack.token("alice")

    async def burst() -> list[Outcome]:
        return await asyncio.gather(*(submit(stack.agent.url, alice, "привет and echo 40 words",
                                             timeout=BOUND_S) for _ in range(100)))

    outs = asyncio.run(burst())
    assert [o.kind for o in outs] == ["final"] * 100, [o.types()[-3:] for o in outs
                                                      if o.kind != "final"][:3]
    ids = [str(o.last["run_id"]) for o in outs]
    # The writer stores a run's end after its final event went out: wait for its last batch.
    def stored() -> list[dict[str, Any]]:
        return rows(stack.database_url, "SELECT status, attempt, count(*) AS n FROM runs"
                    " WHERE id = ANY(%s) GROUP BY 1, 2", ids)

    done = [{"status": "completed", "attempt": 1, "n": 100}]
    with contextlib.suppress(AssertionError):
        wait_for(lambda: stored() == done, "every run stored completed", 10)
    assert stored() == done


def test_sigkill_another_replica_goes_on_with_a_stream_and_a_confirmed_deploy(
        stack: Stack) -> None:
    """One replica dies with two runs: a paced answer after a few tokens, and a confirmed
    deploy while the sandbox runs it (slowed there). Both go on elsewhere under their run_id;
    the deploy ran once."""
    stack.reset_sandbox()
    doomed = victim(stack, "doomed")
    alice = stack.token("alice")
    try:
        tab = "tab-" + uuid.uuid4().hex
        card = say(doomed, alice, {"text": "задеплой дашборд 42 в прод", "files": [],
                                   "tab_id": tab})
        assert card.kind == "confirm_required", card.types()
        deploy_cid, key = str(card.conversation_id), card.last["confirm_id"]
        # The next deploy waits 2 s in the sandbox: in flight when its replica is killed.
        stack.fault(operation="deploy_dashboard", delay_s=2)
        in_sandbox = threading.Event()
        killed: dict[str, float] = {}

        def deploy_reached_the_sandbox(out: Outcome) -> None:
            if out.of("tool_start") and not in_sandbox.is_set():
                threading.Timer(0.3, in_sandbox.set).start()

        def kill_after_tokens(out: Outcome) -> None:
            if len(out.of("stream_token")) >= 4 and in_sandbox.is_set() and not killed:
                doomed.stop(signal.SIGKILL)
                killed["at"] = time.monotonic()

        confirmed: dict[str, Outcome] = {}
        confirm = threading.Thread(target=lambda: confirmed.setdefault("out", say(
            doomed, alice, {"text": "__resume__", "files": [], "tab_id": tab}, "confirm",
            deploy_cid, on_event=deploy_reached_the_sandbox, timeout=BOUND_S)))
        confirm.start()
        assert in_sandbox.wait(BOUND_S)
        first = say(doomed, alice, LONG, on_event=kill_after_tokens, timeout=BOUND_S)
        confirm.join(BOUND_S)
        assert first.kind == "dropped" and killed, first.types()
        deploy = confirmed["out"]
        assert deploy.kind == "dropped" and deploy.of("tool_start"), deploy.types()
        resumed_at: dict[str, float] = {}

        def at_resumed(name: str) -> Any:
            def on_event(out: Outcome) -> None:
                if out.of("run_resumed") and name not in resumed_at:
                    resumed_at[name] = time.monotonic()
            return on_event

        async def both() -> tuple[Outcome, Outcome]:
            # The clients reconnect to the survivor with what they saw (perhaps more than
            # was stored).
            return await asyncio.gather(
                _js_join(stack, stack.agent, alice, str(first.conversation_id),
                         first.last["run_id"], int(first.last["seq"]), at_resumed("stream")),
                _join(stack.agent, alice, deploy_cid, deploy.last["run_id"],
                      int(deploy.last["seq"]), at_resumed("deploy")))

        streamed, deployed = asyncio.run(both())
        assert_resumed(stack, streamed, first.last["run_id"], int(first.last["seq"]), alice,
                       str(first.conversation_id))
        assert_resumed(stack, deployed, deploy.last["run_id"], int(deploy.last["seq"]), alice,
                       deploy_cid)
        assert deployed.of("tool_end"), deployed.types()
        for name in ("stream", "deploy"):
            took = resumed_at[name] - killed["at"]
            LATENCIES["sigkill"].append(took)
            assert took <= 2 + 5, f"takeover p99 bound: RUN_LOST_S + 5 s ({took:.1f} s)"
        for run_id in (first.last["run_id"], deploy.last["run_id"]):
            assert run_row(stack, run_id)["replica"] == "survivor"
        time.sleep(1.0)  # the killed replica's request, still in the sandbox, has landed
        assert len(audit_ok(stack, operation="deploy_dashboard", idempotency_key=key)) == 1
        turns = rows(stack.database_url, "SELECT status FROM turns WHERE conversation_id=%s",
                     deploy_cid)
        assert [t["status"] for t in turns] == ["completed"]
        # The agent's audit record of the deploy: the takeover (the run's new attempt, by
        # the survivor) before its one execution.
        resp = httpx.get(stack.agent.url + "/api/agent/audit", timeout=10,
                         params={"conversation_id": deploy_cid},
                         headers={"Authorization": f"Bearer {alice}"})
        assert resp.status_code == 200, resp.text
        [record] = resp.json()["items"]
        stages = [s["stage"] for s in record["stages"]]
        assert stages.count("takeover") == 1 and stages.count("execution") == 1, stages
        assert stages.index("takeover") < stages.index("execution"), stages
        moved = next(s["detail"] for s in record["stages"] if s["stage"] == "takeover")
        assert moved["run_id"] == deploy.last["run_id"] and moved["attempt"] == 2
        assert moved["replica"] == "survivor"
    finally:
        doomed.kill()


def test_calls_in_flight_without_a_card_are_sent_again_and_a_write_runs_once(
        stack: Stack) -> None:
    """A read and an uncarded write (ss-dev), each held 2 s in the sandbox when their replica
    dies: the survivor re-sends both (the write with its Idempotency-Key), so the read runs
    again and the write still runs once."""
    stack.reset_sandbox()
    doomed = victim(stack, "doomed-calls")
    alice = stack.token("alice")
    try:
        stack.fault(operation="refresh_dataset", delay_s=2)
        stack.fault(operation="search_dashboards", delay_s=2)
        held = {"write": threading.Event(), "read": threading.Event()}
        out: dict[str, Outcome] = {}

        def send(name: str, text: str) -> threading.Thread:
            def in_a_tool(o: Outcome) -> None:  # the stream waits on a call: it is held
                if o.events[-1]["metadata"].get("type") == "tool_start":
                    threading.Timer(0.3, held[name].set).start()
            t = threading.Thread(target=lambda: out.setdefault(name, say(
                doomed, alice, text, on_event=in_a_tool, timeout=BOUND_S)))
            t.start()
            return t

        # (no dashboard or dataset read first: its output would make a card due)
        threads = [send("write", "обнови датасет 5 в ss-dev"),
                   send("read", "найди дашборды про продажи в ss-dev")]
        assert all(e.wait(BOUND_S) for e in held.values())
        doomed.stop(signal.SIGKILL)
        for t in threads:
            t.join(BOUND_S)
        joined = {}
        for name, o in out.items():
            assert o.kind == "dropped" and o.of("tool_start"), (name, o.types())
            joined[name] = asyncio.run(_join(stack.agent, alice, str(o.conversation_id),
                                             o.last["run_id"], int(o.last["seq"])))
            assert_resumed(stack, joined[name], o.last["run_id"], int(o.last["seq"]), alice,
                           str(o.conversation_id))
            assert joined[name].of("tool_end"), (name, joined[name].types())
        time.sleep(2.5)  # the killed replica's requests, held in the sandbox, have landed
        audit = stack.audit()
        writes = [a for a in audit if a["operation"] == "refresh_dataset"]
        assert [a["outcome"] for a in writes if a["outcome"] != "replayed"] == ["ok"], writes
        assert len({a["idempotency_key"] for a in writes}) == 1, writes
        reads = [a for a in audit if a["operation"] == "search_dashboards"]
        assert len(reads) >= 1 and all(a["outcome"] == "ok" for a in reads), reads
    finally:
        doomed.kill()


def test_sigterm_hands_a_run_outliving_the_drain_over_within_2_s(stack: Stack) -> None:
    leaving = victim(stack, "leaving", AGENTCHAT_AGENT_DRAIN_S="0.5")
    try:
        alice = stack.token("alice")
        first = say(leaving, alice, "привет and echo 100 words", drop_after=3)
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


def refresh(dataset: int = 5) -> dict[str, Any]:
    return {"name": "refresh_dataset", "args": {"dataset_id": dataset, "env_id": "ss-dev"}}


def test_a_write_killed_mid_call_runs_once_whatever_the_model_says_next(stack: Stack) -> None:
    """An uncarded write (ss-dev) held in the sandbox when its replica is killed. The model
    would plan the step differently if asked again (the write second, after a read: another
    call id, another Idempotency-Key); the replica that takes the run over, on the same
    model, goes on with the step stored before the write ran, so the write runs once and the
    model is not asked that step again."""
    stack.reset_sandbox()
    model = start_openai_stub()
    env = stub_model_env(model)
    doomed, heir = victim(stack, "fickle-doomed", **env), victim(stack, "fickle-heir", **env)
    survivor = stack.agent.proc
    assert survivor is not None
    alice = stack.token("alice")
    try:
        httpx.post(model.url + "/script", timeout=5, json={"fresh_only": True, "turns": [
            [refresh()],
            [{"name": "search_dashboards", "args": {"env_id": "ss-dev"}}, refresh()]],
        }).raise_for_status()
        stack.fault(operation="refresh_dataset", delay_s=2)
        held = threading.Event()

        def in_the_write(o: Outcome) -> None:
            if o.events[-1]["metadata"].get("type") == "tool_start" and not held.is_set():
                threading.Timer(0.3, held.set).start()

        out: dict[str, Outcome] = {}
        sender = threading.Thread(target=lambda: out.setdefault("write", say(
            doomed, alice, "обнови датасет 5 в ss-dev", on_event=in_the_write,
            timeout=BOUND_S)))
        sender.start()
        assert held.wait(BOUND_S)
        # The survivor (another model: the offline planner) sits this takeover out.
        survivor.send_signal(signal.SIGSTOP)
        try:
            doomed.stop(signal.SIGKILL)
            sender.join(BOUND_S)
            first = out["write"]
            assert first.kind == "dropped" and first.of("tool_start"), first.types()
            run_id = str(first.last["run_id"])
            wait_for(lambda: run_row(stack, run_id)["replica"] == "fickle-heir",
                     "the heir's takeover", BOUND_S, pause=0.1)
        finally:
            survivor.send_signal(signal.SIGCONT)
        cid = str(first.conversation_id)
        joined = asyncio.run(_join(heir, alice, cid, run_id, int(first.last["seq"])))
        assert_resumed(stack, joined, run_id, int(first.last["seq"]), alice, cid)
        assert joined.of("tool_end"), joined.types()
        time.sleep(2.5)  # the killed replica's request, held in the sandbox, has landed
        writes = [a for a in stack.audit() if a["operation"] == "refresh_dataset"]
        assert [a["outcome"] for a in writes if a["outcome"] != "replayed"] == ["ok"], writes
        assert len({a["idempotency_key"] for a in writes}) == 1, writes
        # Asked once for the step (its second answer still queued), then for the answer.
        seen = httpx.get(model.url + "/seen", timeout=5).json()
        assert seen["left"] == 1, seen
    finally:
        for svc in (doomed, heir, model):
            svc.kill()


@pytest.fixture(scope="module")
def paused(stack: Stack) -> Iterator[Service]:
    """A replica the tests pause (SIGSTOP) and revive."""
    svc = victim(stack, "paused")
    try:
        yield svc
    finally:
        svc.kill()


def test_a_stale_owner_revived_writes_nothing_more(stack: Stack, paused: Service) -> None:
    alice = stack.token("alice")
    # Long enough to be still running when the replica is paused, on a loaded machine too
    # (200 words, ~4 s, had ended before the pause in a full suite run).
    first = say(paused, alice, "привет and echo 600 words", drop_after=3)
    cid, run_id = str(first.conversation_id), str(first.last["run_id"])
    os_pid = paused.proc.pid  # type: ignore[union-attr]
    # A run the writer has not stored yet cannot be taken over: pause after its first batch.
    wait_for(lambda: rows(stack.database_url, "SELECT 1 FROM runs WHERE id=%s", run_id),
             "the run's row", BOUND_S, pause=0.05)
    paused.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        assert run_row(stack, run_id)["status"] == "running", "the run ended before the pause"
        # The token the live run keeps for its takeover is sealed: a reader of the table
        # (or of a backup) holds no bearer token (agent/storage/sealing.py).
        kept = rows(stack.database_url, "SELECT resume_token FROM runs WHERE id=%s",
                    run_id)[0]["resume_token"]
        assert kept and alice not in kept and alice.split(".")[1] not in kept
        wait_for(lambda: run_row(stack, run_id)["replica"] not in ("paused", ""),
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
    assert row["replica"] != "paused" and row["status"] == "completed"


def audit_rows(stack: Stack, cid: str) -> list[dict[str, Any]]:
    return rows(stack.database_url, "SELECT seq, stage, call_id, detail FROM audit_rows"
                " WHERE conversation_id=%s ORDER BY seq", cid)


def test_a_stale_owner_revived_sends_no_request_and_appends_no_audit_row(
        stack: Stack, paused: Service) -> None:
    """Paused in the backoff before an uncarded write's second attempt (the first got a 503),
    taken over, revived: its attempt is not sent (the run's epoch is read in PostgreSQL right
    before each request) and it appends no audit row (each append is conditional on the
    epoch), though its heartbeat has not yet told it the run is another's."""
    stack.reset_sandbox()
    stack.fault(operation="refresh_dataset", status=503, times=1)
    alice = stack.token("alice")
    proc = paused.proc
    assert proc is not None
    stopped: dict[str, Outcome] = {}
    in_backoff = threading.Event()

    def stop_in_the_backoff(o: Outcome) -> None:
        if o.of("tool_retry") and not in_backoff.is_set():
            # A run is taken over only once its writer stored it with its sealed token (as
            # `stored_run` waits for); under load that can trail the events a client sees.
            # Well inside the 1 s backoff before the second attempt.
            run_id = str(o.last["run_id"])
            deadline = time.monotonic() + 0.6
            while time.monotonic() < deadline and not rows(
                    stack.database_url, "SELECT 1 FROM runs WHERE id=%s"
                    " AND resume_token IS NOT NULL", run_id):
                time.sleep(0.02)
            proc.send_signal(signal.SIGSTOP)
            stopped["out"] = o
            in_backoff.set()

    sender = threading.Thread(daemon=True, target=lambda: say(
        paused, alice, "обнови датасет 5 в ss-dev", on_event=stop_in_the_backoff,
        timeout=BOUND_S))
    sender.start()
    try:
        assert in_backoff.wait(BOUND_S)
        first = stopped["out"]
        cid, run_id = str(first.conversation_id), str(first.last["run_id"])
        try:
            wait_for(lambda: run_row(stack, run_id)["replica"] == "survivor",
                     "the survivor's takeover", BOUND_S, pause=0.1)
        except AssertionError as e:
            raise AssertionError(f"{e}; the run: {run_row(stack, run_id)}") from None
        joined = asyncio.run(_join(stack.agent, alice, cid, run_id, int(first.last["seq"])))
        assert_resumed(stack, joined, run_id, int(first.last["seq"]), alice, cid)
        assert joined.of("tool_end"), joined.types()
        sandbox_before = stack.audit(operation="refresh_dataset")
        trail_before = audit_rows(stack, cid)
    finally:
        proc.send_signal(signal.SIGCONT)
    time.sleep(2.5)  # the revived replica's backoff, writer and heartbeat have run by now
    assert proc.poll() is None, "the revived replica lives on"
    sandbox = stack.audit(operation="refresh_dataset")
    assert sandbox == sandbox_before, sandbox[len(sandbox_before):]
    # The sandbox saw the paused replica's 503, then the call once, from the new owner: under
    # the decision the survivor took for it.
    assert [a["outcome"] for a in sandbox] == ["error", "ok"], sandbox
    trail = audit_rows(stack, cid)
    assert trail == trail_before, trail[len(trail_before):]
    assert [r["stage"] for r in trail] == ["decision", "takeover", "decision", "execution"]
    assert sandbox[1]["decision_id"] == trail[2]["detail"]["decision_id"]
    assert len({r["call_id"] for r in trail}) == 1, trail
    sender.join(BOUND_S)


# The writer's fence (agent/storage/runs.py FENCE) by its backend's state in PostgreSQL.
FENCE_BACKEND = ("SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                 " AND query LIKE '%%FOR NO KEY UPDATE%%' AND {}")
ACTIVITY = ("SELECT state, wait_event, left(query, 60) AS query FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND state <> 'idle'")


def test_a_replica_frozen_inside_a_transaction_is_taken_over(
        stack: Stack, paused: Service) -> None:
    """SIGSTOPped while its writer holds the run's row locked in an open transaction (the
    fence of a batch not yet committed): PostgreSQL ends that session after
    AGENTCHAT_AGENT_DB_IDLE_IN_TRANSACTION_S, and the survivor takes the run over. Without
    that bound a takeover skips the locked row for as long as the replica stays frozen (its
    TCP connection is alive: the kernel answers for a stopped process)."""
    proc = paused.proc
    assert proc is not None
    alice = stack.token("alice")
    first, cid, run_id = stored_run(stack, paused, alice, "привет and echo 400 words")
    started = time.monotonic()
    # Holding the row, the test makes the writer's next batch wait inside its transaction,
    # freezes the replica there, then lets the fence have the row: idle in a transaction.
    # The writer beats after a batch, in the same task: when its beat met the held row first
    # (no batch was due), the test lets go and tries again.
    frozen = False
    while not frozen and time.monotonic() - started < BOUND_S:
        with psycopg.connect(stack.database_url, autocommit=True) as holder:
            with holder.transaction():
                holder.execute("SELECT 1 FROM runs WHERE id = %s FOR UPDATE", (run_id,))
                waiting = time.monotonic() + 1.0
                while not frozen and time.monotonic() < waiting:
                    if rows(stack.database_url, FENCE_BACKEND.format("wait_event_type = 'Lock'")):
                        proc.send_signal(signal.SIGSTOP)
                        frozen = True
                    time.sleep(0.02)
    assert frozen, "the writer's fence never waited for the held row"
    try:
        assert wait_for(lambda: rows(stack.database_url, FENCE_BACKEND.format(
            "state = 'idle in transaction'")), "the frozen fence holding the row", 2.0,
            pause=0.02)
        assert run_row(stack, run_id)["status"] == "running"
        try:
            wait_for(lambda: run_row(stack, run_id)["replica"] == "survivor",
                     "the survivor's takeover", BOUND_S, pause=0.1)
        except AssertionError as e:
            raise AssertionError(f"{e}; the run: {run_row(stack, run_id)}; its backends: "
                                 f"{rows(stack.database_url, ACTIVITY)}") from None
    finally:
        proc.send_signal(signal.SIGCONT)
    joined = asyncio.run(_join(stack.agent, alice, cid, run_id, int(first.last["seq"])))
    assert_resumed(stack, joined, run_id, int(first.last["seq"]), alice, cid)
    time.sleep(1.5)  # the revived replica's writer has found its session ended by now
    assert proc.poll() is None, "the revived replica lives on"
    assert rows(stack.database_url, "SELECT count(*) AS n FROM messages WHERE"
                " conversation_id=%s AND role='assistant'", cid) == [{"n": 1}]


# Who holds a conversation's lock (the two-key advisory lock of agentchat.db), by state.
HELD_BY = ("SELECT a.state FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
           " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s"
           " AND l.objsubid = 2 AND a.datname = current_database()")


def test_a_replica_frozen_holding_a_conversations_lock_holds_it_no_longer(
        stack: Stack, paused: Service) -> None:
    """SIGSTOPped right after it took a conversation's lock (archiving it): the survivor's
    restore of that conversation waits for the frozen replica's session to end
    (AGENTCHAT_AGENT_DB_IDLE_IN_TRANSACTION_S), not for the replica to come back. The
    frozen archive, revived, fails STORAGE_UNAVAILABLE (retryable) and stores nothing."""
    proc = paused.proc
    assert proc is not None
    alice = stack.token("alice")
    auth = {"Authorization": f"Bearer {alice}"}
    made = httpx.post(stack.agent.url + "/api/assistant/conversations", headers=auth,
                      json={"title": "frozen"}, timeout=30)
    assert made.status_code == 201, made.text
    cid = str(made.json()["id"])
    lock = (CONVERSATION_LOCK_NS, conversation_lock_key(cid))
    archived: dict[str, httpx.Response] = {}
    # The test holds the lock (as the pruner does) until the replica's archive waits for it,
    # freezes the replica, then lets go: the frozen replica holds the lock.
    with psycopg.connect(stack.database_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s, %s)", lock)
        archiver = threading.Thread(daemon=True, target=lambda: archived.setdefault(
            "resp", httpx.delete(f"{paused.url}/api/assistant/conversations/{cid}",
                                 headers=auth, timeout=BOUND_S)))
        archiver.start()
        wait_for(lambda: rows(stack.database_url, "SELECT 1 FROM pg_stat_activity WHERE"
                              " datname = current_database() AND wait_event = 'advisory'"),
                 "the archive waiting for the lock", BOUND_S, pause=0.05)
        proc.send_signal(signal.SIGSTOP)
        holder.execute("SELECT pg_advisory_unlock(%s, %s)", lock)
    try:
        # The frozen replica's session holds the lock, inside a transaction.
        assert wait_for(lambda: rows(stack.database_url, HELD_BY, CONVERSATION_LOCK_NS),
                        "the frozen archive holding the lock", 2.0, pause=0.02) == [
            {"state": "idle in transaction"}]
        restored = httpx.post(f"{stack.agent.url}/api/assistant/conversations/{cid}/restore",
                              headers=auth, timeout=BOUND_S)
        assert restored.status_code == 200, restored.text
        assert restored.json()["is_archived"] is False
    finally:
        proc.send_signal(signal.SIGCONT)
    archiver.join(BOUND_S)
    resp = archived["resp"]
    assert resp.status_code == 503 and resp.json()["code"] == "STORAGE_UNAVAILABLE", resp.text
    assert rows(stack.database_url, "SELECT is_archived FROM conversations WHERE id=%s",
                cid) == [{"is_archived": False}]


def stored_run(stack: Stack, agent: Service, token: str, text: str
               ) -> tuple[Outcome, str, str]:
    """A paced run on `agent` whose client dropped after 3 events, once the writer has stored
    its row (a run not stored yet cannot be taken over)."""
    first = say(agent, token, text, drop_after=3)
    cid, run_id = str(first.conversation_id), str(first.last["run_id"])
    wait_for(lambda: rows(stack.database_url, "SELECT 1 FROM runs WHERE id=%s", run_id),
             "the run's row", BOUND_S, pause=0.05)
    return first, cid, run_id


def test_attempts_used_up_end_run_lost_with_the_reason(stack: Stack, paused: Service) -> None:
    """Every replica that takes the run stops (SIGSTOP: to the others, as dead as a kill):
    the paused replica's run goes to the survivor (attempt 2 of 2), which stops too; the
    first, revived, finds the run's attempts used up and ends it RUN_LOST."""
    survivor = stack.agent
    alice = stack.token("alice")
    first, cid, run_id = stored_run(stack, paused, alice, "привет and echo 200 words")
    paused.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        wait_for(lambda: run_row(stack, run_id)["replica"] == "survivor",
                 "the survivor's takeover", BOUND_S, pause=0.1)
        survivor.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        paused.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        lost = asyncio.run(_join(paused, alice, cid, run_id, int(first.last["seq"])))
    finally:
        paused.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        survivor.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    assert lost.kind == "error" and lost.last["code"] == "RUN_LOST", lost.types()
    assert lost.last["reason"] == "attempts_used_up" and lost.last["retryable"] is True
    assert "исчерпаны" in lost.last["detail"]
    row = run_row(stack, run_id)
    assert row["status"] == "lost" and row["attempt"] == 2 and row["token_cleared"]
    time.sleep(1.5)  # the revived survivor's turn and writer have run by now
    assert rows(stack.database_url, "SELECT status, error_code FROM turns WHERE"
                " conversation_id=%s", cid) == [{"status": "failed", "error_code": "RUN_LOST"}]
    assert rows(stack.database_url, "SELECT count(*) AS n FROM messages WHERE"
                " conversation_id=%s AND role='assistant'", cid) == [{"n": 0}]
    last = rows(stack.database_url, "SELECT max(seq) AS seq FROM run_events WHERE run_id=%s",
                run_id)[0]["seq"]
    assert last == lost.last["seq"], "nothing stored after RUN_LOST"


@pytest.mark.parametrize("stored", ["nothing", "another run's seal"])
def test_a_run_of_the_previous_release_is_marked_lost_not_taken_over(
        stack: Stack, paused: Service, stored: str) -> None:
    """During a rolling update the previous release's replicas keep no resume token (and do
    not fence their writes): a survivor never takes such a run over; it ends RUN_LOST with
    the reason `unresumable`, as before issue 33. So does a run whose row holds another
    run's sealed token (an admin's, copied by someone who can write the table): the seal is
    bound to its run, conversation and subject (agent/storage/sealing.py) and does not open,
    so the run never goes on as someone else."""
    alice = stack.token("alice")
    first, cid, run_id = stored_run(stack, paused, alice, "привет and echo 200 words")
    paused.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        if stored == "nothing":  # the row as the previous release stores it
            rows(stack.database_url, "UPDATE runs SET resume_token = NULL WHERE id=%s"
                 " RETURNING id", run_id)
        else:  # the stack's key: derived from the service client secret (no resume key set)
            seal = TokenSeal.of(None, None, CLIENT_SECRET)
            other = {"run": str(uuid.uuid4()), "conversation": str(uuid.uuid4())}
            admin = stack.token("root", ["admin"])
            foreign = seal.seal(admin, **other)
            assert foreign is not None and seal.open(foreign, **other) == admin
            rows(stack.database_url, "UPDATE runs SET resume_token = %s WHERE id=%s"
                 " RETURNING id", foreign, run_id)
        wait_for(lambda: run_row(stack, run_id)["status"] == "lost", "RUN_LOST", BOUND_S,
                 pause=0.1)
        lost = asyncio.run(_join(stack.agent, alice, cid, run_id, int(first.last["seq"])))
    finally:
        paused.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    assert lost.kind == "error" and lost.last["code"] == "RUN_LOST", lost.types()
    assert lost.last["reason"] == "unresumable" and not lost.of("run_resumed")
    row = run_row(stack, run_id)
    # The foreign seal was claimed (attempt 2) and refused when opened; no seal, no claim.
    assert (row["attempt"], row["replica"]) == ((1, "paused") if stored == "nothing"
                                                else (2, "survivor"))
    assert not audit_ok(stack, user_actor="root")
