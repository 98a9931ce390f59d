"""Nothing crosses from one user or site to another, from outside: real sandbox, sidecar,
agent and PostgreSQL.

- **Cookies** (docs/protocol.md §7). The sandbox, like ss-tools' Flask, sets a session cookie
  for its user on every answer and records the `Cookie` each call carries: after alice's
  turn called it, bob's turn through the same agent (one shared HTTP client) carries none.
- **Cross-site writes** (docs/protocol.md §9). A browser's request from another site to a
  route that changes something (create, delete, restore, rename, append, branch, cancel,
  revoke) is 403 `FORBIDDEN` and changes nothing; same-origin, an allowed origin, and a
  client that sends neither `Origin` nor `Sec-Fetch-Site` (curl, the ss-tools backend) pass.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from agentchat.agent.api.deps import same_site
from agentchat.agent.settings import AgentSettings
from agentchat.errors import AgentChatError, ErrorCode
from testkit.reliability import say
from testkit.rest import api, create, fresh_user, history, listing, ok
from testkit.stack import Stack


def test_a_cookie_ss_tools_sets_for_alice_never_goes_out_on_bobs_call(stack: Stack) -> None:
    assert stack.sandbox is not None
    # The sandbox does set one, for the caller, on a tool's answer.
    direct = httpx.get(stack.sandbox.url + "/api/dashboards",
                       params={"env_id": "ss-dev", "query": "энерго"}, timeout=10,
                       headers={"Authorization": f"Bearer {stack.service_token()}",
                                "X-User-JWT": stack.token("alice")})
    assert direct.status_code == 200, direct.text
    assert direct.cookies["session"].startswith("alice.")
    stack.reset_sandbox()

    for user in ("alice", "bob", "alice"):
        out = say(stack.agent, stack.token(user), "найди дашборды про энергопотребление в ss-dev",
                  timeout=60)
        assert out.kind == "final", out.types()
    calls = stack.audit(operation="search_dashboards")
    assert [a["user_actor"] for a in calls] == ["alice", "bob", "alice"], calls
    assert [a["cookie"] for a in calls] == [None, None, None], calls


EVIL = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}


def _as_browser(stack: Stack, token: str, method: str, path: str, headers: dict[str, str],
                **kw: Any) -> httpx.Response:
    return httpx.request(method, stack.agent.url + path, timeout=30, **kw,
                         headers={"Authorization": f"Bearer {token}", **headers})


def test_a_cross_site_browser_request_changes_nothing(stack: Stack) -> None:
    token = fresh_user(stack)
    cid = create(stack, token, "keep me")["id"]
    gone = create(stack, token, "archived")["id"]
    ok(api(stack, "DELETE", f"/api/assistant/conversations/{gone}", token))
    writes: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/api/assistant/conversations", {}),
        ("POST", "/api/assistant/conversations", {"json": {"title": "x"}}),
        ("DELETE", f"/api/assistant/conversations/{cid}", {}),
        ("POST", f"/api/assistant/conversations/{gone}/restore", {}),
        ("PATCH", f"/api/assistant/conversations/{cid}", {"json": {"title": "renamed"}}),
        ("POST", f"/api/assistant/conversations/{cid}/messages",
         {"json": {"id": str(uuid.uuid4()), "role": "user", "content": "hi"}}),
        ("POST", f"/api/assistant/conversations/{cid}/branch",
         {"json": {"message_id": str(uuid.uuid4())}}),
        ("POST", f"/api/agent/conversations/{cid}/runs/{uuid.uuid4()}/cancel",
         {"json": {"tab_id": "t1"}}),
        ("DELETE", f"/api/agent/grants/{uuid.uuid4()}", {}),
        ("POST", f"/api/agent/approvals/{uuid.uuid4()}",
         {"json": {"decision": "approve", "args_digest": "sha256:00"}}),
    ]
    host = stack.agent.url.split("//", 1)[1]
    refusing = [EVIL, {"Origin": "https://evil.example"},  # a browser without Fetch Metadata
                {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"},
                # a sibling subdomain is the same site, not the same origin
                {"Origin": "https://other.example", "Sec-Fetch-Site": "same-site"},
                {"Origin": f"http://{host}", "Sec-Fetch-Site": "cross-site"}]
    for headers in refusing:
        for method, path, kw in writes:
            resp = _as_browser(stack, token, method, path, headers, **kw)
            assert (resp.status_code, resp.json()["code"]) == (403, "FORBIDDEN"), (
                headers, method, path, resp.text)
    items = {c["id"]: c for c in listing(stack, token, include_archived="true")["items"]}
    assert sorted(items) == sorted([cid, gone])  # nothing created
    assert (items[cid]["title"], items[cid]["is_archived"]) == ("keep me", False)
    assert items[gone]["is_archived"] is True
    assert history(stack, token, cid)["items"] == []
    # Reads are not refused: a page elsewhere cannot read them anyway (no CORS).
    assert _as_browser(stack, token, "GET", "/api/assistant/conversations", EVIL
                       ).status_code == 200


def test_same_origin_browsers_and_non_browser_clients_may_write(stack: Stack) -> None:
    token = fresh_user(stack)
    host = stack.agent.url.split("//", 1)[1]
    passing = [{}, {"Sec-Fetch-Site": "same-origin", "Origin": stack.agent.url},
               {"Sec-Fetch-Site": "none"},  # typed by the person
               {"Origin": stack.agent.url},  # a browser without Fetch Metadata, same host
               {"Origin": f"http://{host.upper()}"}]
    for headers in passing:
        made = _as_browser(stack, token, "POST", "/api/assistant/conversations", headers)
        assert made.status_code == 201, (headers, made.text)
        cid = made.json()["id"]
        for method, path in (("DELETE", f"/api/assistant/conversations/{cid}"),
                             ("POST", f"/api/assistant/conversations/{cid}/restore")):
            resp = _as_browser(stack, token, method, path, headers)
            assert resp.status_code == 200, (headers, method, resp.text)
    assert len(listing(stack, token)["items"]) == len(passing)


def test_configured_origins_may_write(monkeypatch: Any) -> None:
    """AGENTCHAT_AGENT_ALLOWED_ORIGINS and AGENTCHAT_AGENT_PUBLIC_URL's origin pass, named
    however (a path, a trailing slash, capitals); others do not."""
    monkeypatch.setenv("AGENTCHAT_AGENT_ALLOWED_ORIGINS", '["https://SS.example.com/"]')
    monkeypatch.setenv("AGENTCHAT_AGENT_PUBLIC_URL", "https://panel.example.com/base/")
    services = SimpleNamespace(settings=AgentSettings(mode="dev"))

    def call(origin: str, site: str | None = "cross-site") -> None:
        headers = [(b"origin", origin.encode()), (b"host", b"agent.internal:7860")]
        if site is not None:
            headers.append((b"sec-fetch-site", site.encode()))
        same_site(Request({"type": "http", "method": "POST", "headers": headers}),
                  services)  # type: ignore[arg-type]

    call("https://ss.example.com")
    call("https://panel.example.com", "same-site")
    call("https://panel.example.com", None)
    for origin in ("https://ss.example.com:8443", "http://ss.example.com",
                   "https://evil.example"):
        with pytest.raises(AgentChatError) as refused:
            call(origin)
        assert refused.value.code == ErrorCode.FORBIDDEN
