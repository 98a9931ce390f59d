"""The audit trail (issue 20 item 1), from outside: real sandbox, sidecar, agent and PostgreSQL,
the offline model, the `agentchat audit` command as a process.

- A confirmed deploy, a denied one, an expired one, a permission-denied one (and a role
  revoked while the card waited, and an uncarded write) each give exactly one joined record
  with every stage that happened, in order; the sandbox's audit line of an execution carries
  the record's `decision_id`.
- The cards, policy decisions and tool calls are counted in /metrics (outcome and tool labels).
- Another user's records are invisible; the audit role sees them; `auditor@ss-dev` sees only
  ss-dev's.
- The export verifies; an edited or deleted line is named; an edited or deleted row in the
  database (by SQL, past the append-only trigger) is named; a retention cut still verifies
  from its anchor.
- Property-based (hypothesis): the canonical hash ignores key order and is the sidecar's
  digest; any one edit or deletion in a chain is found at its place.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentchat.agent.audit.chain import GENESIS, args_digest, canonical, check_rows, row_hash
from agentchat.agent.audit.export import verify_file
from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import audit_ok, say
from testkit.stack import Stack, stack_on_own_database
from testkit.support import AGENTCHAT, ROOT

TTL_S = 4.0  # the cards' life here: long enough to answer at once, short enough to expire


@pytest.fixture(scope="module")
def audit_stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
                migrated_template: str) -> Iterator[Stack]:
    with stack_on_own_database(pg_server, migrated_template, tmp_path_factory.mktemp("audit"),
                               AGENTCHAT_AGENT_CONFIRMATION_TTL_S=str(TTL_S)) as s:
        yield s


def turn(stack: Stack, token: str, text: str, tab: RawChat, cid: str | None = None,
         action: str | None = None) -> Outcome:
    out = say(stack.agent, token, text, action, cid, tab=tab, timeout=60)
    assert out.kind in ("final", "confirm_required"), (out.types(), out.last)
    return out


def carded(stack: Stack, token: str, text: str = "задеплой дашборд 42 в прод"
           ) -> tuple[RawChat, Outcome]:
    tab = RawChat(stack.agent.url, token, None)  # type: ignore[arg-type]
    card = turn(stack, token, text, tab)
    assert card.kind == "confirm_required", card.types()
    return tab, card


def records(stack: Stack, token: str, **params: Any) -> list[dict[str, Any]]:
    resp = httpx.get(stack.agent.url + "/api/agent/audit", params=params, timeout=10,
                     headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["items"])


def one_record(stack: Stack, token: str, cid: str) -> dict[str, Any]:
    got = records(stack, token, conversation_id=cid)
    assert len(got) == 1, [(r["tool"], [s["stage"] for s in r["stages"]]) for r in got]
    rec = got[0]
    assert rec["conversation_id"] == cid and rec["tool"] == "deploy_dashboard"
    # Every row of the record names the call alike, with the sidecar's digest of the arguments
    assert rec["args_hash"] == args_digest({"dashboard_id": 42, "env_id": "prod"})
    assert rec["environment"] == "prod"
    return rec


def stages(rec: dict[str, Any]) -> list[str]:
    return [s["stage"] for s in rec["stages"]]


def detail(rec: dict[str, Any], stage: str, n: int = 0) -> dict[str, Any]:
    return [s["detail"] for s in rec["stages"] if s["stage"] == stage][n]


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": stack.database_url, "AGENTCHAT_MODE": "dev",
           "AGENTCHAT_DATA_DIR": str(stack.data_dir)}
    return subprocess.run([AGENTCHAT, "audit", *args], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=60)


def sql(stack: Stack, statement: str, *params: Any) -> None:
    """Tampering as a database user would: past the append-only trigger."""
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE audit_rows DISABLE TRIGGER audit_rows_append_only")
        try:
            conn.execute(statement, params)  # type: ignore[arg-type]
        finally:
            conn.execute("ALTER TABLE audit_rows ENABLE TRIGGER audit_rows_append_only")


def reinsert(stack: Stack, row: dict[str, Any]) -> None:
    """A deleted row put back exactly as exported (an insert: the trigger allows it)."""
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO audit_rows SELECT * FROM jsonb_populate_record("
                     "NULL::audit_rows, %s::jsonb)",
                     (json.dumps({k: v for k, v in row.items() if k != "kind"}),))


# -- one record per call, every stage ----------------------------------------------------------

def test_a_confirmed_deploy_is_one_record_with_every_stage(audit_stack: Stack) -> None:
    stack, alice = audit_stack, audit_stack.token("alice")
    stack.reset_sandbox()
    tab, card = carded(stack, alice)
    done = turn(stack, alice, "__resume__", tab, card.conversation_id, "confirm")
    assert [e["result"] for e in done.of("confirm_resolved")] == ["confirmed"]
    assert done.kind == "final" and done.of("tool_end"), done.types()
    rec = one_record(stack, alice, card.conversation_id or "")
    assert stages(rec) == ["decision", "card", "decision", "answer", "execution"]
    check, recheck = detail(rec, "decision", 0), detail(rec, "decision", 1)
    assert (check["kind"], check["decision"]) == ("check", "allow_with_confirmation")
    assert (recheck["kind"], recheck["decision"]) == ("recheck", "allow_with_confirmation")
    assert check["policy_revision"] and check["decision_id"] != recheck["decision_id"]
    shown = detail(rec, "card")
    assert shown["confirm_id"] == card.last["confirm_id"]
    assert shown["prompt"] == card.last["prompt"] and shown["permission_granted"] is True
    answer = detail(rec, "answer")
    assert (answer["by"], answer["action"], answer["result"]) == ("alice", "confirm",
                                                                   "confirmed")
    # A keyed hash of the tab's session, never the hash itself (which would let an auditor
    # cancel or read that tab's stream: agent/gradio/session_guard.py).
    assert len(answer["session"]) == 32 and answer["session"] != tab.session
    assert tab.session not in json.dumps(rec)
    ran = detail(rec, "execution")
    assert ran["idempotency_key"] == card.last["confirm_id"]
    assert ran["outcome"] == "ok" and ran["attempts"] == 1 and ran["duration_ms"] >= 0
    # The decision in force is the re-check's: it went to ss-tools with the call.
    assert rec["decision_id"] == ran["decision_id"] == recheck["decision_id"]
    assert rec["outcome"] == "ok" and rec["owner"] == "alice"
    lines = stack.audit(operation="deploy_dashboard")
    assert [(a["outcome"], a["decision_id"], a["idempotency_key"]) for a in lines] == [
        ("ok", recheck["decision_id"], card.last["confirm_id"])]
    assert [a["decision_id"] for a in stack.audit(decision_id=rec["decision_id"])] == [
        rec["decision_id"]]


def test_a_denied_deploy_records_the_answer_and_why_it_did_not_run(audit_stack: Stack) -> None:
    stack, alice = audit_stack, audit_stack.token("alice")
    tab, card = carded(stack, alice)
    turn(stack, alice, "__resume__", tab, card.conversation_id, "deny")
    rec = one_record(stack, alice, card.conversation_id or "")
    assert stages(rec) == ["decision", "card", "answer", "not_run"]
    assert detail(rec, "answer")["result"] == "denied"
    assert detail(rec, "not_run")["reason"] == "denied"
    assert rec["outcome"] == "not_run:denied"


def test_a_new_message_over_a_card_is_its_answer(audit_stack: Stack) -> None:
    stack, alice = audit_stack, audit_stack.token("alice")
    tab, card = carded(stack, alice)
    turn(stack, alice, "привет", tab, card.conversation_id)
    rec = one_record(stack, alice, card.conversation_id or "")
    assert stages(rec) == ["decision", "card", "answer", "not_run"]
    answer = detail(rec, "answer")
    assert (answer["by"], answer["action"], answer["result"]) == ("alice", "new_message",
                                                                   "denied")
    assert detail(rec, "not_run")["reason"] == "denied"


def test_an_expired_card_records_the_late_answer(audit_stack: Stack) -> None:
    stack, alice = audit_stack, audit_stack.token("alice")
    tab, card = carded(stack, alice)
    time.sleep(TTL_S + 0.5)
    late = turn(stack, alice, "__resume__", tab, card.conversation_id, "confirm")
    assert [e["result"] for e in late.of("confirm_resolved")] == ["expired"]
    rec = one_record(stack, alice, card.conversation_id or "")
    assert stages(rec) == ["decision", "card", "answer", "not_run"]
    assert (detail(rec, "answer")["result"], detail(rec, "not_run")["reason"]) == (
        "expired", "expired")
    assert "deploy_dashboard" not in [a["operation"] for a in stack.audit(
        decision_id=rec["decision_id"])]


def test_a_permission_denied_card_records_the_sidecars_deny(audit_stack: Stack) -> None:
    stack, carol = audit_stack, audit_stack.token("carol")
    tab, card = carded(stack, carol)
    assert card.last["permission_granted"] is False
    turn(stack, carol, "__resume__", tab, card.conversation_id, "deny")
    rec = one_record(stack, carol, card.conversation_id or "")
    assert stages(rec) == ["decision", "card", "answer", "not_run"]
    assert detail(rec, "decision")["decision"] == "deny"
    assert detail(rec, "card")["permission_granted"] is False
    assert detail(rec, "not_run")["reason"] == "permission_denied"
    assert rec["owner"] == "carol"


def test_a_role_revoked_while_the_card_waited_is_a_second_decision(audit_stack: Stack) -> None:
    stack = audit_stack
    before = stack.token("frank", ["editor"])
    tab, card = carded(stack, before)
    after = stack.token("frank", ["viewer"])
    tab.headers["Authorization"] = f"Bearer {after}"
    turn(stack, after, "__resume__", tab, card.conversation_id, "confirm")
    rec = one_record(stack, after, card.conversation_id or "")
    assert stages(rec) == ["decision", "card", "decision", "answer", "not_run"]
    assert detail(rec, "decision", 1)["decision"] == "deny"
    assert detail(rec, "not_run")["reason"] == "revoked"


def test_an_uncarded_write_is_a_decision_and_an_execution(audit_stack: Stack) -> None:
    stack, alice = audit_stack, audit_stack.token("alice")
    tab = RawChat(stack.agent.url, alice, None)  # type: ignore[arg-type]
    # (no dashboard named: a prefetch's output would make the turn untrusted, and a card due)
    done = turn(stack, alice, "обнови датасет 5 в ss-dev", tab)
    assert done.kind == "final" and done.of("tool_end"), done.types()
    got = records(stack, alice, conversation_id=done.conversation_id)
    assert [(r["tool"], r["environment"], stages(r)) for r in got] == [
        ("refresh_dataset", "ss-dev", ["decision", "execution"])]
    assert detail(got[0], "decision")["decision"] == "allow"
    assert got[0]["args_hash"] == args_digest({"dataset_id": 5, "env_id": "ss-dev"})
    line = stack.audit(decision_id=got[0]["decision_id"])
    assert [(a["operation"], a["env"], a["outcome"]) for a in line] == [
        ("refresh_dataset", "ss-dev", "ok")]


# -- one card for several calls (issue 34 item 8) ----------------------------------------------

# One model message, three prod deploys: the offline planner makes one call per clause.
THREE = "задеплой дашборд 41 в прод; задеплой дашборд 42 в прод; задеплой дашборд 43 в прод"


def confirm(stack: Stack, token: str, tab: RawChat, cid: str | None,
            approve: list[str] | None = None) -> Outcome:
    message = {"text": "__resume__", "files": [],
               **({"approve": approve} if approve is not None else {})}
    return say(stack.agent, token, message, "confirm", cid, tab=tab, timeout=60)


def batched(stack: Stack, token: str) -> tuple[RawChat, Outcome, list[dict[str, Any]]]:
    """Three write calls of one message: one card listing them, the first's fields on top."""
    stack.reset_sandbox()
    tab, card = carded(stack, token, THREE)
    assert len(card.of("confirm_required")) == 1, card.types()
    calls = card.last["calls"]
    assert [(c["tool_name"], c["arguments"]) for c in calls] == [
        ("deploy_dashboard", {"dashboard_id": n, "env_id": "prod"}) for n in (41, 42, 43)]
    assert all(c["title"] and c["prompt"] and c["risk"] for c in calls)
    assert (card.last["call_id"], card.last["tool_args"], card.last["confirm_id"]) == (
        calls[0]["call_id"], calls[0]["arguments"], calls[0]["confirm_id"])
    assert len({c["confirm_id"] for c in calls}) == 3
    return tab, card, calls


