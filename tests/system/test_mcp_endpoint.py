"""The MCP endpoint as an OAuth resource server, from outside (docs/protocol.md §12): real
sandbox (also playing the issuer's token exchange), sidecar, agent and PostgreSQL; the
official SDK's client in both protocol eras, and raw JSON-RPC where a test must send what the
client would not.

- RFC 9728 metadata at the well-known path; no token or a bad one: 401 naming it.
- Tokens by audience (RFC 8707): a /chat token is 401 here, an MCP token 401 on /chat and
  REST, a token for both serves neither.
- `Origin` not allowed: 403 before the token is looked at; a `Host` not ours: 421.
- A body over the limit: 413; a user's tools/calls over the minute: 429 with Retry-After.
- The MCP token is exchanged once (RFC 8693) and never reaches ss-tools.
- Gradio's own MCP server stays off whatever GRADIO_MCP_SERVER says.
- `agentchat token --audience mcp` and `agentchat mcp config` print what a client needs.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentchat.sandbox.exchange import digest
from testkit.mcp_client import MODERN, connect, mcp_token, mcp_url, rpc
from testkit.reliability import say
from testkit.stack import Stack
from testkit.support import Service

ALLOWED = "https://panel.example"
INIT = {"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}


@pytest.fixture(scope="module")
def strict(stack: Stack) -> Iterator[Service]:
    """A second agent on the same stack: two tools/calls a minute, an allowed origin, and
    GRADIO_MCP_SERVER set (which must change nothing)."""
    agent = stack.start_agent(
        AGENTCHAT_AGENT_TUNING__MAX_REST_WRITES_PER_MINUTE_PER_USER="2",
        AGENTCHAT_AGENT_ALLOWED_ORIGINS=json.dumps([ALLOWED]), GRADIO_MCP_SERVER="true")
    yield agent


def test_the_protected_resource_metadata(stack: Stack) -> None:
    r = httpx.get(stack.agent.url + "/.well-known/oauth-protected-resource/api/agent/mcp",
                  timeout=10)
    assert r.status_code == 200, r.text
    assert r.json() == {"resource": mcp_url(stack), "authorization_servers": ["ss-tools"],
                        "bearer_methods_supported": ["header"],
                        "resource_name": "AgentChat: ss-tools through the gate"}


def test_no_token_or_a_bad_one_is_401_naming_the_metadata(stack: Stack) -> None:
    meta = f'resource_metadata="{stack.agent.url}/.well-known/oauth-protected-resource' \
           '/api/agent/mcp"'
    r = rpc(mcp_url(stack), None, "initialize", INIT)
    assert r.status_code == 401, r.text
    assert r.json()["code"] == "UNAUTHORIZED"
    assert r.headers["www-authenticate"] == f"Bearer {meta}"
    for bad in (stack.token("alice"),  # a /chat token: another audience
                stack.token("alice", extra={"aud": [mcp_url(stack), "agentchat"]}),  # both
                mcp_token(stack, "alice", lifetime_s=1, now=0),  # expired
                "not-a-jwt"):
        r = rpc(mcp_url(stack), bad, "initialize", INIT)
        assert r.status_code == 401, (bad[:20], r.text)
        assert r.headers["www-authenticate"] == f'Bearer {meta}, error="invalid_token"'
        assert bad not in r.text


def test_an_mcp_token_serves_mcp_in_both_eras_and_nothing_else(stack: Stack) -> None:
    token = mcp_token(stack, "alice")
    r = rpc(mcp_url(stack), token, "initialize", INIT)
    assert r.status_code == 200, r.text
    assert r.json()["result"]["serverInfo"]["name"] == "agentchat"
    assert "mcp-session-id" not in r.headers  # stateless: any replica answers any request

    async def both() -> None:
        async with connect(mcp_url(stack), token, mode=MODERN) as modern:
            assert modern.protocol_version == MODERN
        async with connect(mcp_url(stack), token, mode="legacy") as legacy:
            assert legacy.protocol_version == "2025-11-25"
            assert legacy.server_info is not None and legacy.server_info.name == "agentchat"

    asyncio.run(both())
    # Refused on REST and on /chat: 401 UNAUTHORIZED, nothing stored.
    r = httpx.get(stack.agent.url + "/api/assistant/conversations",
                  headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED", r.text
    out = say(stack.agent, token, "найди дашборды про энергопотребление в ss-dev", timeout=60)
    assert out.kind == "error" and out.last["code"] == "UNAUTHORIZED", out.last


def test_an_origin_not_allowed_is_403_before_the_token(stack: Stack, strict: Service) -> None:
    token = mcp_token(stack, "alice", agent=1)
    url = strict.url + "/api/agent/mcp"
    for origin in ("https://evil.example", "null", ALLOWED + ".evil.example"):
        for sent in (None, token):
            r = rpc(url, sent, "initialize", INIT, headers={"Origin": origin})
            assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", (origin, r.text)
    ok = rpc(url, token, "initialize", INIT, headers={"Origin": ALLOWED})
    assert ok.status_code == 200, ok.text
    # DNS rebinding: a Host that is not ours is refused by the SDK's own check.
    rebound = rpc(url, token, "initialize", INIT, headers={"Host": "evil.example:7860"})
    assert rebound.status_code == 421, rebound.text


def test_body_and_rate_limits(stack: Stack, strict: Service) -> None:
    token = mcp_token(stack, "carol", agent=1)
    url = strict.url + "/api/agent/mcp"
    big = rpc(url, token, "tools/call", {"name": "search_dashboards",
                                          "arguments": {"query": "x" * (1 << 20)}})
    assert big.status_code == 413, big.text
    call = {"name": "search_dashboards", "arguments": {"env_id": "ss-dev", "query": "энерго"}}
    statuses = [rpc(url, token, "tools/call", call).status_code for _ in range(3)]
    assert statuses[:2] == [200, 200], statuses
    limited = rpc(url, token, "tools/call", call)
    assert limited.status_code == 429 and limited.json()["code"] == "RATE_LIMITED"
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    # Another user's minute is their own; listing is not a call.
    assert rpc(url, mcp_token(stack, "bob", agent=1), "tools/call", call).status_code == 200
    assert rpc(url, token, "tools/list", {}).status_code == 200


def test_the_mcp_token_is_exchanged_once_and_never_reaches_ss_tools(stack: Stack) -> None:
    assert stack.sandbox is not None
    stack.reset_sandbox()
    token = mcp_token(stack, "bob")
    for _ in range(3):
        r = rpc(mcp_url(stack), token, "tools/list", {})
        assert r.status_code == 200, r.text
    r = rpc(mcp_url(stack), token, "tools/call",
            {"name": "search_dashboards", "arguments": {"env_id": "ss-dev",
                                                         "query": "энергопотребление"}})
    assert r.status_code == 200 and not r.json()["result"]["isError"], r.text
    seen = httpx.get(stack.sandbox.url + "/api/sandbox/tokens", timeout=10).json()
    assert seen["exchanged"] == [digest(token)]  # one exchange, kept for every later call
    assert digest(token) not in seen["seen"]
    assert [a["user_actor"] for a in stack.audit(operation="search_dashboards")] == ["bob"]


def test_gradio_mounts_no_mcp_server_whatever_the_environment_says(strict: Service) -> None:
    base = strict.url + "/api/agent/gradio"
    config = httpx.get(base + "/config", timeout=10)
    assert config.status_code == 200 and config.json().get("mcp_server") is False
    for path in ("/gradio_api/mcp/sse", "/gradio_api/mcp/schema", "/gradio_api/mcp/",
                 "/gradio_api/mcp/messages/", "/gradio_api/mcp/http/"):
        for method in ("GET", "POST"):
            r = httpx.request(method, base + path, timeout=10)
            assert r.status_code == 404, (method, path, r.status_code)


def _cli(stack: Stack, *args: str) -> str:
    env = {**os.environ, "AGENTCHAT_MODE": "dev", "AGENTCHAT_DATA_DIR": str(stack.data_dir),
           "AGENTCHAT_AGENT_PORT": str(stack.agent.port)}
    exe = Path(sys.executable).parent / "agentchat"
    done = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout


def test_the_cli_prints_a_token_and_a_client_configuration(stack: Stack) -> None:
    token = _cli(stack, "token", "--user", "alice", "--audience", "mcp").strip()
    assert rpc(mcp_url(stack), token, "initialize", INIT).status_code == 200
    config = json.loads(_cli(stack, "mcp", "config", "--user", "alice"))
    server = config["mcpServers"]["agentchat"]
    assert server["type"] == "http" and server["url"] == mcp_url(stack)
    header = server["headers"]["Authorization"]

    async def listed() -> list[str]:
        async with connect(server["url"], header.removeprefix("Bearer ")) as client:
            return [t.name for t in (await client.list_tools()).tools]

    assert "agentchat_call_result" in asyncio.run(listed())
    # The chat token stays the default.
    chat = _cli(stack, "token", "--user", "alice").strip()
    assert say(stack.agent, chat, "привет", timeout=60).kind == "final"


def test_the_readmes_three_lines_work_as_written(stack: Stack, tmp_path: Path) -> None:
    """README, "Any MCP client through the gate": the first two lines as a shell runs them at
    a checkout (here a folder with the checkout's .venv, the demo's port being the stack's);
    the third, `claude`, is Claude Code reading .mcp.json: the SDK's client reads it here."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "README.md").read_text().split("**Any MCP client through the gate**", 1)[1]
    lines = text.split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(lines) == 3 and lines[2] == "claude", lines
    (tmp_path / ".venv").symlink_to(root / ".venv")
    env = {**os.environ, "AGENTCHAT_DATA_DIR": str(stack.data_dir),
           "AGENTCHAT_AGENT_PORT": str(stack.agent.port)}
    env.pop("AGENTCHAT_MODE", None)
    subprocess.run(["bash", "-euc", "\n".join(lines[:2])], cwd=tmp_path, env=env, check=True,
                   timeout=60)
    server = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["agentchat"]

    async def health() -> dict[str, object]:
        bearer = server["headers"]["Authorization"].removeprefix("Bearer ")
        async with connect(server["url"], bearer) as client:
            out = await client.call_tool("get_health_summary",
                                         {"env_id": "ss-dev", "dashboard_id": 42})
            assert not out.is_error, out
            return dict(out.structured_content)

    assert asyncio.run(health())["title"] == "Отчёт по энергопотреблению"
