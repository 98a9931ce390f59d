"""MCP calls through the gate, the domain's side (agent/chat/gated_calls.py): the door
`GatedCalls` built in this process over the real sidecar, sandbox and PostgreSQL of a running
stack (the MCP adapter's own tests drive it with `mcp.Client`), and the requester's REST
routes (`/api/agent/calls`) and the approvals inbox on the stack's agent, over HTTP.

- The tools a caller may call are the sidecar's; an unknown tool, bad arguments, a denial
  (with the role and the alternatives) are refused before anything is sent; a read runs.
- A card only the untrusted context needs (an ss-dev deploy) is asked inline: accepted it runs
  once; declined it runs nothing; a replayed, altered, expired, another user's or other
  arguments' `request_state` runs nothing.
- A card the catalog needs (an ss-stage deploy), or any card for a client that cannot elicit,
  waits for its requester on the page: listed for them only, answered with the digest, run
  once; a page confirmation racing the inline answer runs it once.
- A prod deploy is an approval (four eyes): its requester may not confirm it; another person
  approves it in the inbox and it runs once under their token.
- Each write is one audit record (channel `mcp`, `azp`, the client's own words unverified,
  the card, the answers, the execution), and the sandbox's audit shows it exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from agentchat.agent.chat import (
    AskInline,
    Denied,
    Done,
    GatedCalls,
    Pending,
    Refused,
)
from agentchat.db import create_pool
from agentchat.errors import ErrorCode
from testkit.gated import PUBLIC, caller, gated_stack, make_door
from testkit.stack import Stack

KEY = "gated-calls-test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    with gated_stack(pg_server, migrated_template, tmp_path_factory.mktemp("gated"), KEY) as s:
        yield s


@pytest.fixture(scope="module")
async def door(stack: Stack) -> AsyncIterator[GatedCalls]:
    pool = create_pool(stack.database_url, max_size=4)
    await pool.open(wait=True)
    async with httpx.AsyncClient() as http:
        yield make_door(stack, pool, http, KEY)
    await pool.close()


def rest(stack: Stack, token: str, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, f"{stack.agent.url}/api/agent/{path}", timeout=60,
                         headers={"Authorization": f"Bearer {token}"}, **kw)


def deploys(stack: Stack, env: str) -> list[dict[str, Any]]:
    return [a for a in stack.audit(operation="deploy_dashboard")
            if a["env"] == env and a["outcome"] == "ok"]


def record(stack: Stack, token: str, call_id: str) -> dict[str, Any]:
    items = rest(stack, token, "GET", "audit", params={"conversation_id": call_id}).json()
    assert len(items["items"]) == 1, items
    return dict(items["items"][0])


async def test_the_tools_and_the_refusals_are_the_gates(stack: Stack, door: GatedCalls) -> None:
    admin = [t.name for t in await door.tools_for(caller(stack, "alice", ["admin"]))]
    viewer = [t.name for t in await door.tools_for(caller(stack, "vera", ["viewer"]))]
    order = [t.name for t in door.catalogs.current().tools]
    assert admin == order  # every tool, in the catalog's order
    assert "search_dashboards" in viewer and "deploy_dashboard" not in viewer
    assert viewer == [n for n in order if n in viewer]

    vera = caller(stack, "vera", ["viewer"])
    unknown = await door.call(vera, "drop_everything", {}, can_elicit=True)
    assert isinstance(unknown, Refused) and unknown.code is ErrorCode.INVALID_REQUEST
    bad = await door.call(vera, "search_dashboards", {"query": 5}, can_elicit=True)
    assert isinstance(bad, Refused) and bad.code is ErrorCode.INVALID_REQUEST
    no_env = await door.call(vera, "search_dashboards", {"query": "sales"}, can_elicit=True)
    assert isinstance(no_env, Refused) and no_env.code is ErrorCode.INVALID_REQUEST
    denied = await door.call(vera, "deploy_dashboard", {"dashboard_id": 42, "env_id": "ss-dev"},
                             can_elicit=True)
    assert isinstance(denied, Refused) and denied.code is ErrorCode.FORBIDDEN, denied
    assert denied.required_role and isinstance(denied.alternatives, list)
    assert denied.structured()["code"] == "FORBIDDEN"

    read = await door.call(vera, "search_dashboards", {"query": "sales", "env_id": "ss-dev"},
                           can_elicit=False)
    assert isinstance(read, Done) and read.call_id is None and "items" in read.result


async def test_inline_card_runs_once_and_a_state_runs_nothing_twice(stack: Stack,
                                                                    door: GatedCalls) -> None:
    stack.reset_sandbox()
    bob = caller(stack, "bob", ["editor"])
    args = {"dashboard_id": 42, "env_id": "ss-dev"}
    asked = await door.call(bob, "deploy_dashboard", args, can_elicit=True)
    assert isinstance(asked, AskInline), asked
    assert asked.environment == "ss-dev" and "42" in asked.prompt and asked.request_state
    assert deploys(stack, "ss-dev") == []

    state = asked.request_state
    carol = caller(stack, "carol", ["editor"])
    digest = (await door.result("bob", asked.call_id)).args_digest
    expired = door.states.seal.seal_json({  # sealed right, but past its expiry
        "v": 1, "sub": "bob", "tool": "deploy_dashboard", "args_digest": digest,
        "call_id": asked.call_id, "exp": int(time.time()) - 1})
    assert expired is not None
    for who, arguments, sealed in ((carol, args, state),  # another user's
                                   (bob, {**args, "dashboard_id": 43}, state),  # other args
                                   (bob, args, state[:-4] + "AAAA"),  # altered
                                   (bob, args, expired)):
        wrong = await door.call(who, "deploy_dashboard", arguments, can_elicit=True,
                                request_state=sealed, confirm="accept")
        assert isinstance(wrong, Refused) and wrong.code is ErrorCode.STALE_CONFIRMATION, wrong
    assert deploys(stack, "ss-dev") == []

    done = await door.call(bob, "deploy_dashboard", args, can_elicit=True,
                           request_state=state, confirm="accept")
    assert isinstance(done, Done) and done.call_id == asked.call_id, done
    replay = await door.call(bob, "deploy_dashboard", args, can_elicit=True,
                             request_state=state, confirm="accept")
    assert isinstance(replay, Refused)
    assert replay.code is ErrorCode.NO_PENDING_CONFIRMATION and replay.call_id == asked.call_id
    assert len(deploys(stack, "ss-dev")) == 1

    status = await door.result("bob", asked.call_id)
    assert status.status == "done" and status.result == done.result
    with pytest.raises(Exception) as hidden:
        await door.result("carol", asked.call_id)
    assert getattr(hidden.value, "code", None) is ErrorCode.NOT_FOUND

    rec = record(stack, bob.user_jwt, asked.call_id)
    stages = [s["stage"] for s in rec["stages"]]
    assert stages == ["decision", "card", "decision", "answer", "execution"], stages
    check = rec["stages"][0]["detail"]
    assert check["channel"] == "mcp" and check["azp"] == "claude-code"
    assert check["client"] == {"name": "claude-code", "version": "2.1.0", "verified": False}
    assert check["untrusted_source"] == "mcp_client"
    assert rec["stages"][1]["detail"]["asked"] == "inline"
    assert rec["stages"][3]["detail"]["channel"] == "mcp_elicitation"
    assert rec["stages"][4]["detail"]["idempotency_key"] == asked.call_id
    assert rec["owner"] == "bob" and rec["outcome"] == "ok"

    declined = await door.call(bob, "deploy_dashboard", {**args, "dashboard_id": 7},
                               can_elicit=True)
    assert isinstance(declined, AskInline)
    no = await door.call(bob, "deploy_dashboard", {**args, "dashboard_id": 7}, can_elicit=True,
                         request_state=declined.request_state, confirm="decline")
    assert isinstance(no, Denied) and no.structured()["status"] == "denied"
    assert len(deploys(stack, "ss-dev")) == 1
    assert (await door.result("bob", declined.call_id)).status == "denied"


async def test_the_page_answers_what_the_client_may_not(stack: Stack, door: GatedCalls) -> None:
    stack.reset_sandbox()
    bob, carol = caller(stack, "bob", ["editor"]), caller(stack, "carol", ["editor"])
    # A catalog card (ss-stage deploys), even for a client that could elicit.
    waiting = await door.call(bob, "deploy_dashboard", {"dashboard_id": 42, "env_id": "ss-stage"},
                              can_elicit=True)
    assert isinstance(waiting, Pending) and waiting.status == "confirmation_required", waiting
    assert waiting.approve_url == f"{PUBLIC}/api/agent/ui/calls/{waiting.call_id}"
    assert waiting.structured()["args_digest"].startswith("sha256:")

    mine = rest(stack, bob.user_jwt, "GET", "calls", params={"status": "pending"}).json()
    assert [c["call_id"] for c in mine["items"]] == [waiting.call_id]
    assert rest(stack, carol.user_jwt, "GET", "calls").json()["items"] == []
    assert rest(stack, carol.user_jwt, "GET", f"calls/{waiting.call_id}").status_code == 404
    theirs = rest(stack, carol.user_jwt, "POST", f"calls/{waiting.call_id}",
                  json={"decision": "confirm", "args_digest": waiting.args_digest})
    assert theirs.status_code == 404
    stale = rest(stack, bob.user_jwt, "POST", f"calls/{waiting.call_id}",
                 json={"decision": "confirm", "args_digest": "sha256:" + "0" * 64})
    assert stale.status_code == 409 and stale.json()["code"] == "STALE_CONFIRMATION"
    assert deploys(stack, "ss-stage") == []

    ran = rest(stack, bob.user_jwt, "POST", f"calls/{waiting.call_id}",
               json={"decision": "confirm", "args_digest": waiting.args_digest})
    assert ran.status_code == 200 and ran.json()["status"] == "done", ran.text
    again = rest(stack, bob.user_jwt, "POST", f"calls/{waiting.call_id}",
                 json={"decision": "confirm", "args_digest": waiting.args_digest})
    assert again.status_code == 409 and again.json()["code"] == "NO_PENDING_CONFIRMATION"
    assert len(deploys(stack, "ss-stage")) == 1
    assert (await door.result("bob", waiting.call_id)).status == "done"
    answer = [s["detail"] for s in record(stack, bob.user_jwt, waiting.call_id)["stages"]
              if s["stage"] == "answer"]
    assert answer == [{"confirm_id": waiting.call_id, "by": "bob", "channel": "panel",
                       "action": "confirm", "result": "confirmed"}]

    # A client that cannot elicit: the untrusted card goes to the page too; denied there.
    dev = await door.call(bob, "deploy_dashboard", {"dashboard_id": 5, "env_id": "ss-dev"},
                          can_elicit=False)
    assert isinstance(dev, Pending) and dev.status == "confirmation_required"
    no = rest(stack, bob.user_jwt, "POST", f"calls/{dev.call_id}",
              json={"decision": "deny", "args_digest": dev.args_digest})
    assert no.status_code == 200 and no.json()["status"] == "denied"
    assert deploys(stack, "ss-dev") == []


async def test_a_page_confirmation_racing_the_inline_answer_runs_once(
        stack: Stack, door: GatedCalls) -> None:
    stack.reset_sandbox()
    bob = caller(stack, "bob", ["editor"])
    args = {"dashboard_id": 11, "env_id": "ss-dev"}
    for _ in range(3):
        asked = await door.call(bob, "deploy_dashboard", args, can_elicit=True)
        assert isinstance(asked, AskInline)
        page = asyncio.to_thread(rest, stack, bob.user_jwt, "POST", f"calls/{asked.call_id}",
                                 json={"decision": "confirm",
                                       "args_digest": (await door.result(
                                           "bob", asked.call_id)).args_digest})
        inline = door.call(bob, "deploy_dashboard", args, can_elicit=True,
                           request_state=asked.request_state, confirm="accept")
        on_page, by_client = await asyncio.gather(page, inline)
        won = [on_page.status_code == 200, isinstance(by_client, Done)]
        assert won.count(True) == 1, (on_page.text, by_client)
        assert (await door.result("bob", asked.call_id)).status == "done"
    assert len(deploys(stack, "ss-dev")) == 3  # one per call, never two


async def test_four_eyes_is_an_approval_like_any_other(stack: Stack, door: GatedCalls) -> None:
    stack.reset_sandbox()
    bob = caller(stack, "bob", ["editor"])
    alice = stack.token("alice", ["admin"])
    asked = await door.call(bob, "deploy_dashboard", {"dashboard_id": 42, "env_id": "prod"},
                            can_elicit=True)
    assert isinstance(asked, Pending) and asked.status == "approval_required", asked
    assert asked.approval and asked.approval["approval_id"] == asked.call_id

    own = rest(stack, bob.user_jwt, "POST", f"calls/{asked.call_id}",
               json={"decision": "confirm", "args_digest": asked.args_digest})
    assert own.status_code == 403 and own.json()["code"] == "FORBIDDEN"
    self_approve = rest(stack, stack.token("bob", ["editor", "admin"]), "POST",
                        f"approvals/{asked.call_id}",
                        json={"decision": "approve", "args_digest": asked.args_digest})
    assert self_approve.status_code == 403
    inbox = rest(stack, alice, "GET", "approvals").json()["items"]
    mine = [a for a in inbox if a["approval_id"] == asked.call_id]
    assert mine and mine[0]["requester"] == "bob" and mine[0]["tool_name"] == "deploy_dashboard"
    assert deploys(stack, "prod") == []

    approved = rest(stack, alice, "POST", f"approvals/{asked.call_id}",
                    json={"decision": "approve", "args_digest": asked.args_digest})
    assert approved.status_code == 200 and approved.json()["status"] == "approved", approved.text
    status = await door.result("bob", asked.call_id)
    assert status.status == "done", status
    assert len(deploys(stack, "prod")) == 1
    again = rest(stack, alice, "POST", f"approvals/{asked.call_id}",
                 json={"decision": "approve", "args_digest": asked.args_digest})
    assert again.status_code == 409
    assert len(deploys(stack, "prod")) == 1
    stages = [(s["stage"], s["detail"].get("kind") or s["detail"].get("result"))
              for s in record(stack, bob.user_jwt, asked.call_id)["stages"]]
    assert ("answer", "approved") in stages and stages[-1][0] == "execution", stages
