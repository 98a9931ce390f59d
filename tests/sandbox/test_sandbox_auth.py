"""The sandbox's two-token authentication, driven over HTTP against a real process.

A valid pair is accepted and audited with both actors; every bad token of
tests/testkit/attacks.py, on either header, is answered 401 and audits nothing (and executes
nothing).
"""

from __future__ import annotations

import httpx
import pytest
import test_sandbox_fixtures as fx
from test_sandbox_fixtures import Keys, SandboxClient, log_of

from testkit.attacks import SERVICE_ATTACKS, USER_ATTACKS, service_attacks, user_attacks
from testkit.support import Service

# The shared fixtures, registered in this module under their names.
api, sandbox_keys, sandbox_service = fx.api, fx.sandbox_keys, fx.sandbox_service


def test_valid_pair_is_accepted_and_audited_with_both_actors(api: SandboxClient) -> None:
    r = api.call("GET", "/api/health", user="bob", params={"env_id": "ss-dev",
                                                           "dashboard_id": 42})
    assert r.status_code == 200, r.text
    assert r.json()["title"] == "Отчёт по энергопотреблению"
    assert api.audit() == [{
        "ts": api.audit()[0]["ts"], "service_actor": "agentchat-agent", "user_actor": "bob",
        "operation": "get_health_summary", "env": "ss-dev",
        "args": {"env_id": "ss-dev", "dashboard_id": 42}, "outcome": "ok",
        "idempotency_key": None, "decision_id": None, "trace_id": None, "cookie": None,
    }]
    # Superset's Flask session, as ss-tools sets it: for this user, on every answer.
    assert r.cookies["session"].startswith("bob.")


def _deploy(api: SandboxClient, headers: dict[str, str]) -> httpx.Response:
    return api.http.post("/api/dashboards/42/deploy", json={"env_id": "ss-dev"},
                         headers={**headers, "Idempotency-Key": "attack"})


@pytest.mark.parametrize("attack", USER_ATTACKS)
def test_bad_user_token_is_401_and_audits_nothing(api: SandboxClient, sandbox_keys: Keys,
                                                  attack: str) -> None:
    k = sandbox_keys
    token = user_attacks(k.settings, k.issuer, k.ring)[attack]
    r = _deploy(api, {"Authorization": f"Bearer {k.service_token()}", "X-User-JWT": token})
    assert r.status_code == 401, r.text
    assert r.json()["code"] == "UNAUTHORIZED"
    assert "X-User-JWT" in r.json()["detail"]
    assert token not in r.text
    assert api.audit() == []
    # Nothing ran either: the same key from a good caller still executes.
    ok = _deploy(api, k.headers())
    assert ok.status_code == 202 and api.outcomes() == ["ok"]


@pytest.mark.parametrize("attack", SERVICE_ATTACKS)
def test_bad_service_token_is_401_and_audits_nothing(api: SandboxClient, sandbox_keys: Keys,
                                                     attack: str) -> None:
    k = sandbox_keys
    token = service_attacks(k.settings, k.issuer, k.ring)[attack]
    r = _deploy(api, {"Authorization": f"Bearer {token}", "X-User-JWT": k.issuer.mint("alice")})
    assert r.status_code == 401, r.text
    assert r.json()["code"] == "UNAUTHORIZED"
    assert "service token" in r.json()["detail"]
    assert token not in r.text
    assert api.audit() == []
    assert _deploy(api, k.headers()).status_code == 202 and api.outcomes() == ["ok"]


@pytest.mark.parametrize("headers", [
    {},
    {"X-User-JWT": "set below"},
    {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
    {"Authorization": "Bearer"},
], ids=["none", "user-only", "basic", "empty-bearer"])
def test_missing_or_malformed_headers_are_401(api: SandboxClient, sandbox_keys: Keys,
                                              headers: dict[str, str]) -> None:
    if "X-User-JWT" in headers:
        headers = {"X-User-JWT": sandbox_keys.issuer.mint("alice")}
    r = api.http.get("/api/dashboards", headers=headers)
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
    no_user = api.http.get("/api/dashboards", headers={
        "Authorization": f"Bearer {sandbox_keys.service_token()}"})
    assert no_user.status_code == 401
    assert api.audit() == []


def test_audit_endpoint_needs_both_tokens(api: SandboxClient, sandbox_keys: Keys) -> None:
    r = api.http.get("/api/audit", headers={
        "Authorization": f"Bearer {sandbox_keys.service_token()}"})
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"


def test_service_token_endpoint(api: SandboxClient) -> None:
    r = api.http.post("/api/auth/service-token",
                      json={"client_id": "agentchat-agent", "client_secret": "dev-client-secret"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] > 0
    user = api.keys.issuer.mint("carol")
    ok = api.http.get("/api/environments", headers={
        "Authorization": f"Bearer {body['access_token']}", "X-User-JWT": user})
    assert ok.status_code == 200, ok.text
    assert api.audit()[-1]["service_actor"] == "agentchat-agent"
    assert api.audit()[-1]["user_actor"] == "carol"


@pytest.mark.parametrize("body", [
    {"client_id": "agentchat-agent", "client_secret": "wrong"},
    {"client_id": "someone-else", "client_secret": "dev-client-secret"},
    {"client_id": "agentchat-agent", "client_secret": ""},
])
def test_service_token_refused_for_a_wrong_client(api: SandboxClient,
                                                  body: dict[str, str]) -> None:
    r = api.http.post("/api/auth/service-token", json=body)
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
    assert "access_token" not in r.json()


def test_service_token_request_errors_do_not_echo_the_secret(api: SandboxClient) -> None:
    r = api.http.post("/api/auth/service-token", json={"client_secret": "s3cr3t-value"})
    assert r.status_code == 422 and r.json()["code"] == "INVALID_REQUEST"
    assert "s3cr3t-value" not in r.text


def test_tokens_never_reach_the_log(api: SandboxClient, sandbox_service: Service,
                                    sandbox_keys: Keys) -> None:
    headers = sandbox_keys.headers("bob")
    api.http.get("/api/dashboards", params={"query": "энергия"}, headers=headers)
    api.http.get("/api/dashboards", headers={**headers, "X-User-JWT": "not-a-jwt"})
    log = log_of(sandbox_service)
    assert "/api/dashboards" in log  # the log is the access log we mean
    for token in (headers["Authorization"].split()[1], headers["X-User-JWT"]):
        assert token not in log