def card_in_history(stack: Stack, token: str, cid: str) -> dict[str, Any]:
    items = httpx.get(stack.agent.url + "/api/assistant/history", timeout=10,
                      params={"conversation_id": cid, "limit": 100},
                      headers={"Authorization": f"Bearer {token}"}).json()["items"]
    (got,) = [c for m in items for c in m.get("confirmations") or []]
    return dict(got)


def test_one_card_for_three_writes_and_only_the_approved_run(audit_stack: Stack) -> None:
    stack, alice = audit_stack, audit_stack.token("alice")
    tab, card, calls = batched(stack, alice)
    cid = card.conversation_id or ""
    ids = [c["call_id"] for c in calls]

    # An id not on the card: refused, and the card still waits with nothing run.
    bad = confirm(stack, alice, tab, cid, [ids[0], "call_not_on_the_card"])
    assert (bad.kind, bad.last.get("code")) == ("error", "INVALID_REQUEST"), bad.types()
    with_deny = say(stack.agent, alice, {"text": "__resume__", "files": [], "approve": ids},
                    "deny", cid, tab=tab, timeout=60)
    assert with_deny.last.get("code") == "INVALID_REQUEST", with_deny.types()
    assert stack.audit(operation="deploy_dashboard") == []
    assert card_in_history(stack, alice, cid)["status"] == "pending"

    done = confirm(stack, alice, tab, cid, [ids[0], ids[2]])
    assert done.kind == "final", done.types()
    (resolved,) = done.of("confirm_resolved")
    assert resolved["result"] == "confirmed"
    assert [(c["call_id"], c["result"]) for c in resolved["calls"]] == list(zip(
        ids, ["confirmed", "denied", "confirmed"], strict=True))
    assert [e["call_id"] for e in done.of("tool_end")] == [ids[0], ids[2]]
    # Each approved call ran once, with its own key; the denied one never reached ss-tools.
    lines = stack.audit(operation="deploy_dashboard")
    assert sorted((a["outcome"], a["idempotency_key"]) for a in lines) == sorted(
        ("ok", calls[i]["confirm_id"]) for i in (0, 2))

    by_call = {r["call_id"]: r for r in records(stack, alice, conversation_id=cid)}
    for i in (0, 2):
        assert stages(by_call[ids[i]]) == ["decision", "card", "decision", "answer",
                                           "execution"]
        assert detail(by_call[ids[i]], "answer")["result"] == "confirmed"
        assert detail(by_call[ids[i]], "card")["calls"] == 3
    assert stages(by_call[ids[1]]) == ["decision", "card", "answer", "not_run"]
    assert detail(by_call[ids[1]], "answer")["result"] == "denied"
    assert detail(by_call[ids[1]], "not_run")["reason"] == "denied"

    shown = card_in_history(stack, alice, cid)
    assert shown["status"] == "confirmed"
    assert [c["result"] for c in shown["card"]["calls"]] == ["confirmed", "denied",
                                                             "confirmed"]


