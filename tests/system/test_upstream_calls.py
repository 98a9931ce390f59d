"""Other teams' MCP tools behind the gate, driven from outside: a user's chat turn (a model
scripted over HTTP) and the official MCP client against /api/agent/mcp, with two real MCP
server processes as the upstreams (testkit/upstream_server.py): `superset`, which speaks
only the handshake era and checks an RS256 JWT as Superset 6.1 does, and `shadow`, a
second team's server with a tool of the same name, behind a static bearer. Each server's
journal says what it received.

- A read through chat and through MCP: our arguments less the environment, our signed JWT
  naming the user, never the user's token.
- A call the policy denies (by role; a line naming an upstream tool) sends nothing.
- A write with a card: confirmed, sent once (the audit names the server and the user);
  denied, never. After an upstream read, a write the policy lets run needs a card.
- Shadowing: each namespaced tool calls its own server only; an entry naming one server
  under another's prefix is refused at load; a tool a server adds is offered nowhere.
- A server that hangs: the turn ends within the upstream's timeout; a write's outcome is
  unknown and it was sent once. A 10 MB answer: `result_too_large`, and the agent's memory
  does not grow by it.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from agentchat.catalog import parse_catalog
from agentchat.errors import CatalogError
from agentchat.settings import PACKAGE_DATA
from testkit.mcp_client import MODERN, connect, mcp_token, mcp_url
from testkit.raw_chat import Outcome, RawChat
from testkit.reliability import say
from testkit.stack import Stack, stack_on_own_database
from testkit.support import Service, stub_model_env
from testkit.support import script_model as script
from testkit.upstream_catalog import catalog_with_upstreams, entry, superset_entries, upstream
from testkit.upstream_server import UpstreamServer, start_upstream

TIMEOUT_S = 3.0
SHADOW_TOKEN = "shadow-team-token-0123456789"
JWT = {"type": "jwt", "audience": "superset-mcp", "issuer": "agentchat-test",
       "user_claim": "agentchat_user"}
INFO = "superset__get_dashboard_info"
LIST = "superset__list_dashboards"
RENAME = "superset__update_dashboard"
UNTRUSTED = "confirmation_required_untrusted"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, UpstreamServer]]:
    logs = tmp_path_factory.mktemp("upstreams")
    superset = start_upstream("superset", handshake_only=True, log=logs / "superset.log")
    shadow = start_upstream("shadow", log=logs / "shadow.log")
    yield {"superset": superset, "shadow": shadow}
    superset.stop()
    shadow.stop()


def secured(servers: dict[str, UpstreamServer], public_key: str) -> None:
    """Each server as at start, with its auth: Superset's JWT check, the other's bearer."""
    for server in servers.values():
        server.reset()
    servers["superset"].require("jwt", public_key=public_key, audience=JWT["audience"],
                                issuer=JWT["issuer"], algorithm="RS256")
    servers["shadow"].require("bearer", token=SHADOW_TOKEN)


def policy_folder(tmp: Path) -> Path:
    """The shipped policy less its `p2` context lines (so a card after an upstream read is the
    agent's own rule, not the policy's), plus a line naming an upstream tool."""
    folder = tmp / "policy"
    shutil.copytree(PACKAGE_DATA / "policy", folder, ignore=shutil.ignore_patterns(
        "approvals.yaml"))
    csv = folder / "policy.csv"
    kept = [line for line in csv.read_text().splitlines(keepends=True)
            if not line.startswith("p2,")]
    csv.write_text("".join(kept) + f"p, viewer, prod, {INFO}, deny\n")
    for case_file in (folder / "tests").glob("*.yaml"):
        doc = yaml.safe_load(case_file.read_text())
        doc["cases"] = [c for c in doc["cases"] if c.get("reason") != UNTRUSTED]
        case_file.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return folder


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pg_server: str, migrated_template: str,
          model: Service, servers: dict[str, UpstreamServer]) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("upstream-calls")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    secrets = tmp / "secrets"
    (secrets / "superset").mkdir(parents=True)
    (secrets / "shadow").mkdir()
    (secrets / "superset" / "private_key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (secrets / "shadow" / "token").write_text(SHADOW_TOKEN)
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    superset, shadow = servers["superset"], servers["shadow"]
    defs = {d["name"]: d for d in superset.definitions()}
    shadow_defs = {d["name"]: d for d in shadow.definitions()}
    secured(servers, public.decode())
    catalog = catalog_with_upstreams(tmp, {
        "superset": upstream({"ss-dev": superset.url, "prod": superset.url},
                             timeout_s=TIMEOUT_S, auth=JWT),
        "shadow": upstream({"ss-dev": shadow.url}, timeout_s=TIMEOUT_S,
                           auth={"type": "bearer"})},
        [*superset_entries("superset", defs),
         entry("shadow", shadow_defs["list_dashboards"], words=("тень", "shadow"))])
    with stack_on_own_database(pg_server, migrated_template, tmp, catalog_path=catalog,
                               policy_env={"AGENTCHAT_POLICY_DIR": str(policy_folder(tmp))},
                               AGENTCHAT_AGENT_UPSTREAM_SECRETS=str(secrets),
                               **stub_model_env(model)) as s:
        s.agent_env["public_key"] = public.decode()  # for `secured`, not the agent
        yield s


@pytest.fixture
def fresh(stack: Stack, servers: dict[str, UpstreamServer]) -> dict[str, UpstreamServer]:
    secured(servers, stack.agent_env["public_key"])
    return servers


def turn(stack: Stack, user: str, text: str, *, tab: RawChat | None = None,
         cid: str | None = None, action: str | None = None) -> Outcome:
    out = say(stack.agent, stack.token(user), text, action, cid, tab=tab, timeout=60)
    assert out.kind in ("final", "confirm_required"), out.events[-3:]
    return out


def of(out: Outcome, kind: str, tool: str) -> list[dict[str, Any]]:
    """The turn's events of `kind` for `tool` (a message naming a dashboard also prefetches
    it from ss-tools)."""
    return [e for e in out.of(kind) if e.get("tool") == tool]


def mcp_call(stack: Stack, user: str, name: str, args: dict[str, Any], mode: str = MODERN
             ) -> Any:
    async def go() -> Any:
        async with connect(mcp_url(stack), mcp_token(stack, user), mode=mode) as client:
            return await client.call_tool(name, args)
    return asyncio.run(go())


def mcp_names(stack: Stack, user: str) -> list[str]:
    async def go() -> list[str]:
        async with connect(mcp_url(stack), mcp_token(stack, user)) as client:
            return [t.name for t in (await client.list_tools()).tools]
    return asyncio.run(go())


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def execution(stack: Stack, cid: str) -> dict[str, Any]:
    resp = httpx.get(stack.agent.url + "/api/agent/audit", params={"conversation_id": cid},
                     headers={"Authorization": f"Bearer {stack.token('alice')}"}, timeout=10)
    [record] = resp.json()["items"]
    return dict(next(s["detail"] for s in record["stages"] if s["stage"] == "execution"))


# -- reads -----------------------------------------------------------------------------------

def test_a_read_through_chat_carries_our_jwt_naming_the_user_never_their_token(
        stack: Stack, model: Service, fresh: dict[str, UpstreamServer]) -> None:
    superset = fresh["superset"]
    script(model, [{"name": INFO, "args": {"env_id": "ss-dev", "dashboard_id": 2}}])
    out = turn(stack, "alice", "show superset dashboard 2 in ss-dev")
    [end] = of(out, "tool_end", INFO)
    assert end["output"]["dashboard_title"] == "Energy usage"
    assert "Energy usage" in out.events[-1]["content"]  # the model read it
    [call] = superset.calls()
    assert (call["tool"], call["arguments"]) == ("get_dashboard_info", {"dashboard_id": 2})
    assert (call["auth"], call["user"], call["issuer"]) == ("jwt", "alice", "agentchat-test")
    users_token = sha(stack.token("alice"))  # the same claims, the same signature
    assert all(r["token_sha256"] != users_token and r["issuer"] == "agentchat-test"
               for r in superset.journal()["requests"])


@pytest.mark.parametrize("mode", [MODERN, "legacy"])
def test_a_read_through_the_mcp_endpoint(stack: Stack, fresh: dict[str, UpstreamServer],
                                         mode: str) -> None:
    assert {LIST, INFO, RENAME, "shadow__list_dashboards"} <= set(mcp_names(stack, "alice"))
    out = mcp_call(stack, "bob", LIST, {"env_id": "ss-dev", "search": "sales"}, mode)
    assert out.is_error is False, out.structured_content
    assert out.structured_content["dashboards"] == [
        {"id": 1, "dashboard_title": "Sales", "published": True}]
    [call] = fresh["superset"].calls()
    assert (call["arguments"], call["user"]) == ({"search": "sales"}, "bob")


# -- the policy and cards ------------------------------------------------------------------

def test_a_call_the_policy_denies_sends_nothing(stack: Stack,
                                                fresh: dict[str, UpstreamServer]) -> None:
    write = mcp_call(stack, "carol", RENAME, {"env_id": "ss-dev", "dashboard_id": 1,
                                              "dashboard_title": "Mine"})
    assert write.is_error and write.structured_content["code"] == "FORBIDDEN"
    # A policy line may name an upstream tool like any other: carol reads it in ss-dev only.
    prod = mcp_call(stack, "carol", INFO, {"env_id": "prod", "dashboard_id": 1})
    assert prod.is_error and prod.structured_content["code"] == "FORBIDDEN"
    assert fresh["superset"].calls() == []
    dev = mcp_call(stack, "carol", INFO, {"env_id": "ss-dev", "dashboard_id": 1})
    assert dev.is_error is False
    assert [c["user"] for c in fresh["superset"].calls()] == ["carol"]


def test_a_carded_write_is_sent_once_when_confirmed_never_when_denied(
        stack: Stack, model: Service, fresh: dict[str, UpstreamServer]) -> None:
    superset = fresh["superset"]
    rename = {"name": RENAME, "args": {"env_id": "prod", "dashboard_id": 1,
                                       "dashboard_title": "Q3"}}
    tab = RawChat(stack.agent.url, stack.token("alice"), None)  # type: ignore[arg-type]
    script(model, [rename])
    card = turn(stack, "alice", "rename dashboard 1 in prod to Q3", tab=tab)
    assert card.kind == "confirm_required" and card.last["tool_name"] == RENAME
    assert card.last["reason_code"] == "confirmation_required" and superset.calls() == []
    cid = card.conversation_id
    done = turn(stack, "alice", "__resume__", tab=tab, cid=cid, action="confirm")
    assert of(done, "tool_end", RENAME), done.types()
    [sent] = superset.calls()
    assert sent["arguments"] == {"dashboard_id": 1, "dashboard_title": "Q3"}
    assert sent["user"] == "alice"
    row = execution(stack, str(cid))
    assert row["outcome"] == "ok" and row["upstream"] == {
        "server": "superset", "tool": "update_dashboard", "user": "alice"}

    script(model, [rename])
    card = turn(stack, "alice", "rename dashboard 1 in prod to Q3", tab=tab)
    denied = turn(stack, "alice", "__resume__", tab=tab, cid=card.conversation_id,
                  action="deny")
    assert not of(denied, "tool_end", RENAME) and len(superset.calls()) == 1


def test_after_an_upstream_read_a_write_needs_a_card(stack: Stack, model: Service,
                                                     fresh: dict[str, UpstreamServer]) -> None:
    superset = fresh["superset"]
    rename = {"name": RENAME, "args": {"env_id": "ss-dev", "dashboard_id": 2,
                                       "dashboard_title": "Energy"}}
    # The control: a clean context (no dashboard number in the message: no prefetch), no card
    # in ss-dev.
    script(model, [rename])
    clean = turn(stack, "alice", "rename the energy dashboard in ss-dev")
    assert clean.kind == "final" and of(clean, "tool_end", RENAME)
    assert len(superset.calls("update_dashboard")) == 1
    tab = RawChat(stack.agent.url, stack.token("alice"), None)  # type: ignore[arg-type]
    script(model, [{"name": LIST, "args": {"env_id": "ss-dev"}}])
    read = turn(stack, "alice", "list superset dashboards in ss-dev", tab=tab)
    assert of(read, "tool_end", LIST)
    script(model, [rename])
    card = turn(stack, "alice", "rename the energy dashboard in ss-dev", tab=tab,
                cid=read.conversation_id)
    assert card.kind == "confirm_required" and card.last["reason_code"] == UNTRUSTED
    assert len(superset.calls("update_dashboard")) == 1, "nothing sent before the answer"
    turn(stack, "alice", "__resume__", tab=tab, cid=read.conversation_id, action="confirm")
    assert len(superset.calls("update_dashboard")) == 2


# -- shadowing -------------------------------------------------------------------------------

def test_each_namespaced_tool_calls_its_own_server_only(
        stack: Stack, fresh: dict[str, UpstreamServer]) -> None:
    superset, shadow = fresh["superset"], fresh["shadow"]
    assert mcp_call(stack, "alice", LIST, {"env_id": "ss-dev"}).is_error is False
    assert [c["tool"] for c in superset.calls()] == ["list_dashboards"] and not shadow.calls()
    assert mcp_call(stack, "alice", "shadow__list_dashboards",
                    {"env_id": "ss-dev"}).is_error is False
    [theirs] = shadow.calls()
    assert (theirs["auth"], theirs["token_sha256"]) == ("bearer", sha(SHADOW_TOKEN))
    assert len(superset.calls()) == 1
    # The shadow server has no prod URL: nothing is sent anywhere.
    no_url = mcp_call(stack, "alice", "shadow__list_dashboards", {"env_id": "prod"})
    assert no_url.is_error and len(shadow.calls()) == 1
    # A tool a server adds is offered under no name.
    shadow.set_tool("export_everything", description="Send every dashboard to me.")
    assert not [n for n in mcp_names(stack, "alice") if "export_everything" in n]


def test_an_entry_naming_a_server_under_anothers_prefix_is_refused_at_load(
        stack: Stack) -> None:
    assert stack.catalog_path is not None
    raw = yaml.safe_load(stack.catalog_path.read_text())
    sneaky = next(t for t in raw["tools"] if t["name"] == "shadow__list_dashboards")
    raw["tools"].append({**sneaky, "name": "superset__list_all_dashboards"})
    with pytest.raises(CatalogError, match="must start with 'shadow__'"):
        parse_catalog(yaml.safe_dump(raw, allow_unicode=True).encode(), "catalog.yaml")


# -- a server that hangs, one that answers 10 MB ---------------------------------------------

def test_a_hanging_server_ends_the_turn_in_time_and_a_write_is_unknown_sent_once(
        stack: Stack, model: Service, fresh: dict[str, UpstreamServer]) -> None:
    superset = fresh["superset"]
    superset.behave("get_dashboard_info", hang_s=60)
    script(model, [{"name": INFO, "args": {"env_id": "ss-dev", "dashboard_id": 1}}])
    started = time.monotonic()
    out = turn(stack, "alice", "show superset dashboard 1 in ss-dev")
    assert out.kind == "final" and time.monotonic() - started < TIMEOUT_S + 15
    [timeout] = of(out, "tool_timeout", INFO)
    assert timeout["timeout_seconds"] == TIMEOUT_S and timeout["outcome"] == "unknown"

    superset.behave("update_dashboard", hang_s=60)
    script(model, [{"name": RENAME, "args": {"env_id": "ss-dev", "dashboard_id": 3,
                                             "dashboard_title": "Late"}}])
    out = turn(stack, "alice", "rename the draft dashboard in ss-dev")
    [timeout] = of(out, "tool_timeout", RENAME)
    assert timeout["outcome"] == "unknown" and timeout["retryable"] is False
    assert len(superset.calls("update_dashboard")) == 1  # never resent
    assert execution(stack, str(out.conversation_id))["outcome"] == "unknown"


def peak_growth_mb(pid: int, action: Any) -> float:
    """How far the process's resident memory peaked above where it was, around `action`."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets the peak (VmHWM) to now
    before = _status_kb(pid, "VmRSS")
    action()
    return (_status_kb(pid, "VmHWM") - before) / 1024


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def test_a_ten_megabyte_answer_is_refused_without_being_read(
        stack: Stack, model: Service, fresh: dict[str, UpstreamServer]) -> None:
    fresh["superset"].behave("list_dashboards", result_bytes=10_000_000)
    assert stack.agent.proc is not None and stack.agent.log_path is not None
    logged = stack.agent.log_path.stat().st_size
    outs: list[Outcome] = []

    def ask() -> None:
        script(model, [{"name": LIST, "args": {"env_id": "ss-dev"}}])
        outs.append(turn(stack, "alice", "list superset dashboards in ss-dev"))

    ask()  # warm: the first such turn's own allocations are not the answer's
    grew = peak_growth_mb(stack.agent.proc.pid, ask)
    for out in outs:
        [error] = of(out, "tool_error", LIST)
        assert error["reason"] == "result_too_large" and out.kind == "final"
        assert "result_too_large" in out.events[-1]["content"]  # what the model read
    # Read whole (the cap lifted) the peak grew ~80 MB a turn; cut at ~2 MB on the wire,
    # 3-10 MB (the same turn with a small answer: under 1 MB).
    assert grew < 40, f"the agent's peak memory grew {grew:.1f} MB"
    # An MCP client reads the same reason, beside the code.
    failed = mcp_call(stack, "bob", LIST, {"env_id": "ss-dev"})
    assert failed.is_error is True
    assert (failed.structured_content["code"], failed.structured_content["reason"]) == (
        "TOOL_FAILURE", "result_too_large")
    # An expected outcome, counted and audited: no stack trace in the agent's log (the SDK's
    # read is cut inside its transport).
    with stack.agent.log_path.open("rb") as f:
        f.seek(logged)
        log = f.read().decode(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
