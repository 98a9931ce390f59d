"""Approvals by someone else (issue 34), from outside: real sandbox, sidecar, agent and
PostgreSQL, the offline model, the REST API as an approver's client would call it.

- bob asks a prod deploy (mode `other`): the card carries `approval` and his Confirm is refused;
  alice approves through `POST /api/agent/approvals/{id}` with the card's digest; the turn
  resumes as a new run (bob's tab joins it); the sandbox shows one deploy; the audit record
  has both people.
- The refusals: bob approving his own (under any spelling of his subject), carol (no approver
  role: NOT_FOUND before any other refusal), a wrong digest, a second answer, after expiry,
  after bob cancelled: each its code, and nothing changes.
- Quorum 2: one approval leaves it pending, the second person's runs it.
- A time-boxed grant covers a second identical call in a clean context (no card, audited with
  the grant); after a prefetch (ss-tools text in the context) the requester's own card still
  shows, saying why, its record naming both; not a call on another object; revoked, it stops
  covering at once, a card shown under it included.
- The inbox: pending, answered and expired lists, never one's own requests, keyset pages; one
  approval with its context.
- The panel's approvals pages (approvals/, approvals/{id}) are its index.html with its CSP; in
  Chromium the requester's card links to its page, the approver answers there.
- Notifications: a real HTTP receiver gets the signed webhook of a request, an answer, an
  escalation and an expiry; down for a while, it gets them after it comes back, once per
  notification id; a real SMTP server (aiosmtpd) gets the e-mail with the link.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiosmtpd.controller import Controller

from agentchat.settings import PACKAGE_DATA
from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import rows, say, wait_for
from testkit.stack import Stack, stack_on_own_database
from testkit.support import Service, free_port, script_model, stub_model_env

SECRET = "approvals-webhook-secret"
UNTRUSTED = "confirmation_required_untrusted"
FORKED = "confirmation_required_forked"
DEPLOY_42 = {"name": "deploy_dashboard", "args": {"dashboard_id": 42, "env_id": "prod"}}

# Prod deploys and migrations: one approver; prod deletes: two; ss-stage deploys expire in 3 s.
APPROVALS = """
rules:
  - tools: [deploy_dashboard, start_migration]
    environments: [prod]
    mode: other
    approvers: [approver, admin]
    grant_max_minutes: 60
  - tools: [destructive]
    environments: [prod]
    mode: other
    approvers: [approver, admin]
    quorum: 2
  - tools: [deploy_dashboard]
    environments: [ss-stage]
    mode: other
    approvers: [approver, admin]
    expires_after_minutes: 0.05
    escalate_after_minutes: 0.02
"""


class Receiver:
    """A real HTTP server taking webhooks; `down()` closes its socket, `up()` reopens it on the
    same port (a receiver restarting)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.server: ThreadingHTTPServer | None = None

    def up(self) -> None:
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                got.append(({k.lower(): v for k, v in self.headers.items()}, raw))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[dict[str, Any]]:
        """Every delivery's body, after checking its signature."""
        out = []
        for headers, raw in list(self.got):
            stamp = headers["x-agentchat-timestamp"]
            mac = hmac.new(SECRET.encode(), stamp.encode() + b"." + raw, hashlib.sha256)
            assert headers["x-agentchat-signature"] == "sha256=" + mac.hexdigest()
            assert abs(time.time() - int(stamp)) < 120
            out.append(json.loads(raw))
        return out


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


def eventually(check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.up()
    yield r
    if r.server is not None:
        r.down()


@pytest.fixture(scope="module")
def mailbox() -> Iterator[tuple[Mailbox, int]]:
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()


def module_catalog(tmp: Path) -> Path:
    """The shipped catalog whose deploys take a `comment`, free text (a grant leaves it out),
    and whose maintenance windows time out after 1 s."""
    data = yaml.safe_load((PACKAGE_DATA / "catalog.yaml").read_text())
    tools = {t["name"]: t for t in data["tools"]}
    tools["deploy_dashboard"]["args"]["properties"]["comment"] = {"type": "string",
                                                                  "maxLength": 200}
    tools["deploy_dashboard"]["free_text"] = ["comment"]
    tools["start_maintenance"]["timeout_s"] = 1
    path = tmp / "catalog.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str, migrated_template: str,
          receiver: Receiver, mailbox: tuple[Mailbox, int]) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("approvals")
    policy = tmp / "policy"
    shutil.copytree(PACKAGE_DATA / "policy", policy)
    (policy / "approvals.yaml").write_text(APPROVALS)
    with stack_on_own_database(
            pg_server, migrated_template, tmp, catalog_path=module_catalog(tmp),
            policy_env={"AGENTCHAT_POLICY_DIR": str(policy)},
            AGENTCHAT_AGENT_APPROVAL_WEBHOOK_URL=f"http://127.0.0.1:{receiver.port}/hook",
            AGENTCHAT_AGENT_APPROVAL_WEBHOOK_SECRET=SECRET,
            AGENTCHAT_AGENT_SMTP_URL=f"smtp://127.0.0.1:{mailbox[1]}",
            AGENTCHAT_AGENT_SMTP_FROM="agentchat@example.com",
            AGENTCHAT_AGENT_APPROVAL_EMAIL_TO=json.dumps({"prod": ["ops@example.com"]}),
            AGENTCHAT_AGENT_APPROVAL_ESCALATION_EMAIL_TO=json.dumps(
                {"*": ["oncall@example.com"]}),
            AGENTCHAT_AGENT_PUBLIC_URL="https://ss.example.com",
            AGENTCHAT_AGENT_TUNING__OUTBOX_POLL_S="0.2",
            AGENTCHAT_AGENT_TUNING__OUTBOX_RETRY_S="0.3") as s:
        yield s