def test_a_plain_confirm_of_a_batched_card_runs_every_call(audit_stack: Stack) -> None:
    stack, alice = audit_stack, audit_stack.token("alice")
    tab, card, calls = batched(stack, alice)
    done = confirm(stack, alice, tab, card.conversation_id)
    assert done.kind == "final", done.types()
    assert [e["call_id"] for e in done.of("tool_end")] == [c["call_id"] for c in calls]
    assert sorted(a["idempotency_key"] for a in audit_ok(stack, operation="deploy_dashboard")
                  ) == sorted(c["confirm_id"] for c in calls)


def test_a_call_stopped_while_it_runs_is_recorded_as_cancelled(audit_stack: Stack) -> None:
    stack, alice = audit_stack, audit_stack.token("alice")
    stack.fault(operation="refresh_dataset", delay_s=5, times=1)  # it runs until we stop it

    async def stop_at_tool_start() -> Outcome:
        async with httpx.AsyncClient() as http:
            tab = RawChat(stack.agent.url, alice, http)
            started = asyncio.Event()
            box: dict[str, Outcome] = {}

            def on_event(out: Outcome) -> None:
                box["out"] = out
                if out.of("tool_start"):
                    started.set()

            run = asyncio.create_task(tab.submit("обнови датасет 6 в ss-dev", on_event=on_event))
            await asyncio.wait_for(started.wait(), 30)
            await tab.cancel(box["out"])
            await asyncio.wait_for(run, 30)
            return box["out"]

    out = asyncio.run(stop_at_tool_start())
    deadline = time.monotonic() + 20
    while True:  # the row is written as the stop unwinds the turn: poll, bounded
        got = records(stack, alice, conversation_id=out.conversation_id)
        if (got and "execution" in stages(got[0])) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [(r["tool"], stages(r)) for r in got] == [
        ("refresh_dataset", ["decision", "execution"])], got
    assert got[0]["outcome"] == "cancelled"
    assert detail(got[0], "execution")["decision_id"] == got[0]["decision_id"]


