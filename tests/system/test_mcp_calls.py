"""Every result shape of an MCP `tools/call` (docs/protocol.md §12), driven with the official
SDK client (`mcp.Client`) over HTTP against the running stack, in both protocol eras, on the
shipped policy (four eyes on prod deploys); the sandbox's audit shows each write exactly
once.

- tools/list per user: the catalog's order, schema, words by Accept-Language, risk hints.
- done, refused (unknown tool, bad arguments, a denial with its role and alternatives);
- a card asked inline (2026-07-28 elicitation): accepted runs once, declined runs nothing; a
  replayed, altered or another user's requestState runs nothing;
- a card answered on the page (a handshake-era client, a client without elicitation, a
  destructive tool): confirmed there, raced by a second confirmation, it runs once;
- four eyes: approved through the inbox by someone else, fetched with agentchat_call_result;
  the requester's own confirmation refused; nobody else learns the call exists.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import mcp_types as types
import pytest

from agentchat.catalog import load_catalog
from agentchat.settings import PACKAGE_DATA
from testkit.mcp_client import MODERN, Confirm, connect, mcp_token, mcp_url, rpc
from testkit.stack import Stack, stack_on_own_database

HEALTH = {"env_id": "ss-dev", "dashboard_id": 42}
ERAS = [MODERN, "legacy"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str,
          migrated_template: str) -> Iterator[Stack]:
    """The shipped policy, approvals.yaml included: prod deploys need an approver."""
    tmp = tmp_path_factory.mktemp("mcp-calls")
    with stack_on_own_database(pg_server, migrated_template, tmp,
                               policy_env={"AGENTCHAT_POLICY_DIR": str(PACKAGE_DATA / "policy")}
                               ) as s:
        yield s


def token(stack: Stack, user: str) -> str:
    return mcp_token(stack, user, extra={"azp": "claude-code"})


def call(stack: Stack, user: str, name: str, args: dict[str, Any], *, mode: str = MODERN,
         elicit: Any = None, headers: dict[str, str] | None = None) -> types.CallToolResult:
    async def go() -> types.CallToolResult:
        async with connect(mcp_url(stack), token(stack, user), mode=mode, elicit=elicit,
                           headers=headers) as client:
            return await client.call_tool(name, args)

    return asyncio.run(go())


def deploys(stack: Stack, env: str = "ss-dev") -> list[dict[str, Any]]:
    return [a for a in stack.audit(operation="deploy_dashboard")
            if a["env"] == env and a["outcome"] in ("ok", "replayed")]


def answer_page(stack: Stack, user: str, call_id: str, decision: str,
                digest: str) -> httpx.Response:
    return httpx.post(f"{stack.agent.url}/api/agent/calls/{call_id}", timeout=60,
                      json={"decision": decision, "args_digest": digest},
                      headers={"Authorization": f"Bearer {stack.token(user)}"})


def result_of(stack: Stack, user: str, call_id: str, *, mode: str = MODERN) -> Any:
    return call(stack, user, "agentchat_call_result", {"call_id": call_id}, mode=mode)


# -- tools/list ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ERAS)
def test_each_user_lists_what_they_may_call_with_schema_words_and_hints(stack: Stack,
                                                                        mode: str) -> None:
    catalog = {t.name: t for t in load_catalog(PACKAGE_DATA / "catalog.yaml").tools}
    order = list(catalog)

    async def names(user: str, lang: str) -> list[types.Tool]:
        async with connect(mcp_url(stack), token(stack, user), mode=mode,
                           headers={"Accept-Language": lang}) as client:
            return list((await client.list_tools()).tools)

    alice = asyncio.run(names("alice", "ru-RU,ru;q=0.9,en;q=0.5"))
    carol = asyncio.run(names("carol", "en-GB"))
    assert alice[-1].name == carol[-1].name == "agentchat_call_result"
    for listed in (alice, carol):
        mine = [t.name for t in listed[:-1]]
        assert mine == [n for n in order if n in mine]  # the catalog's order
    assert {"deploy_dashboard", "delete_dashboard"} <= {t.name for t in alice}
    assert not {"deploy_dashboard", "delete_dashboard"} & {t.name for t in carol}
    by = {t.name: t for t in alice}
    deploy, delete, health = by["deploy_dashboard"], by["delete_dashboard"], by[
        "get_health_summary"]
    assert deploy.title == catalog["deploy_dashboard"].title.ru
    assert deploy.input_schema == catalog["deploy_dashboard"].args
    assert {t.name: t.title for t in carol}["get_health_summary"] == \
        catalog["get_health_summary"].title.en
    hints = {name: (t.annotations.read_only_hint, t.annotations.destructive_hint)
             for name, t in (("read", health), ("write", deploy), ("destructive", delete))
             if t.annotations}
    assert hints == {"read": (True, False), "write": (False, False),
                     "destructive": (False, True)}


def test_a_listing_is_private_and_short_lived(stack: Stack) -> None:
    body = {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                      "io.modelcontextprotocol/clientCapabilities": {}}}
    r = rpc(mcp_url(stack), token(stack, "bob"), "tools/list", body, version=MODERN,
            headers={"Mcp-Method": "tools/list"})
    result = r.json()["result"]
    assert result["cacheScope"] == "private" and 0 < result["ttlMs"] <= 5000, result


# -- done and refused ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ERAS)
def test_a_read_runs_and_answers_ss_tools_json(stack: Stack, mode: str) -> None:
    out = call(stack, "bob", "get_health_summary", HEALTH, mode=mode)
    assert out.is_error is False
    assert out.structured_content["title"] == "Отчёт по энергопотреблению"
    text = out.content[0]
    assert isinstance(text, types.TextContent)
    assert json.loads(text.text) == out.structured_content


@pytest.mark.parametrize("mode", ERAS)
def test_refused_before_running(stack: Stack, mode: str) -> None:
    unknown = call(stack, "alice", "drop_everything", {}, mode=mode)
    assert unknown.is_error and unknown.structured_content["code"] == "INVALID_REQUEST"
    bad = call(stack, "alice", "get_health_summary", {"env_id": "ss-dev",
                                                       "dashboard_id": "42; drop"}, mode=mode)
    assert bad.is_error and bad.structured_content["code"] == "INVALID_REQUEST"
    # carol may only read: a deploy she was never offered is a denial with its alternatives.
    denied = call(stack, "carol", "deploy_dashboard", {"dashboard_id": 42, "env_id": "ss-dev"},
                  mode=mode)
    assert denied.is_error
    body = denied.structured_content
    assert body["code"] == "FORBIDDEN" and body["required_role"], body
    assert body["alternatives"] and {"action", "prompt"} <= set(body["alternatives"][0])
    assert deploys(stack) == []


# -- asked inline (2026-07-28) ------------------------------------------------------------

def test_an_inline_card_accepted_runs_once_declined_runs_nothing(stack: Stack) -> None:
    stack.reset_sandbox()
    asked = Confirm("accept")
    out = call(stack, "alice", "deploy_dashboard", {"dashboard_id": 42, "env_id": "ss-dev"},
               elicit=asked)
    assert out.is_error is False, out.structured_content
    assert len(asked.asked) == 1
    form = asked.asked[0]
    assert isinstance(form, types.ElicitRequestFormParams)
    assert form.requested_schema["properties"]["confirm"]["type"] == "boolean"
    assert "ss-dev" in form.message
    assert len(deploys(stack)) == 1
    # One audit record for it: channel mcp, the token's azp, what the client says of itself.
    audit = httpx.get(stack.agent.url + "/api/agent/audit", params={"tool": "deploy_dashboard"},
                      headers={"Authorization": f"Bearer {stack.token('alice')}"}, timeout=30)
    [record] = [r for r in audit.json()["items"] if r["call_id"].startswith("mcp-")
                and r["environment"] == "ss-dev" and r["outcome"] == "ok"]
    decision = next(st["detail"] for st in record["stages"] if st["stage"] == "decision")
    assert decision["channel"] == "mcp" and decision["azp"] == "claude-code", decision
    assert decision["client"]["name"] == "testkit" and decision["client"]["version"] == "1.2.3"
    for answer in (Confirm("decline"), Confirm("cancel"), Confirm("accept", confirm=False)):
        no = call(stack, "alice", "deploy_dashboard", {"dashboard_id": 7, "env_id": "ss-dev"},
                  elicit=answer)
        assert no.is_error and no.structured_content["status"] == "denied", answer.action
    assert len(deploys(stack)) == 1


def test_a_request_state_runs_once_and_only_for_its_user_and_arguments(stack: Stack) -> None:
    stack.reset_sandbox()
    args = {"dashboard_id": 42, "env_id": "ss-dev"}
    accept = {"confirm": types.ElicitResult(action="accept", content={"confirm": True})}

    async def go() -> dict[str, Any]:
        async with connect(mcp_url(stack), token(stack, "alice"), elicit=Confirm()) as alice, \
                connect(mcp_url(stack), token(stack, "bob"), elicit=Confirm()) as bob:
            first = await alice.session.call_tool("deploy_dashboard", args,
                                                  allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            state = first.request_state
            assert state

            async def retry(client: Any, state: str, arguments: dict[str, Any]) -> Any:
                return await client.session.call_tool("deploy_dashboard", arguments,
                                                      input_responses=accept,
                                                      request_state=state,
                                                      allow_input_required=True)

            return {"altered": await retry(alice, state[:-3] + "abc", args),
                    "others": await retry(bob, state, args),
                    "other_args": await retry(alice, state, {**args, "dashboard_id": 7}),
                    "ran": await retry(alice, state, args),
                    "replayed": await retry(alice, state, args)}

    out = asyncio.run(go())
    assert out["ran"].is_error is False, out["ran"]
    codes = {name: out[name].structured_content["code"]
             for name in ("altered", "others", "other_args", "replayed")
             if isinstance(out[name], types.CallToolResult) and out[name].is_error}
    assert codes == {"altered": "STALE_CONFIRMATION", "others": "STALE_CONFIRMATION",
                     "other_args": "STALE_CONFIRMATION",
                     "replayed": "NO_PENDING_CONFIRMATION"}, out
    assert len(deploys(stack)) == 1


# -- answered on the page --------------------------------------------------------------------

@pytest.mark.parametrize("mode", ERAS)
def test_a_card_without_elicitation_is_confirmed_on_the_page_once(stack: Stack,
                                                                   mode: str) -> None:
    stack.reset_sandbox()
    # A handshake-era client cannot answer inline on a stateless endpoint, whatever it says.
    out = call(stack, "alice", "deploy_dashboard", {"dashboard_id": 42, "env_id": "ss-dev"},
               mode=mode, elicit=Confirm() if mode == "legacy" else None)
    assert out.is_error is False
    pending = out.structured_content
    assert pending["status"] == "confirmation_required", pending
    assert pending["approve_url"].endswith(f"/api/agent/ui/calls/{pending['call_id']}")
    assert {"expires_at", "prompt", "risk", "environment", "args_digest"} <= set(pending)
    assert result_of(stack, "alice", pending["call_id"], mode=mode).structured_content[
        "status"] == "pending"
    assert deploys(stack) == []
    # The page's confirmation races a second one: one runs the call, the other is refused.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: answer_page(stack, "alice", pending["call_id"],
                                                      "confirm", pending["args_digest"]),
                                range(2)))
    assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
    assert max(answers, key=lambda a: a.status_code).json()["code"] == "NO_PENDING_CONFIRMATION"
    assert len(deploys(stack)) == 1
    done = result_of(stack, "alice", pending["call_id"], mode=mode).structured_content
    assert done["status"] in ("running", "done"), done


def test_a_destructive_call_goes_to_the_page_even_with_elicitation(stack: Stack) -> None:
    out = call(stack, "alice", "delete_dashboard", {"dashboard_id": 7, "env_id": "ss-dev"},
               elicit=Confirm())
    assert out.structured_content["status"] == "confirmation_required"
    denied = answer_page(stack, "alice", out.structured_content["call_id"], "deny",
                         out.structured_content["args_digest"])
    assert denied.status_code == 200, denied.text
    assert result_of(stack, "alice", out.structured_content["call_id"]).structured_content[
        "status"] == "denied"
    assert [a for a in stack.audit(operation="delete_dashboard") if a["outcome"] == "ok"] == []


# -- four eyes ----------------------------------------------------------------------------

def test_a_four_eyes_call_is_approved_by_someone_else_then_fetched(stack: Stack) -> None:
    stack.reset_sandbox()
    out = call(stack, "alice", "deploy_dashboard", {"dashboard_id": 42, "env_id": "prod"},
               elicit=Confirm())
    pending = out.structured_content
    assert out.is_error is False and pending["status"] == "approval_required", pending
    call_id, digest = pending["call_id"], pending["args_digest"]
    assert pending["approval"]
    # Her own confirmation is refused; another user does not learn the call exists.
    mine = answer_page(stack, "alice", call_id, "confirm", digest)
    assert mine.status_code == 403 and mine.json()["code"] == "FORBIDDEN", mine.text
    nosy = result_of(stack, "bob", call_id)
    assert nosy.is_error and nosy.structured_content["code"] == "NOT_FOUND"
    assert deploys(stack, "prod") == []
    dave = {"Authorization": f"Bearer {stack.token('dave')}"}
    inbox = httpx.get(stack.agent.url + "/api/agent/approvals", headers=dave, timeout=30)
    assert call_id in [i["approval_id"] for i in inbox.json()["items"]], inbox.text
    approved = httpx.post(f"{stack.agent.url}/api/agent/approvals/{call_id}", headers=dave,
                          json={"decision": "approve", "args_digest": digest}, timeout=60)
    assert approved.status_code == 200, approved.text

    for _ in range(100):
        done = result_of(stack, "alice", call_id).structured_content
        if done["status"] not in ("pending", "running"):
            break
        time.sleep(0.1)
    assert done["status"] == "done" and done["result"], done
    assert len(deploys(stack, "prod")) == 1