@pytest.fixture(scope="module")
def scripted(stack: Stack, model: Service) -> Iterator[Service]:
    """A second agent on the same stack whose model says what a test scripts: calls exactly
    as written, no prefetch (testkit/openai_stub.py)."""
    svc = stack.start_agent(**stub_model_env(model))
    yield svc
    svc.stop()


def stage(stack: Stack, token: str, cid: str | None, name: str) -> dict[str, Any]:
    """The first `name` stage of the conversation's one audit record."""
    recs = get(stack, token, "audit", conversation_id=cid).json()["items"]
    assert len(recs) == 1, recs
    return next(st["detail"] for st in recs[0]["stages"] if st["stage"] == name)


def people(stack: Stack) -> dict[str, str]:
    return {"bob": stack.token("bob", ["editor", "admin@prod"]),
            "alice": stack.token("alice", ["admin"]),
            "dave": stack.token("dave", ["approver@prod", "admin@prod"]),
            "carol": stack.token("carol", ["editor"]),
            # An approver who may not deploy: may deny, not approve (it would run as erin).
            "erin": stack.token("erin", ["approver@prod", "viewer"])}


def ask(stack: Stack, token: str, text: str,
        agent: Service | None = None) -> tuple[RawChat, Outcome]:
    agent = agent or stack.agent
    tab = RawChat(agent.url, token, None)  # type: ignore[arg-type]
    out = say(agent, token, text, tab=tab, timeout=60)
    assert out.kind == "confirm_required", out.types()
    return tab, out


def answer(stack: Stack, token: str, approval_id: str, agent: Service | None = None,
           **body: Any) -> httpx.Response:
    """An approver's answer; the turn resumes on `agent` (default the stack's own)."""
    url = (agent or stack.agent).url
    return httpx.post(f"{url}/api/agent/approvals/{approval_id}", json=body,
                      headers={"Authorization": f"Bearer {token}"}, timeout=30)