def test_the_calls_above_are_counted_in_the_metrics(audit_stack: Stack) -> None:
    """Labels are outcomes and tool names only (no user or conversation ids)."""
    text = httpx.get(audit_stack.agent.url + "/metrics", timeout=10).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("agentchat_cards_total", "agentchat_agent_policy_decisions_total",
                            "agentchat_tool_calls_total", "agentchat_card_answer_seconds_count",
                            "agentchat_agent_policy_seconds_count",
                            "agentchat_tool_call_seconds_count")):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    # shown: confirmed, denied, new message, expired, permission-denied, revoked; all answered
    assert values['agentchat_cards_total{outcome="shown"}'] >= 6, values
    assert values['agentchat_cards_total{outcome="confirmed"}'] >= 1
    assert values['agentchat_cards_total{outcome="denied"}'] >= 4
    assert values['agentchat_cards_total{outcome="expired"}'] >= 1
    assert values["agentchat_card_answer_seconds_count"] >= 6
    assert values['agentchat_agent_policy_decisions_total{outcome="confirm"}'] >= 6
    assert values['agentchat_agent_policy_decisions_total{outcome="deny"}'] >= 2
    assert values['agentchat_agent_policy_decisions_total{outcome="allow"}'] >= 1
    assert values["agentchat_agent_policy_seconds_count"] >= 8
    assert values['agentchat_tool_calls_total{outcome="ok",tool="deploy_dashboard"}'] >= 1
    assert values['agentchat_tool_calls_total{outcome="ok",tool="refresh_dataset"}'] >= 1
    assert values['agentchat_tool_call_seconds_count{tool="deploy_dashboard"}'] >= 1
    assert not any(u in name for name in values for u in ("alice", "carol", "conversation"))


