"""The sandbox playing the user tokens' issuer's token exchange (RFC 8693), over HTTP against
a real process: an MCP token of a person becomes an ss-tools user token of the same person
(same roles, `act` naming the client) that the sandbox's API accepts; anything else is an
RFC 6749 error, and the journal tells what reached the API."""

from __future__ import annotations

import time

import jwt
import test_sandbox_fixtures as fx
from test_sandbox_fixtures import SandboxClient

from agentchat.sandbox.exchange import GRANT, digest

api, sandbox_keys, sandbox_service = fx.api, fx.sandbox_keys, fx.sandbox_service

MCP = "http://127.0.0.1:7860/api/agent/mcp"
CLIENT = ("agentchat-agent", "dev-client-secret")  # the sandbox's dev client


def _exchange(api: SandboxClient, subject: str, *, auth: tuple[str, str] = CLIENT,
              **form: str) -> dict[str, object]:
    body = {"grant_type": GRANT, "subject_token": subject,
            "subject_token_type": "urn:ietf:params:oauth:token-type:access_token", **form}
    r = api.http.post("/api/auth/token", data=body, auth=auth)
    return {"status": r.status_code, **r.json()}


def test_an_mcp_token_becomes_a_user_token_of_the_same_person(api: SandboxClient) -> None:
    keys = api.keys
    mcp = keys.issuer.mint("bob", extra={"aud": MCP, "azp": "claude-code"})
    out = _exchange(api, mcp, audience=keys.settings.user_audience)
    assert out["status"] == 200, out
    assert out["token_type"] == "Bearer"
    assert out["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    assert 0 < int(str(out["expires_in"])) <= 900
    token = str(out["access_token"])
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "bob" and claims["aud"] == keys.settings.user_audience
    assert claims["roles"] == ["editor@ss-dev", "editor@ss-stage", "viewer@prod"]
    assert claims["act"] == {"sub": "agentchat-agent"}
    # ss-tools' API accepts it as bob's; the MCP token itself it refuses.
    svc = {"Authorization": f"Bearer {keys.service_token()}"}
    ok = api.http.get("/api/health", params={"env_id": "ss-dev", "dashboard_id": 42},
                      headers={**svc, "X-User-JWT": token})
    assert ok.status_code == 200, ok.text
    refused = api.http.get("/api/health", params={"env_id": "ss-dev", "dashboard_id": 42},
                           headers={**svc, "X-User-JWT": mcp})
    assert refused.status_code == 401
    seen = api.http.get("/api/sandbox/tokens").json()
    assert seen["exchanged"] == [digest(mcp)]
    assert digest(token) in seen["seen"] and digest(mcp) in seen["seen"]


def test_the_exchanged_token_never_outlives_its_subject(api: SandboxClient) -> None:
    mcp = api.keys.issuer.mint("alice", lifetime_s=120, extra={"aud": MCP})
    out = _exchange(api, mcp)
    assert out["status"] == 200, out
    exp = jwt.decode(str(out["access_token"]), options={"verify_signature": False})["exp"]
    assert exp <= time.time() + 121


def test_refusals_are_oauth_errors(api: SandboxClient) -> None:
    keys = api.keys
    mcp = keys.issuer.mint("alice", extra={"aud": MCP})
    assert _exchange(api, mcp, auth=("agentchat-agent", "wrong"))["error"] == "invalid_client"
    assert _exchange(api, mcp, grant_type="client_credentials")["error"] == \
        "unsupported_grant_type"
    # A token already for ss-tools needs no exchange; an expired or forged one is refused.
    for subject in (keys.issuer.mint("alice"),
                    keys.issuer.mint("alice", extra={"aud": MCP}, now=time.time() - 9000,
                                     lifetime_s=60),
                    mcp[:-4] + "AAAA"):
        out = _exchange(api, subject)
        assert (out["status"], out.get("error")) == (400, "invalid_grant"), out
    assert _exchange(api, mcp, audience="elsewhere")["error"] == "invalid_target"