def get(stack: Stack, token: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(f"{stack.agent.url}/api/agent/{path}", params=params, timeout=30,
                     headers={"Authorization": f"Bearer {token}"})


def deploys(stack: Stack, env: str = "prod") -> list[dict[str, Any]]:
    return [a for a in stack.audit(operation="deploy_dashboard")
            if a["env"] == env and a["outcome"] == "ok"]


def wait_run(stack: Stack, token: str, cid: str, run_id: str) -> Outcome:
    """The resumed run as the requester's tab sees it: /active names it, a join follows it."""
    active = get(stack, token, f"conversations/{cid}/active").json()
    assert active["run"]["run_id"] == run_id, active
    joined = say(stack.agent, token, {"text": "", "files": [], "action": "join",
                                      "conversation_id": cid, "run_id": run_id}, timeout=60)
    assert joined.kind == "final", joined.types()
    return joined


def test_four_eyes_someone_else_approves_and_it_runs_once(stack: Stack) -> None:
    who = people(stack)
    stack.reset_sandbox()
    tab, card = ask(stack, who["bob"], "задеплой дашборд 42 в прод")
    approval = card.last["approval"]
    assert approval["mode"] == "other" and approval["quorum"] == 1
    assert approval["approvers"] == ["approver", "admin"]
    assert approval["approval_id"] == card.last["confirm_id"]
    assert approval["approve_url"].endswith("/approvals/" + approval["approval_id"])
    assert approval["args_digest"].startswith("sha256:")
    # Four hours, not the five-minute card TTL.
    assert card.last["expires_at"] == approval["expires_at"]
    cid = card.conversation_id or ""
    # bob cannot confirm it himself in the chat.
    mine = say(stack.agent, who["bob"], "__resume__", "confirm", cid, tab=tab, timeout=60)
    assert mine.kind == "error" and mine.last["code"] == "FORBIDDEN", mine.types()
    assert deploys(stack) == []
    # alice approves with the card's digest: the turn resumes as a new run, and runs once.
    got = answer(stack, who["alice"], approval["approval_id"], decision="approve",
                 args_digest=approval["args_digest"], comment="change 1234")
    assert got.status_code == 200, got.text
    body = got.json()
    assert (body["status"], body["approvals"], body["quorum"]) == ("approved", 1, 1)
    assert body["run_id"]
    joined = wait_run(stack, who["bob"], cid, body["run_id"])
    assert [e["result"] for e in joined.of("confirm_resolved")] == ["confirmed"]
    assert [e["tool"] for e in joined.of("tool_end")] == ["deploy_dashboard"]
    ran = deploys(stack)
    assert len(ran) == 1 and ran[0]["idempotency_key"] == approval["approval_id"]
    # The audit record joins both people: bob asked, alice approved, then it ran.
    recs = get(stack, who["bob"], "audit", conversation_id=cid).json()["items"]
    assert len(recs) == 1
    rec = recs[0]
    assert rec["owner"] == "bob" and rec["outcome"] == "ok"
    # (its notifications' stages, interleaved as they are delivered, are checked below)
    own = [st for st in rec["stages"] if st["stage"] != "notification"]
    stages = [(st["stage"], st["detail"].get("kind") or st["detail"].get("by")) for st in own]
    assert stages == [("decision", "check"), ("card", None), ("decision", "approver_check"),
                      ("answer", "alice"), ("execution", None)]
    rec["stages"] = own
    shown = rec["stages"][1]["detail"]["approval"]
    assert shown["mode"] == "other" and shown["approval_id"] == approval["approval_id"]
    said = rec["stages"][3]["detail"]
    assert (said["channel"], said["action"], said["result"], said["comment"]) == (
        "rest", "approve", "approved", "change 1234")
    assert rec["stages"][4]["detail"]["decision_id"] == rec["stages"][2]["detail"]["decision_id"]
    # A second answer, now that it ran: refused, and nothing runs again.
    again = answer(stack, who["dave"], approval["approval_id"], decision="approve",
                   args_digest=approval["args_digest"])
    assert (again.status_code, again.json()["code"]) == (409, "NO_PENDING_CONFIRMATION")
    assert len(deploys(stack)) == 1


def refused(resp: httpx.Response, status: int, code: str) -> None:
    assert (resp.status_code, resp.json().get("code")) == (status, code), resp.text


def test_the_refusals_change_nothing(stack: Stack) -> None:
    who = people(stack)
    stack.reset_sandbox()
    tab, card = ask(stack, who["bob"], "задеплой дашборд 43 в прод")
    approval = card.last["approval"]
    aid, digest = approval["approval_id"], approval["args_digest"]
    refused(answer(stack, who["bob"], aid, decision="approve", args_digest=digest),
            403, "FORBIDDEN")
    # bob under another spelling of his subject is still bob (casefold + NFKC).
    for alias in ("Bob", "ＢＯＢ"):
        as_bob = stack.token(alias, ["approver", "admin"])
        refused(answer(stack, as_bob, aid, decision="approve", args_digest=digest),
                403, "FORBIDDEN")
        assert aid not in [i["approval_id"] for i in get(stack, as_bob, "approvals").json()[
            "items"]], "never one's own in one's inbox"
    # Someone who may not see it (no approver role) learns nothing else: NOT_FOUND before
    # any other refusal, a wrong digest or a grant included (no digest oracle).
    for body in ({"args_digest": digest}, {"args_digest": "sha256:" + "0" * 64},
                 {"args_digest": digest, "grant_minutes": 1440}):
        refused(answer(stack, who["carol"], aid, decision="approve", **body), 404, "NOT_FOUND")
    refused(answer(stack, who["erin"], aid, decision="approve", args_digest=digest),
            403, "FORBIDDEN")
    refused(answer(stack, who["alice"], aid, decision="approve",
                   args_digest="sha256:" + "0" * 64), 409, "STALE_CONFIRMATION")
    refused(answer(stack, who["alice"], aid, decision="maybe", args_digest=digest),
            422, "INVALID_REQUEST")
    refused(answer(stack, who["alice"], "no-such-approval", decision="approve",
                   args_digest=digest), 404, "NOT_FOUND")
    refused(get(stack, who["alice"], "approvals/a%00b"), 404, "NOT_FOUND")
    one = get(stack, who["alice"], f"approvals/{aid}").json()
    assert one["status"] == "pending" and one["answers"] == []
    # bob cancels (denies his own card): a later approval runs nothing.
    cid = card.conversation_id or ""
    cancelled = say(stack.agent, who["bob"], "__resume__", "deny", cid, tab=tab, timeout=60)
    assert [e["result"] for e in cancelled.of("confirm_resolved")] == ["denied"]
    refused(answer(stack, who["alice"], aid, decision="approve", args_digest=digest),
            409, "NO_PENDING_CONFIRMATION")
    assert get(stack, who["alice"], f"approvals/{aid}").json()["status"] == "cancelled"
    # After expiry (ss-stage approvals live 3 s here).
    _, late = ask(stack, who["bob"], "задеплой дашборд 44 в ss-stage")
    stale = late.last["approval"]
    time.sleep(3.5)
    refused(answer(stack, who["alice"], stale["approval_id"], decision="approve",
                   args_digest=stale["args_digest"]), 409, "APPROVAL_EXPIRED")
    assert deploys(stack) == [] and deploys(stack, "ss-stage") == []


def test_quorum_two_needs_two_people(stack: Stack) -> None:
    who = people(stack)
    stack.reset_sandbox()
    _, card = ask(stack, who["bob"], "удали дашборд 45 в прод")
    approval = card.last["approval"]
    aid, digest = approval["approval_id"], approval["args_digest"]
    assert approval["quorum"] == 2
    first = answer(stack, who["alice"], aid, decision="approve", args_digest=digest)
    assert first.status_code == 200 and first.json()["status"] == "pending", first.text
    assert first.json()["run_id"] is None
    refused(answer(stack, who["alice"], aid, decision="approve", args_digest=digest),
            409, "ALREADY_ANSWERED")
    refused(answer(stack, stack.token("ALICE", ["admin"]), aid, decision="approve",
                   args_digest=digest), 409, "ALREADY_ANSWERED")  # the same person
    assert [a for a in stack.audit(operation="delete_dashboard") if a["outcome"] == "ok"] == []
    second = answer(stack, who["dave"], aid, decision="approve", args_digest=digest)
    assert second.status_code == 200, second.text
    assert (second.json()["status"], second.json()["approvals"]) == ("approved", 2)
    joined = wait_run(stack, who["bob"], card.conversation_id or "", second.json()["run_id"])
    assert [e["tool"] for e in joined.of("tool_end")] == ["delete_dashboard"]
    ran = [a for a in stack.audit(operation="delete_dashboard") if a["outcome"] == "ok"]
    assert len(ran) == 1 and ran[0]["user_actor"] == "dave"


def test_an_approver_deny_ends_it_and_the_inbox_lists_what_one_may_answer(
        stack: Stack) -> None:
    who = people(stack)
    stack.reset_sandbox()
    _, one = ask(stack, who["bob"], "задеплой дашборд 46 в прод")
    _, two = ask(stack, who["bob"], "задеплой дашборд 47 в прод")
    ids = [one.last["confirm_id"], two.last["confirm_id"]]
    page = get(stack, who["alice"], "approvals", status="pending", limit=1).json()
    assert [i["approval_id"] for i in page["items"]] == [ids[1]]  # newest first
    rest = get(stack, who["alice"], "approvals", status="pending", limit=1,
               cursor=page["next_cursor"]).json()
    assert [i["approval_id"] for i in rest["items"]] == [ids[0]]
    # Never one's own requests; not listed for a person without an approver role.
    assert get(stack, who["bob"], "approvals").json()["items"] == []
    assert get(stack, who["carol"], "approvals").json()["items"] == []
    refused(get(stack, who["carol"], f"approvals/{ids[0]}"), 404, "NOT_FOUND")
    detail = get(stack, who["alice"], f"approvals/{ids[0]}").json()
    assert detail["message"] == "задеплой дашборд 46 в прод"
    assert detail["tool_args"] == {"dashboard_id": 46, "env_id": "prod"}
    assert detail["prompt"] == one.last["prompt"] and detail["rule"]["rule"] == 1
    assert detail["requester"] == "bob" and detail["environment"] == "prod"
    # erin (an approver who may not deploy) denies one: the turn resumes with the deny and
    # nothing runs.
    denied = answer(stack, who["erin"], ids[0], decision="deny",
                    args_digest=detail["args_digest"], comment="not during the freeze")
    assert denied.status_code == 200 and denied.json()["status"] == "denied", denied.text
    joined = wait_run(stack, who["bob"], one.conversation_id or "", denied.json()["run_id"])
    assert [e["result"] for e in joined.of("confirm_resolved")] == ["denied"]
    assert deploys(stack) == []
    answered = get(stack, who["alice"], "approvals", status="answered").json()["items"]
    assert ids[0] in [i["approval_id"] for i in answered]
    assert ids[0] not in [i["approval_id"] for i in
                          get(stack, who["alice"], "approvals").json()["items"]]
    refused(get(stack, who["alice"], "approvals", status="all"), 422, "INVALID_REQUEST")


def of(events: list[dict[str, Any]], approval_id: str) -> list[str]:
    return [e["event"] for e in events if e["approval_id"] == approval_id]


def test_signed_webhooks_retry_until_delivered_once_and_email_carries_the_link(
        stack: Stack, receiver: Receiver, mailbox: tuple[Mailbox, int]) -> None:
    who = people(stack)
    _, card = ask(stack, who["bob"], "задеплой дашборд 48 в прод")
    aid = card.last["confirm_id"]
    asked = eventually(lambda: [e for e in receiver.events() if e["approval_id"] == aid],
                       "the request's webhook")
    body = asked[0]
    assert body["event"] == "approval_requested" and body["requester"] == "bob"
    assert (body["tool_name"], body["environment"], body["args_digest"]) == (
        "deploy_dashboard", "prod", card.last["approval"]["args_digest"])
    assert body["approve_url"] == "https://ss.example.com/api/agent/ui/approvals/" + aid
    assert body["prompt"] == card.last["prompt"] and body["id"]
    assert body["text"].startswith("Нужно одобрение: bob: ") and body["approve_url"] in body["text"]
    mail = eventually(lambda: [m for m in mailbox[0].messages
                               if m["X-AgentChat-Notification"] == body["id"]], "the e-mail")
    assert mail[0]["To"] == "ops@example.com" and mail[0]["From"] == "agentchat@example.com"
    parts = {p.get_content_type(): p.get_payload(decode=True).decode()
             for p in mail[0].walk() if not p.is_multipart()}
    assert body["approve_url"] in parts["text/plain"] and body["approve_url"] in parts["text/html"]
    # The receiver goes down; alice's answer is told once it is back, exactly once.
    receiver.down()
    try:
        got = answer(stack, who["alice"], aid, decision="approve",
                     args_digest=body["args_digest"])
        assert got.status_code == 200, got.text
        time.sleep(1.5)  # a few failed attempts meanwhile
    finally:
        receiver.up()
    eventually(lambda: "approval_answered" in of(receiver.events(), aid), "the answer's webhook")
    time.sleep(1.0)  # nothing more comes
    events = receiver.events()
    assert of(events, aid) == ["approval_requested", "approval_answered"]
    ids = [e["id"] for e in events]
    assert len(ids) == len(set(ids))
    said = [e for e in events if e["approval_id"] == aid][1]
    assert (said["approver"], said["decision"], said["status"]) == ("alice", "approve",
                                                                     "approved")
    # The call's audit record joins the notifications: what was sent, where.
    def told() -> list[tuple[str, str]]:
        recs = get(stack, who["bob"], "audit", conversation_id=card.conversation_id).json()
        return [(st["detail"]["event"], st["detail"]["channel"]) for st in
                recs["items"][0]["stages"] if st["stage"] == "notification"]
    eventually(lambda: len(told()) == 4, "the notifications on the audit record")
    assert sorted(told()) == [("approval_answered", "email"), ("approval_answered", "webhook"),
                              ("approval_requested", "email"), ("approval_requested", "webhook")]


def test_a_pending_approval_escalates_then_expires(stack: Stack, receiver: Receiver,
                                                    mailbox: tuple[Mailbox, int]) -> None:
    who = people(stack)
    _, card = ask(stack, who["bob"], "задеплой дашборд 49 в ss-stage")
    aid = card.last["confirm_id"]
    eventually(lambda: of(receiver.events(), aid) == [
        "approval_requested", "approval_escalated", "approval_expired"],
        "the escalation, then the expiry")
    escalated = [e for e in receiver.events() if e["approval_id"] == aid][1]
    mail = eventually(lambda: [m for m in mailbox[0].messages
                               if m["X-AgentChat-Notification"] == escalated["id"]],
                      "the escalation e-mail")
    assert mail[0]["To"] == "oncall@example.com"
    listed = get(stack, who["alice"], "approvals", status="expired").json()["items"]
    item = next(i for i in listed if i["approval_id"] == aid)
    assert item["escalated_at"] is not None


def test_a_grant_covers_the_same_call_until_revoked(stack: Stack, scripted: Service,
                                                    model: Service) -> None:
    who = people(stack)
    stack.reset_sandbox()
    _, card = ask(stack, who["bob"], "задеплой дашборд 42 в прод")
    aid, digest = card.last["confirm_id"], card.last["approval"]["args_digest"]
    refused(answer(stack, who["alice"], aid, decision="approve", args_digest=digest,
                   grant_minutes=120), 403, "FORBIDDEN")  # the rule allows 60 at most
    got = answer(stack, who["alice"], aid, decision="approve", args_digest=digest,
                 grant_minutes=30)
    assert got.status_code == 200 and got.json()["grant_id"], got.text
    grant_id = got.json()["grant_id"]
    wait_run(stack, who["bob"], card.conversation_id or "", got.json()["run_id"])
    # The same call in a clean context (the scripted model: no prefetch, only bob's words):
    # no card, it runs, and its record names the grant.
    script_model(model, [DEPLOY_42])
    clean = say(scripted, who["bob"], "задеплой дашборд в прод", timeout=60)
    assert clean.kind == "final" and not clean.of("confirm_required"), clean.types()
    assert len(deploys(stack)) == 2
    check = stage(stack, who["bob"], clean.conversation_id, "decision")
    assert (check["kind"], check["grant_id"], check["untrusted"]) == ("check", grant_id, False)
    # After a prefetch of dashboard 42 (ss-tools text in the context) the grant stands for
    # alice's approval only: bob's own card, saying why, and the record says both.
    tab, tainted = ask(stack, who["bob"], "задеплой дашборд 42 в прод")
    assert tainted.last["approval"] is None and tainted.last["reason_code"] == UNTRUSTED
    assert "ss-tools" in tainted.last["reason"], tainted.last["reason"]
    check = stage(stack, who["bob"], tainted.conversation_id, "decision")
    assert (check["grant_id"], check["untrusted_source"], check["reason_code"]) == (
        grant_id, "tool_output", UNTRUSTED)
    assert len(deploys(stack)) == 2
    done = say(stack.agent, who["bob"], "__resume__", "confirm", tainted.conversation_id,
               tab=tab, timeout=60)
    assert [e["tool"] for e in done.of("tool_end")] == ["deploy_dashboard"], done.types()
    assert len(deploys(stack)) == 3
    # Another object is not covered.
    ask(stack, who["bob"], "задеплой дашборд 41 в прод")
    mine = get(stack, who["bob"], "grants").json()["items"]
    assert [(g["grant_id"], g["granted_by"], g["live"]) for g in mine] == [
        (grant_id, "alice", True)]
    assert [g["grant_id"] for g in get(stack, who["alice"], "grants").json()["items"]] == [
        grant_id]
    assert get(stack, who["carol"], "grants").json()["items"] == []
    gone = httpx.delete(f"{stack.agent.url}/api/agent/grants/{grant_id}", timeout=30,
                        headers={"Authorization": f"Bearer {who['carol']}"})
    refused(gone, 404, "NOT_FOUND")
    # A tainted card shown under the grant, the grant revoked before bob's confirm: bob's
    # answer stands for his own card only, so nothing runs.
    tab, late = ask(stack, who["bob"], "задеплой дашборд 42 в прод")
    assert late.last["approval"] is None and late.last["reason_code"] == UNTRUSTED
    revoked = httpx.delete(f"{stack.agent.url}/api/agent/grants/{grant_id}", timeout=30,
                           headers={"Authorization": f"Bearer {who['alice']}"})
    assert revoked.status_code == 200 and revoked.json()["live"] is False, revoked.text
    after = say(stack.agent, who["bob"], "__resume__", "confirm", late.conversation_id,
                tab=tab, timeout=60)
    assert after.kind == "final" and not after.of("tool_end"), after.types()
    assert stage(stack, who["bob"], late.conversation_id, "not_run")["reason"] == "revoked"
    _, again = ask(stack, who["bob"], "задеплой дашборд 42 в прод")  # alice's card again
    assert again.last["approval"]["mode"] == "other"
    assert len(deploys(stack)) == 3


# What each scripted call says, so keyword selection offers its tool (no number: no prefetch).
SAID = {"deploy_dashboard": "задеплой дашборд в прод",
        "start_migration": "перенеси дашборд в прод",
        "start_maintenance": "начни обслуживание в прод"}


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


def granted(stack: Stack, scripted: Service, model: Service, token: str,
            asked: dict[str, Any], by: str) -> str:
    """`asked` through the scripted model, approved by `by` with a 30-minute grant; it ran."""
    script_model(model, [asked])
    _, card = ask(stack, token, SAID[asked["name"]], scripted)
    approval = card.last["approval"]
    got = answer(stack, by, approval["approval_id"], scripted, decision="approve",
                 args_digest=approval["args_digest"], grant_minutes=30)
    assert got.status_code == 200 and got.json()["grant_id"], got.text
    wait_run(stack, token, card.conversation_id or "", got.json()["run_id"])
    return str(got.json()["grant_id"])


def covered(scripted: Service, model: Service, token: str, asked: dict[str, Any]) -> bool:
    """Whether `asked` runs at once (a grant covers it) rather than stopping at a card."""
    script_model(model, [asked])
    out = say(scripted, token, SAID[asked["name"]], timeout=60)
    assert out.kind in ("final", "confirm_required"), out.types()
    return out.kind == "final"


def test_a_grant_covers_exactly_the_arguments_approved(stack: Stack, scripted: Service,
                                                      model: Service) -> None:
    """A grant's object is every argument but the catalog's free text: another source
    environment or another version (a rollback included) is another call; another comment
    is the same one. A grant stored in the old form (only
    `*_id` arguments) covers nothing and is not listed as live."""
    frank = stack.token("frank", ["admin"])
    stack.reset_sandbox()
    moved = call("start_migration", dashboard_id=42, source_env="ss-stage", target_env="prod")
    alice = stack.token("alice", ["admin"])
    granted(stack, scripted, model, frank, moved, alice)
    assert covered(scripted, model, frank, moved)
    assert not covered(scripted, model, frank, {**moved, "args": {**moved["args"],
                                                                   "source_env": "ss-dev"}})
    v3 = call("deploy_dashboard", dashboard_id=42, env_id="prod", version="3")
    granted(stack, scripted, model, frank, v3, alice)
    assert covered(scripted, model, frank, v3)
    for other in ("4", "2"):  # a newer version, a rollback
        assert not covered(scripted, model, frank, {**v3, "args": {**v3["args"],
                                                                    "version": other}})
    # The module's catalog gives deploys a free-text `comment` (module_catalog).
    said = {**v3, "args": {**v3["args"], "comment": "change 1234"}}
    assert covered(scripted, model, frank, said)
    assert covered(scripted, model, frank, {**said, "args": {**said["args"],
                                                              "comment": "other words"}})
    old = rows(stack.database_url, """
        INSERT INTO approval_grants (grant_id, approval_id, requester, tool, environment,
                                     object_key, granted_by, expires_at)
        VALUES ('old-grant-of-frank', 'old-approval', 'frank', 'deploy_dashboard', 'prod',
                '{"dashboard_id":42}', 'alice', now() + interval '1 hour')
        RETURNING grant_id""")
    assert old == [{"grant_id": "old-grant-of-frank"}]
    assert not covered(scripted, model, frank, call("deploy_dashboard", dashboard_id=42,
                                                    env_id="prod"))
    listed = {g["grant_id"]: g for g in get(stack, frank, "grants").json()["items"]}
    assert listed["old-grant-of-frank"]["live"] is False
    assert sorted(g["live"] for g in listed.values()) == [False, True, True]
    assert all(g["object_key"].startswith("v2:{") for g in listed.values()
               if g["grant_id"] != "old-grant-of-frank")


def test_the_approver_s_token_runs_only_what_they_approved(stack: Stack, scripted: Service,
                                                          model: Service) -> None:
    """One model message: a prod deploy (alice approves it) and an ss-dev deploy that needs no
    card; after the approved call the model would call another tool. Under alice's token only
    the approved deploy runs: its sibling is not run, the model is offered no tool and the
    call it names anyway runs nowhere; the run never keeps alice's token for a takeover."""
    who = people(stack)
    stack.reset_sandbox()
    beside = {"name": "deploy_dashboard", "args": {"dashboard_id": 44, "env_id": "ss-dev"}}
    later = {"name": "deploy_dashboard", "args": {"dashboard_id": 45, "env_id": "ss-dev"}}
    prod = {"name": "deploy_dashboard", "args": {"dashboard_id": 43, "env_id": "prod"}}
    script_model(model, [prod, beside], [later])
    _, card = ask(stack, who["bob"], "задеплой дашборды в прод и в ss-dev", scripted)
    approval = card.last["approval"]
    stack.fault(operation="deploy_dashboard", delay_s=2.0)  # the approved call, in flight
    got = answer(stack, who["alice"], approval["approval_id"], scripted, decision="approve",
                 args_digest=approval["args_digest"])
    assert got.status_code == 200, got.text
    run_id = got.json()["run_id"]
    live = wait_for(lambda: rows(stack.database_url, "SELECT status, resume_token FROM runs"
                                 " WHERE id = %s AND status = 'running'", run_id),
                    "the resumed run's row", 30)
    assert live == [{"status": "running", "resume_token": None}]
    joined = wait_run(stack, who["bob"], card.conversation_id or "", run_id)
    assert [e["call_id"] for e in joined.of("tool_end")] == [card.last["call_id"]]
    ran = [(a["env"], a["user_actor"]) for a in stack.audit(operation="deploy_dashboard")]
    assert ran == [("prod", "alice")], ran
    seen = httpx.get(model.url + "/seen", timeout=5).json()
    assert [s["offered"] for s in seen["seen"]][1:] == [[]], seen
    recs = get(stack, who["bob"], "audit", conversation_id=card.conversation_id).json()["items"]
    not_run = [st["detail"]["reason"] for r in recs for st in r["stages"]
               if st["stage"] == "not_run"]
    assert not_run == ["not_approved"], recs


def regenerate(cid: str | None) -> dict[str, Any]:
    return {"text": "", "files": [], "action": "regenerate", "conversation_id": cid,
            "message_id": None}


def test_a_fork_cards_every_write_when_the_old_branch_wrote(stack: Stack, scripted: Service,
                                                            model: Service) -> None:
    """Regenerate after a write ran or may have run (docs/protocol.md §4, "Branches"):
    `forked_from` lists it with its outcome, a timeout included, and in the forked turn a
    write that would need no card (an ss-dev maintenance window, a deploy a grant covers) is
    the requester's card saying why; nothing runs unasked."""
    ivan = stack.token("ivan", ["admin"])
    stack.reset_sandbox()
    window = call("start_maintenance", env_id="ss-dev", reason="patch")
    stack.fault(operation="start_maintenance", delay_s=2.0)  # past the 1 s timeout
    script_model(model, [window])
    tab = RawChat(scripted.url, ivan, None)  # type: ignore[arg-type]
    old = say(scripted, ivan, SAID["start_maintenance"].replace("прод", "ss-dev"), tab=tab,
              timeout=60)
    assert old.kind == "final" and old.of("tool_timeout"), old.types()
    time.sleep(1.5)  # the sandbox finishes the timed-out request
    windows = len(stack.audit(operation="start_maintenance"))
    script_model(model, [window])
    again = say(scripted, ivan, regenerate(old.conversation_id), tab=tab, timeout=60)
    forked = again.events[0]["metadata"]
    assert forked["type"] == "forked", again.types()
    assert [(e["tool_name"], e["environment"], e["outcome"])
            for e in forked["forked_from"]["executed"]] == [("start_maintenance", "ss-dev",
                                                             "timeout")]
    assert again.kind == "confirm_required" and again.last["reason_code"] == FORKED
    assert "другой его ветке" in again.last["reason"], again.last["reason"]
    say(scripted, ivan, "__resume__", "deny", old.conversation_id, tab=tab, timeout=60)
    assert len(stack.audit(operation="start_maintenance")) == windows
    # A deploy a grant covers runs at once; regenerated, it is ivan's card (the grant still
    # recorded on its decision), and runs only once he confirms.
    deploy = call("deploy_dashboard", dashboard_id=42, env_id="prod")
    grant_id = granted(stack, scripted, model, ivan, deploy, stack.token("alice", ["admin"]))
    script_model(model, [deploy])
    tab = RawChat(scripted.url, ivan, None)  # type: ignore[arg-type]
    ran = say(scripted, ivan, SAID["deploy_dashboard"], tab=tab, timeout=60)
    assert ran.kind == "final" and ran.of("tool_end"), ran.types()
    before = len(deploys(stack))
    script_model(model, [deploy])
    card = say(scripted, ivan, regenerate(ran.conversation_id), tab=tab, timeout=60)
    assert [(e["tool_name"], e["outcome"]) for e in card.events[0]["metadata"]["forked_from"][
        "executed"]] == [("deploy_dashboard", "ok")]
    assert card.kind == "confirm_required", card.types()
    assert (card.last["approval"], card.last["reason_code"]) == (None, FORKED)
    assert len(deploys(stack)) == before
    recs = get(stack, ivan, "audit", conversation_id=ran.conversation_id).json()["items"]
    check = next(st["detail"] for r in recs if r["call_id"] == card.last["call_id"]
                 for st in r["stages"] if st["stage"] == "decision")
    assert (check["grant_id"], check["reason_code"]) == (grant_id, FORKED)
    done = say(scripted, ivan, "__resume__", "confirm", ran.conversation_id, tab=tab,
               timeout=60)
    assert done.kind == "final" and done.of("tool_end"), done.types()
    assert len(deploys(stack)) == before + 1


def policy_revision(stack: Stack) -> str:
    assert stack.policy is not None
    return str(httpx.get(stack.policy.url + "/readyz", timeout=5).json()["policy_revision"])


def test_grant_limits_are_the_rule_of_the_answer_s_time(stack: Stack) -> None:
    """A pending approval asked under a rule allowing 60-minute grants, the rule changed to
    allow none: the answer asking one is refused, nothing changed; without one it runs."""
    who = people(stack)
    stack.reset_sandbox()
    _, card = ask(stack, who["bob"], "задеплой дашборд 43 в прод")
    approval = card.last["approval"]
    assert approval["policy_rule"]["grant_max_minutes"] == 60
    rules = Path(stack.policy_env["AGENTCHAT_POLICY_DIR"]) / "approvals.yaml"
    before = policy_revision(stack)
    rules.write_text(APPROVALS.replace("grant_max_minutes: 60", "grant_max_minutes: 0"))
    try:
        wait_for(lambda: policy_revision(stack) != before, "the sidecar's reload", 30)
        refused(answer(stack, who["alice"], approval["approval_id"], decision="approve",
                       args_digest=approval["args_digest"], grant_minutes=30),
                403, "FORBIDDEN")
        assert get(stack, who["alice"], f"approvals/{approval['approval_id']}").json()[
            "answers"] == []
        got = answer(stack, who["alice"], approval["approval_id"], decision="approve",
                     args_digest=approval["args_digest"])
        assert got.status_code == 200 and got.json()["grant_id"] is None, got.text
        joined = wait_run(stack, who["bob"], card.conversation_id or "", got.json()["run_id"])
        assert [e["tool"] for e in joined.of("tool_end")] == ["deploy_dashboard"], [
            (e["error"], e.get("reason")) for e in joined.of("tool_error")]
    finally:
        rules.write_text(APPROVALS)
        wait_for(lambda: policy_revision(stack) == before, "the sidecar's reload back", 30)
    assert len(deploys(stack)) == 1


def test_the_readme_demo_alice_asks_and_dave_approves(stack: Stack) -> None:
    """The README's four-eyes demo with the dev issuer's own demo users."""
    alice, dave = stack.token("alice"), stack.token("dave")
    stack.reset_sandbox()
    _, card = ask(stack, alice, "задеплой дашборд 42 в прод")
    inbox = get(stack, dave, "approvals").json()["items"]
    item = next(i for i in inbox if i["approval_id"] == card.last["confirm_id"])
    got = answer(stack, dave, item["approval_id"], decision="approve",
                 args_digest=item["args_digest"])
    assert got.status_code == 200 and got.json()["status"] == "approved", got.text
    wait_run(stack, alice, card.conversation_id or "", got.json()["run_id"])
    assert [a["user_actor"] for a in deploys(stack)] == ["dave"]


def test_one_approval_covers_the_calls_of_a_batched_card(stack: Stack,
                                                         receiver: Receiver) -> None:
    """Three prod deploys of one message: one card, one approval whose digest binds all three
    (docs/protocol.md §11: sha256 of the JSON list of the calls' digests); each runs once."""
    who = people(stack)
    stack.reset_sandbox()
    _, card = ask(stack, who["bob"], "задеплой дашборд 41 в прод; задеплой дашборд 42 в прод; "
                                     "задеплой дашборд 43 в прод")
    calls, approval = card.last["calls"], card.last["approval"]
    assert len(calls) == 3 and approval["approval_id"] == card.last["confirm_id"]
    listed = json.dumps([c["args_digest"] for c in calls], separators=(",", ":"))
    assert approval["args_digest"] == "sha256:" + hashlib.sha256(listed.encode()).hexdigest()
    one = answer(stack, who["alice"], approval["approval_id"], decision="approve",
                 args_digest=calls[0]["args_digest"])
    assert one.status_code == 409 and one.json()["code"] == "STALE_CONFIRMATION", one.text
    item = get(stack, who["alice"], f"approvals/{approval['approval_id']}").json()
    assert [c["call_id"] for c in item["calls"]] == [c["call_id"] for c in calls]
    # The request's webhook lists the calls, and its one-line text names each one.
    told = wait_for(lambda: [b for b in (json.loads(raw) for _, raw in list(receiver.got))
                             if b.get("approval_id") == approval["approval_id"]
                             and b.get("event") == "approval_requested"],
                    "the request's webhook", 30)
    assert [c["call_id"] for c in told[0]["calls"]] == [c["call_id"] for c in calls]
    assert all(c["prompt"] in told[0]["text"] for c in calls), told[0]["text"]
    got = answer(stack, who["alice"], approval["approval_id"], decision="approve",
                 args_digest=approval["args_digest"])
    assert got.status_code == 200 and got.json()["status"] == "approved", got.text
    joined = wait_run(stack, who["bob"], card.conversation_id or "", got.json()["run_id"])
    assert [e["call_id"] for e in joined.of("tool_end")] == [c["call_id"] for c in calls]
    assert sorted(a["idempotency_key"] for a in deploys(stack)) == sorted(
        c["confirm_id"] for c in calls)
    recs = get(stack, who["bob"], "audit",
               conversation_id=card.conversation_id).json()["items"]
    assert len(recs) == 3 and all(
        [st["detail"].get("by") for st in r["stages"] if st["stage"] == "answer"] == ["alice"]
        for r in recs)


def test_the_panel_shows_waiting_for_approval_and_offers_only_cancel(
        stack: Stack, tmp_path: Path) -> None:
    """The panel's card in Chromium (tests/browser/approval.test.mjs); skipped without a
    browser, as the other browser tests are."""
    from testkit.browser import require_browser
    from testkit.support import ROOT

    chromium = require_browser("the approval card's browser test")
    assert (ROOT / "web" / "build" / "index.html").is_file(), "run `make web`"
    node = shutil.which("node")
    assert node, "Node 20 is required for the browser tests"
    out = subprocess.run(
        [node, "--test", "--test-force-exit", "--test-reporter=spec", "approval.test.mjs"],
        cwd=ROOT / "tests" / "browser", capture_output=True, text=True, timeout=180,
        env={**stack.node_env(), "CHROMIUM": str(chromium), "PAGE_SHOTS": str(tmp_path)})
    assert out.returncode == 0, out.stdout[-8000:] + out.stderr[-3000:]


def test_the_approvals_pages_are_the_panel_with_its_csp(stack: Stack) -> None:
    """approvals/ and approvals/{id} (the card's approve_url) serve the panel's index.html with
    its CSP, its assets one folder up; any other path under approvals/ is a 404."""
    ui = f"{stack.agent.url}/api/agent/ui/"
    root = httpx.get(ui, timeout=30)
    assert root.status_code == 200, root.text
    for path in ("approvals/", "approvals/0b6e1c52-4f0a-4d59-9b52-2f1c3a7e9d10"):
        page = httpx.get(ui + path, timeout=30)
        assert page.status_code == 200, (path, page.text)
        assert page.headers["content-security-policy"] == root.headers["content-security-policy"]
        assert "base-uri 'none'" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store"
        assert page.text == root.text.replace('="./assets/', '="../assets/')
        asset = page.text.split('src="../')[1].split('"')[0]
        assert httpx.get(ui + asset, timeout=30).status_code == 200
    moved = httpx.get(ui + "approvals", timeout=30)
    assert (moved.status_code, moved.headers["location"]) == (308, "approvals/")
    for bad in ("approvals/a%20b", "approvals/" + "a" * 65, "approvals/x/y", "approvals/x.js",
                "approvals/assets/index.js"):
        assert httpx.get(ui + bad, timeout=30).status_code == 404, bad


def test_the_shipped_policy_makes_prod_deploys_migrations_and_deletes_other() -> None:
    from agentchat.policy.rules import read_folder

    rules = read_folder(Path(PACKAGE_DATA / "policy")).approvals
    assert [(r.tools, r.environments, r.mode) for r in rules] == [
        (("deploy_dashboard", "start_migration", "destructive"), ("prod",), "other")]