# -- who sees what ----------------------------------------------------------------------------

def test_owners_see_their_own_and_the_audit_role_sees_by_environment(audit_stack: Stack) -> None:
    stack = audit_stack
    alice, carol = stack.token("alice"), stack.token("carol")
    mine = records(stack, alice, limit=100)
    assert mine and {r["owner"] for r in mine} == {"alice"}
    assert records(stack, alice, user="carol") == [], "another user's records are invisible"
    carols = records(stack, carol)
    assert carols and {r["owner"] for r in carols} == {"carol"}
    assert not {r["conversation_id"] for r in carols} & {r["conversation_id"] for r in mine}
    everyone = records(stack, stack.token("dora", ["auditor"]), limit=100)
    assert {r["owner"] for r in everyone} >= {"alice", "carol", "frank"}
    dev_only = records(stack, stack.token("erin", ["auditor@ss-dev"]), limit=100)
    assert dev_only and {r["environment"] for r in dev_only} == {"ss-dev"}
    assert len(dev_only) == len([r for r in everyone if r["environment"] == "ss-dev"])
    # the filters narrow, never widen
    prod = records(stack, stack.token("dora", ["auditor"]), environment="prod", user="alice")
    assert prod and {(r["environment"], r["owner"]) for r in prod} == {("prod", "alice")}
    assert records(stack, stack.token("erin", ["auditor@ss-dev"]), environment="prod") == []


def test_pages_are_keyset_and_bad_input_is_invalid_request(audit_stack: Stack) -> None:
    stack, auditor = audit_stack, audit_stack.token("dora", ["auditor"])
    everyone = records(stack, auditor, limit=100)
    seen, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        resp = httpx.get(stack.agent.url + "/api/agent/audit", params=params, timeout=10,
                         headers={"Authorization": f"Bearer {auditor}"}).json()
        seen += [(r["conversation_id"], r["call_id"]) for r in resp["items"]]
        cursor = resp["next_cursor"]
        if cursor is None:
            break
    assert seen == [(r["conversation_id"], r["call_id"]) for r in everyone]
    firsts = [r["stages"][0]["seq"] for r in everyone]
    assert firsts == sorted(firsts, reverse=True), "newest first"
    later = records(stack, auditor, since=everyone[0]["started_at"])
    assert [r["call_id"] for r in later] == [everyone[0]["call_id"]]
    for bad in ({"cursor": "bm9wZQ"}, {"since": "2026-12-01T10:00:00"}, {"limit": 0}):
        resp = httpx.get(stack.agent.url + "/api/agent/audit", params=bad, timeout=10,
                         headers={"Authorization": f"Bearer {auditor}"})
        assert resp.status_code in (400, 422) and resp.json()["code"] == "INVALID_REQUEST", (
            bad, resp.text)
    assert httpx.get(stack.agent.url + "/api/agent/audit", timeout=10).status_code == 401


# -- export, verify, tampering, retention (last: it edits the database) ---------------------

def test_export_verify_tampering_and_retention(audit_stack: Stack, tmp_path: Path) -> None:
    stack = audit_stack
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    out = tmp_path / "audit.jsonl"
    done = cli(stack, "export", "--since", since, "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = out.read_text().splitlines()
    rows = [json.loads(line) for line in lines[1:-1]]
    assert json.loads(lines[0]) == {"kind": "anchor", "seq": 0, "hash": GENESIS}
    assert len(rows) >= 20 and all(r["kind"] == "row" for r in rows)
    ok = cli(stack, "verify", str(out))
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"] is True, ok.stdout
    assert json.loads(ok.stdout)["rows"] == len(rows)

    # one line edited: its own hash fails, and verify names that line
    edited = list(lines)
    row = json.loads(edited[5])
    row["detail"]["decision"] = "allow" if row["detail"].get("decision") != "allow" else "deny"
    edited[5] = json.dumps(row, ensure_ascii=False)
    bad = tmp_path / "edited.jsonl"
    bad.write_text("\n".join(edited) + "\n")
    found = cli(stack, "verify", str(bad))
    assert found.returncode == 1, found.stdout
    assert (json.loads(found.stdout)["line"], json.loads(found.stdout)["seq"]) == (6, row["seq"])
    # one line deleted: the next line names the missing row
    cut = tmp_path / "deleted.jsonl"
    cut.write_text("\n".join(lines[:7] + lines[8:]) + "\n")
    found = cli(stack, "verify", str(cut))
    assert found.returncode == 1 and json.loads(found.stdout)["seq"] == rows[6]["seq"], (
        found.stdout)
    # the last row's line deleted: the end line gives it away
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines[:-2] + lines[-1:]) + "\n")
    assert cli(stack, "verify", str(short)).returncode == 1

    # the database: one row edited, then one deleted (and each put back)
    db_ok = cli(stack, "verify", "--db")
    assert db_ok.returncode == 0 and json.loads(db_ok.stdout)["ok"], db_ok.stdout
    victim = rows[3]
    sql(stack, "UPDATE audit_rows SET environment = 'ss-dev' WHERE seq = %s", victim["seq"])
    found = cli(stack, "verify", "--db")
    assert found.returncode == 1 and json.loads(found.stdout)["seq"] == victim["seq"], (
        found.stdout)
    # (put back, then deleted: the first broken link is again this row, now as missing)
    sql(stack, "UPDATE audit_rows SET environment = %s WHERE seq = %s", victim["environment"],
        victim["seq"])
    sql(stack, "DELETE FROM audit_rows WHERE seq = %s", victim["seq"])
    found = cli(stack, "verify", "--db")
    assert found.returncode == 1 and json.loads(found.stdout)["seq"] == victim["seq"], (
        found.stdout)
    assert "missing" in json.loads(found.stdout)["reason"], found.stdout
    reinsert(stack, victim)
    with psycopg.connect(stack.database_url, autocommit=True) as conn, pytest.raises(
            psycopg.errors.RaiseException):
        # the append-only trigger refuses an edit or a deletion made without disabling it
        conn.execute("DELETE FROM audit_rows WHERE seq = %s", (victim["seq"],))
    last = rows[-1]
    sql(stack, "DELETE FROM audit_rows WHERE seq = %s", last["seq"])
    tail = cli(stack, "verify", "--db")
    assert tail.returncode == 1 and "head" in json.loads(tail.stdout)["reason"], tail.stdout
    reinsert(stack, last)
    assert cli(stack, "verify", "--db").returncode == 0

    # retention: cut the first half; the chain verifies from its anchor, in the database and
    # in a new export
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        middle = conn.execute("SELECT at FROM audit_rows ORDER BY seq OFFSET %s LIMIT 1",
                              (len(rows) // 2,)).fetchone()
    assert middle is not None
    pruned = cli(stack, "prune", "--before", middle[0].isoformat())
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout)["deleted"] >= 1
    after = cli(stack, "verify", "--db")
    assert after.returncode == 0, after.stdout
    verdict = json.loads(after.stdout)
    assert verdict["first_seq"] == json.loads(pruned.stdout)["anchor_seq"] + 1
    again = tmp_path / "after-cut.jsonl"
    assert cli(stack, "export", "--since", since, "--out", str(again)).returncode == 0
    anchor = json.loads(again.read_text().splitlines()[0])
    assert anchor["seq"] == json.loads(pruned.stdout)["anchor_seq"] and anchor["hash"] != GENESIS
    assert cli(stack, "verify", str(again)).returncode == 0
    # the records that lost rows to the cut are still read, from what is left
    assert records(stack, stack.token("dora", ["auditor"]), limit=100)


# -- the chain's arithmetic, property-based ------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12)
ARGS = st.dictionaries(st.text(max_size=10), JSON, max_size=6)


def _shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(ARGS, st.integers(0, 2**32))
def test_the_canonical_hash_ignores_key_order_and_is_the_sidecars_digest(
        args: dict[str, Any], seed: int) -> None:
    other = _shuffled(args, random.Random(seed))
    assert canonical(other) == canonical(args)
    assert args_digest(other) == args_digest(args)
    assert args_digest(args) == "sha256:" + hashlib.sha256(canonical(args)).hexdigest()


def _chain(details: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows, last = [], GENESIS
    for n, d in enumerate(details, 1):
        row = {"seq": n, "at": f"2026-12-01T10:00:{n % 60:02d}.000000+00:00",
               "stage": "decision", "conversation_id": "c", "owner": "alice", "turn_id": "t",
               "call_id": f"call_{n}", "tool": "deploy_dashboard", "environment": "prod",
               "args_hash": args_digest(d), "detail": d, "prev_hash": last}
        row["hash"] = last = row_hash(row)
        rows.append(row)
    return rows


def _lines(rows: list[dict[str, Any]]) -> list[str]:
    end = {"kind": "end", "seq": rows[-1]["seq"] if rows else 0,
           "hash": rows[-1]["hash"] if rows else GENESIS, "rows": len(rows)}
    return [json.dumps({"kind": "anchor", "seq": 0, "hash": GENESIS}),
            *(json.dumps({"kind": "row", **r}) for r in rows), json.dumps(end)]


@settings(max_examples=60, deadline=None)
@given(st.lists(ARGS, min_size=1, max_size=8), st.data())
def test_any_one_edit_or_deletion_is_found_where_it_is(details: list[dict[str, Any]],
                                                        data: st.DataObject) -> None:
    rows = _chain(details)
    assert check_rows(rows, anchor_seq=0, anchor_hash=GENESIS)[0] is None
    assert verify_file(_lines(rows)).ok
    i = data.draw(st.integers(0, len(rows) - 1))
    field = data.draw(st.sampled_from(["stage", "owner", "tool", "environment", "args_hash",
                                       "detail", "at", "call_id"]))
    edited = [dict(r) for r in rows]
    edited[i][field] = {"x": 1} if field == "detail" and edited[i][field] != {"x": 1} else (
        "tampered" if edited[i][field] != "tampered" else "other")
    broken = check_rows(edited, anchor_seq=0, anchor_hash=GENESIS)[0]
    assert broken is not None and (broken.position, broken.seq) == (i + 1, i + 1)
    verdict = verify_file(_lines(rows)[:1] + _lines(edited)[1:-1] + _lines(rows)[-1:])
    assert not verdict.ok and verdict.line == i + 2 and verdict.seq == i + 1
    # a deleted line: named at the row after it, or by the end line when it was the last
    lines = _lines(rows)
    verdict = verify_file(lines[:i + 1] + lines[i + 2:])
    assert not verdict.ok and verdict.seq == i + 1, verdict
