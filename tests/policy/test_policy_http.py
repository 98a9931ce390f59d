"""The policy sidecar over HTTP, as a real process (`agentchat policy serve`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentchat.identity import DevUserIssuer
from agentchat.keys import KeyRing, load_ring, new_key, save_ring, sign_service_token
from agentchat.settings import SharedSettings
from testkit.attacks import SERVICE_ATTACKS, USER_ATTACKS, service_attacks, user_attacks
from testkit.policy import PolicyClient, configmap_folder, sidecar, swap_configmap
from testkit.support import eventually
from testkit.synthetic_policies import SHIPPED_POLICY

CARD_FIELDS = {"request_id", "decision_id", "decision", "allow", "reason_code", "tool", "risk",
               "risk_level", "dangerous", "confirmation_required", "env_context",
               "permission_granted", "required_role", "alternatives", "policy_revision", "detail",
               "approval", "may_approve", "args_digest"}
LOG_FIELDS = {"ts", "decision_id", "request_id", "service.sub", "user.sub", "roles", "env",
              "source_env", "context", "tool", "args_digest", "decision", "reason_code", "risk",
              "confirmation_required", "policy_revision", "latency_us"}


def _service_token(settings: SharedSettings, ring: KeyRing) -> str:
    return sign_service_token(ring, issuer=settings.service_issuer,
                              audience=settings.service_audience)


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    return configmap_folder(tmp_path / "policy")


@pytest.fixture
def client(settings: SharedSettings, ring: KeyRing, issuer: DevUserIssuer, policy_dir: Path,
           tmp_path: Path) -> Iterator[PolicyClient]:
    with sidecar(settings.data_dir, policy_dir, tmp_path) as svc:
        yield PolicyClient(svc.url, _service_token(settings, ring))


def test_allow_confirm_and_deny_with_alternatives(client: PolicyClient, issuer: DevUserIssuer,
                                                   tmp_path: Path) -> None:
    alice, bob, carol = (issuer.mint(u) for u in ("alice", "bob", "carol"))

    read = client.check(carol, "get_health_summary", "prod", env_id="prod")
    assert read.status_code == 200
    body = read.json()
    assert set(body) == CARD_FIELDS
    assert (body["decision"], body["allow"], body["reason_code"], body["risk"],
            body["risk_level"], body["dangerous"], body["confirmation_required"],
            body["permission_granted"], body["env_context"]) == (
        "allow", True, "allowed", "read", "safe", False, False, True, "prod")

    deploy = client.check(alice, "deploy_dashboard", "prod", env_id="prod", dashboard_id=42).json()
    assert (deploy["decision"], deploy["risk"], deploy["risk_level"], deploy["dangerous"],
            deploy["confirmation_required"], deploy["env_context"], deploy["required_role"]) == (
        "allow_with_confirmation", "write", "guarded", False, True, "prod", None)
    # Who answers the card (issue 34): someone else in prod, and alice (admin) may approve.
    assert (deploy["approval"]["mode"], deploy["approval"]["approvers"],
            deploy["approval"]["quorum"], deploy["may_approve"]) == (
        "other", ["approver", "admin"], 1, True)
    assert read.json()["approval"] is None and read.json()["may_approve"] is False
    assert client.check(bob, "deploy_dashboard", "ss-dev", env_id="ss-dev",
                        dashboard_id=42).json()["decision"] == "allow"

    delete = client.check(alice, "delete_dashboard", "ss-dev", env_id="ss-dev",
                          dashboard_id=1).json()
    assert (delete["decision"], delete["risk_level"], delete["dangerous"]) == (
        "allow_with_confirmation", "dangerous", True)

    denied = client.check(bob, "deploy_dashboard", "prod", env_id="prod", dashboard_id=42).json()
    assert (denied["decision"], denied["allow"], denied["permission_granted"],
            denied["reason_code"], denied["required_role"]) == (
        "deny", False, False, "role_missing", "editor")
    assert denied["alternatives"] == [
        {"action": "get_health_summary", "prompt": "Запросить отчёт о состоянии дашборда"},
        {"action": "export_config", "prompt": "Экспортировать конфигурацию дашборда"}]

    # Alternatives list only what this user may run: nobody-in-prod gets none.
    stranger = issuer.mint("dave", ["viewer@ss-dev"])
    none_left = client.check(stranger, "deploy_dashboard", "prod", env_id="prod",
                             dashboard_id=42).json()
    assert (none_left["decision"], none_left["alternatives"]) == ("deny", [])

    rule = client.check(issuer.mint("erin", ["editor"]), "start_maintenance", "prod",
                        env_id="prod").json()
    assert (rule["decision"], rule["reason_code"], rule["required_role"]) == (
        "deny", "denied_by_rule", "oncall")

    # Migration: read on the source, the tool's own permission on the target.
    mig = client.check(bob, "start_migration", "ss-stage", dashboard_id=1,
                       source_env="ss-dev", target_env="ss-stage").json()
    assert (mig["decision"], mig["env_context"]) == ("allow_with_confirmation", "ss-stage")
    into_prod = client.check(bob, "start_migration", "prod", dashboard_id=1,
                             source_env="ss-dev", target_env="prod").json()
    assert (into_prod["decision"], into_prod["required_role"]) == ("deny", "editor")

    for tool, env, reason in (("format_disk", "prod", "unknown_tool"),
                              ("search_dashboards", "qa", "unknown_environment")):
        out = client.check(alice, tool, env, env_id=env).json()
        assert (out["decision"], out["reason_code"]) == ("deny", reason)
        assert out["detail"]
    assert client.check(alice, "format_disk").json()["dangerous"] is True
    mismatch = client.check(alice, "deploy_dashboard", "ss-dev", env_id="prod",
                            dashboard_id=42).json()
    assert (mismatch["decision"], mismatch["reason_code"]) == ("deny", "invalid_arguments")
    assert mismatch["detail"] == "the request's environment 'ss-dev' differs from env_id='prod'"

    # The decision log: one JSON line per decision, with every field, and never a token.
    lines = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert len(lines) == 13
    assert set(lines[0]) == LOG_FIELDS
    assert lines[0]["context"] == {"untrusted": False}
    assert lines[4]["user.sub"] == "bob" and lines[4]["roles"] == [
        "editor@ss-dev", "editor@ss-stage", "viewer@prod"]
    assert lines[4]["decision_id"] == denied["decision_id"]
    # A migration's source environment is logged (a replay needs it); no other argument is.
    assert [(x["tool"], x["env"], x["source_env"]) for x in lines[7:9]] == [
        ("start_migration", "ss-stage", "ss-dev"), ("start_migration", "prod", "ss-dev")]
    assert {x["source_env"] for x in lines if x["tool"] != "start_migration"} == {None}
    everything = (tmp_path / "decisions.jsonl").read_text() + (tmp_path / "sidecar.log").read_text()
    for token in (alice, bob, carol, client.service_token):
        assert token not in everything and token.split(".")[2] not in everything


def test_batch_and_permissions(client: PolicyClient, issuer: DevUserIssuer) -> None:
    bob = issuer.mint("bob")
    batch = client.post("/v1/checks", bob, {"checks": [
        {"request_id": "a", "environment": "prod", "tool": "search_dashboards",
         "arguments": {"env_id": "prod"}},
        {"request_id": "b", "environment": "prod", "tool": "refresh_dataset",
         "arguments": {"env_id": "prod", "dataset_id": 3}},
    ]})
    assert batch.status_code == 200
    assert [(r["request_id"], r["decision"]) for r in batch.json()["results"]] == [
        ("a", "allow"), ("b", "deny")]
    perms = client.post("/v1/permissions", bob, {"environment": "ss-stage"}).json()
    by_tool = {t["tool"]: t for t in perms["tools"]}
    assert by_tool["deploy_dashboard"]["decision"] == "allow_with_confirmation"
    assert by_tool["refresh_dataset"]["decision"] == "allow"
    assert by_tool["delete_dashboard"] == {
        "tool": "delete_dashboard", "allow": False, "decision": "deny", "risk": "destructive",
        "risk_level": "dangerous", "dangerous": True, "confirmation_required": False}
    bad = client.post("/v1/permissions", "garbage", {"environment": "prod"}).json()
    assert (bad["reason_code"], bad["tools"]) == ("user_token_invalid:malformed", [])


def test_every_bad_token_on_both_headers(client: PolicyClient, settings: SharedSettings,
                                         issuer: DevUserIssuer, ring: KeyRing) -> None:
    alice = issuer.mint("alice")
    for name, token in service_attacks(settings, issuer, ring).items():
        r = client.check(alice, "search_dashboards", service_token=token)
        expected = 413 if name == "oversized" else 401
        assert r.status_code == expected, (name, r.text)
        assert r.json()["code"] == ("INVALID_REQUEST" if expected == 413 else "UNAUTHORIZED")
    assert set(SERVICE_ATTACKS) >= {"swapped_user_token"}

    for name, token in user_attacks(settings, issuer, ring).items():
        r = client.check(token, "search_dashboards")
        if name == "oversized":
            assert r.status_code == 413, r.text
            continue
        assert r.status_code == 200, (name, r.text)
        body = r.json()
        assert (body["decision"], body["allow"], body["permission_granted"]) == (
            "deny", False, False), name
        assert body["reason_code"].startswith("user_token_invalid:"), (name, body)
        assert len(body["reason_code"]) > len("user_token_invalid:")
    assert set(USER_ATTACKS) >= {"swapped_service_token"}

    missing = client.check(None, "search_dashboards").json()
    assert missing["reason_code"] == "user_token_invalid:missing"
    assert client.http.post("/v1/check", json={}).status_code == 401
    # A refused token is never cached: the same bad token is refused again.
    expired = user_attacks(settings, issuer, ring)["expired"]
    assert client.check(expired, "search_dashboards").json()["decision"] == "deny"
    assert client.check(expired, "search_dashboards").json()["decision"] == "deny"


def test_oversized_and_malformed_inputs(client: PolicyClient, issuer: DevUserIssuer) -> None:
    alice = issuer.mint("alice")
    big = client.check(alice, "search_dashboards", "prod", env_id="prod", query="x" * 70_000)
    assert big.status_code == 413 and big.json()["code"] == "INVALID_REQUEST"
    assert client.check(alice, "x", body={"request_id": "a", "tool": "search_dashboards",
                                          "arguments": {}, "surprise": 1}).status_code == 400
    assert client.check(alice, "x", body={"tool": "search_dashboards"}).status_code == 400
    assert client.check(alice, "x", body=[1, 2]).status_code == 400
    assert client.check(alice, "x", body={"request_id": "a", "tool": "t",
                                          "arguments": "nope"}).status_code == 400
    raw = client.http.post("/v1/check", content=b"{not json", headers={
        "Authorization": f"Bearer {client.service_token}", "X-User-JWT": alice,
        "Content-Type": "application/json"})
    assert raw.status_code == 400 and raw.json()["code"] == "INVALID_REQUEST"
    assert client.check("a" * 9000, "search_dashboards").status_code == 413
    too_many = client.post("/v1/checks", alice, {"checks": [
        {"request_id": str(i), "tool": "show_capabilities"} for i in range(101)]})
    assert too_many.status_code == 400


def _decision(client: PolicyClient, token: str, tool: str, env: str) -> dict[str, Any]:
    return dict(client.check(token, tool, env, env_id=env).json())


def test_broken_edits_keep_the_last_good_snapshot(client: PolicyClient, policy_dir: Path,
                                                  issuer: DevUserIssuer) -> None:
    auditor = issuer.mint("ann", ["auditor"])
    first = client.readyz()["policy_revision"]
    assert _decision(client, auditor, "list_databases", "prod")["decision"] == "deny"

    def syntax_error(folder: Path) -> None:
        with (folder / "policy.csv").open("a") as f:
            f.write("p, auditor, prod\n")

    swap_configmap(policy_dir, syntax_error)
    state = client.wait_for(lambda s: s["last_reload_error"] is not None)
    assert state["ready"] and state["policy_revision"] == first
    assert "policy.csv" in state["last_reload_error"]
    assert _decision(client, issuer.mint("bob"), "deploy_dashboard", "ss-dev")[
        "policy_revision"] == first

    def fails_its_tests(folder: Path) -> None:
        text = (folder / "policy.csv").read_text().replace("p, auditor, prod\n", "")
        (folder / "policy.csv").write_text(text.replace("p, editor, prod, write, allow\n", ""))

    swap_configmap(policy_dir, fails_its_tests)
    state = client.wait_for(lambda s: "policy tests failed" in (s["last_reload_error"] or ""))
    assert state["policy_revision"] == first
    assert "a write in prod needs a card" in state["last_reload_error"]
    metrics = client.http.get("/metrics").text
    assert 'agentchat_policy_reloads_total{result="failed"}' in metrics
    assert "agentchat_policy_reload_failing 1.0" in metrics

    def good_edit(folder: Path) -> None:
        (folder / "policy.csv").write_text(
            (SHIPPED_POLICY / "policy.csv").read_text() + "p, auditor, *, read, allow\n")
        (folder / "tests" / "auditor.yaml").write_text(
            "cases:\n  - roles: [auditor]\n    env: prod\n    tool: list_databases\n"
            "    expect: allow\n")

    swap_configmap(policy_dir, good_edit)
    state = client.wait_for(lambda s: s["policy_revision"] != first)
    assert state["last_reload_error"] is None
    after = _decision(client, auditor, "list_databases", "prod")
    assert (after["decision"], after["policy_revision"]) == ("allow", state["policy_revision"])
    assert f'agentchat_policy_revision_info{{revision="{state["policy_revision"]}"}} 1.0' in \
        client.http.get("/metrics").text


def test_jwks_rotation_next_current_previous(client: PolicyClient, settings: SharedSettings,
                                             ring: KeyRing, issuer: DevUserIssuer) -> None:
    carol = issuer.mint("carol")
    old_token = client.service_token
    assert client.check(carol, "list_environments").status_code == 200

    old = ring.current()
    nxt = new_key("next")
    save_ring(settings.keys_dir, KeyRing((old, nxt)), settings.jwks_path)  # next published
    assert client.check(carol, "list_environments").status_code == 200

    rotated = KeyRing((replace(old, stage="previous"), replace(nxt, stage="current")))
    save_ring(settings.keys_dir, rotated, settings.jwks_path)  # next -> current -> previous
    new_token = _service_token(settings, load_ring(settings.keys_dir))
    assert client.check(carol, "list_environments").status_code == 200
    # The sidecar looks at the JWKS file every AGENTCHAT_JWKS_CHECK_S (1 s); the operator
    # publishes `next` long before it signs (PRE_PUBLICATION_FLOOR_S), this test does not.
    assert eventually(lambda: client.check(carol, "list_environments",
                                           service_token=new_token).status_code, 200) == 200

    save_ring(settings.keys_dir, KeyRing((replace(nxt, stage="current"),)), settings.jwks_path)
    assert eventually(lambda: client.check(carol, "list_environments",
                                           service_token=old_token).status_code, 401) == 401, \
        "a cached token of a retired key must not verify"
    gone = client.check(carol, "list_environments", service_token=old_token)
    assert gone.json()["detail"] == "service token refused: unknown_kid"
    assert client.check(carol, "list_environments", service_token=new_token).status_code == 200


def test_not_ready_until_a_policy_loads(settings: SharedSettings, ring: KeyRing,
                                        issuer: DevUserIssuer, tmp_path: Path) -> None:
    missing = tmp_path / "later"
    with sidecar(settings.data_dir, missing, tmp_path, ready_path="/livez") as svc:
        client = PolicyClient(svc.url, _service_token(settings, ring))
        r = client.http.get("/readyz")
        assert r.status_code == 503
        assert "no policy loaded" in r.json()["reasons"][0]
        refused = client.check(issuer.mint("alice"), "list_environments")
        assert refused.status_code == 503 and refused.json()["code"] == "POLICY_UNAVAILABLE"
        # /v1/policy answers before a policy loads: nothing serves, and why.
        auth = {"Authorization": f"Bearer {client.service_token}"}
        status = client.http.get("/v1/policy", headers=auth).json()
        assert (status["policy_revision"], status["files"], status["tests"]) == (None, [], None)
        assert status["reload_failing"] is True
        assert "cannot read the policy" in status["last_rejected"]["reason"]
        configmap_folder(missing)
        client.wait_for(lambda s: s["ready"])
        assert client.check(issuer.mint("alice"),
                            "list_environments").json()["decision"] == "allow"
        loaded = client.http.get("/v1/policy", headers=auth).json()
        assert loaded["policy_revision"] == client.readyz()["policy_revision"]
        assert (loaded["reload_failing"], loaded["tests"]["failed"]) == (False, 0)
        assert loaded["last_rejected"] is not None  # history: the folder was missing before


def test_roles_claim_entries_a_token_cannot_carry_are_ignored(
        client: PolicyClient, issuer: DevUserIssuer, tmp_path: Path) -> None:
    bad = ["admin@", "admin@*", "admin@qa", "admin@prod|ss-dev", "adm*n"]
    token = issuer.mint("mallory", [*bad, "editor@ss-dev"])
    # Nothing is widened: no admin anywhere, not even in the environment named beside it.
    for env in ("ss-dev", "prod", "ss-stage"):
        out = client.check(token, "delete_dashboard", env, env_id=env, dashboard_id=1).json()
        assert (out["decision"], out["reason_code"], out["required_role"]) == (
            "deny", "role_missing", "admin"), env
    # The good entry is kept.
    assert client.check(token, "deploy_dashboard", "ss-dev", env_id="ss-dev",
                        dashboard_id=1).json()["decision"] == "allow"
    assert client.check(token, "deploy_dashboard", "prod", env_id="prod",
                        dashboard_id=1).json()["reason_code"] == "role_missing"
    assert client.check(token, "get_dashboard", dashboard_id=1).json()["decision"] == "allow"
    perms = client.post("/v1/permissions", token, {"environment": "ss-dev"}).json()
    assert perms["user"] == {"sub": "mallory", "roles": ["editor@ss-dev"]}
    only_bad = issuer.mint("mallory", bad)
    for tool, args in (("show_capabilities", {}), ("get_dashboard", {"dashboard_id": 1})):
        assert client.check(only_bad, tool, **args).json()["reason_code"] == "role_missing"

    decisions = (tmp_path / "decisions.jsonl").read_text()
    assert {tuple(json.loads(x)["roles"]) for x in decisions.splitlines()} == {
        ("editor@ss-dev",), ()}
    log = (tmp_path / "sidecar.log").read_text()
    ignored = [x for x in log.splitlines() if "roles claim entry ignored" in x]
    for entry in bad:
        assert any(repr(entry) in x and "sub 'mallory'" in x for x in ignored), entry
    assert not any("editor@ss-dev" in x for x in ignored)
    for t in (token, only_bad):
        assert t not in log + decisions and t.split(".")[2] not in log + decisions
        assert t.split(".")[1] not in log + decisions


def test_environments_must_match_the_arguments(client: PolicyClient,
                                               issuer: DevUserIssuer) -> None:
    alice = issuer.mint("alice")
    # The attack: a role held in one environment, a delete without its environment.
    scoped = issuer.mint("sam", ["admin@ss-dev"])
    attack = client.check(scoped, "delete_dashboard", None, dashboard_id=5).json()
    assert (attack["decision"], attack["allow"], attack["reason_code"]) == (
        "deny", False, "invalid_arguments")
    assert "env_id" in attack["detail"]
    # Even with the argument but without the request's environment.
    half = client.check(scoped, "delete_dashboard", None, env_id="ss-dev", dashboard_id=5).json()
    assert (half["decision"], half["reason_code"]) == ("deny", "invalid_arguments")
    assert client.check(scoped, "delete_dashboard", "ss-dev", env_id="ss-dev",
                        dashboard_id=5).json()["decision"] == "allow_with_confirmation"
    cases = [
        # (tool, env, arguments, a part of the detail)
        ("delete_dashboard", "ss-dev", {"dashboard_id": 5}, "'env_id' is a required property"),
        ("deploy_dashboard", "prod", {"env_id": "ss-dev", "dashboard_id": 5},
         "the request's environment 'prod' differs from env_id='ss-dev'"),
        ("show_capabilities", "prod", {}, "show_capabilities takes no environment"),
        ("get_dashboard", "ss-dev", {"dashboard_id": 5}, "get_dashboard takes no environment"),
        ("deploy_dashboard", "ss-dev", {"env_id": "ss-dev", "dashboard_id": 5, "force": True},
         "unknown argument(s) for deploy_dashboard: force"),
        ("deploy_dashboard", "ss-dev", {"env_id": "ss-dev", "dashboard_id": "5"},
         "dashboard_id: '5' is not of type 'integer'"),
        ("refresh_dataset", "ss-dev", {"env_id": "ss-dev", "dataset_id": "../dashboards/5"},
         "dataset_id"),
        ("get_task_status", None, {"task_id": "task-1/../../x"}, "task_id"),
        ("start_migration", "ss-stage", {"target_env": "ss-stage", "dashboard_id": 1},
         "'source_env' is a required property"),
        ("search_dashboards", "ss-dev", {"env_id": ["ss-dev"]}, "env_id"),
    ]
    for tool, env, arguments, detail in cases:
        out = client.check(alice, tool, env, **arguments).json()
        assert (out["decision"], out["allow"], out["reason_code"]) == (
            "deny", False, "invalid_arguments"), (tool, env, arguments, out)
        assert detail in out["detail"], (detail, out["detail"])
    ok = client.check(alice, "get_task_status", None, task_id="task-1").json()
    assert (ok["decision"], ok["detail"]) == ("allow", None)


def test_an_untrusted_context_needs_a_card(client: PolicyClient, issuer: DevUserIssuer,
                                          tmp_path: Path) -> None:
    editor = issuer.mint("erin", ["editor"])
    args = {"env_id": "ss-dev", "dashboard_id": 42}
    plain = client.check(editor, "deploy_dashboard", "ss-dev", **args).json()
    assert (plain["decision"], plain["reason_code"]) == ("allow", "allowed")
    trusted = client.check(editor, "deploy_dashboard", "ss-dev", context={"untrusted": False},
                           **args).json()
    assert trusted["decision"] == "allow"
    carded = client.check(editor, "deploy_dashboard", "ss-dev", context={"untrusted": True},
                          **args).json()
    assert (carded["decision"], carded["allow"], carded["confirmation_required"],
            carded["permission_granted"], carded["reason_code"], carded["risk_level"]) == (
        "allow_with_confirmation", True, True, True, "confirmation_required_untrusted", "guarded")
    # Where the catalog already asks for a card, its reason stays; reads stay free.
    prod = client.check(editor, "deploy_dashboard", "prod", context={"untrusted": True},
                        env_id="prod", dashboard_id=42).json()
    assert (prod["decision"], prod["reason_code"]) == (
        "allow_with_confirmation", "confirmation_required")
    read = client.check(editor, "search_dashboards", "ss-dev", context={"untrusted": True},
                        env_id="ss-dev").json()
    assert (read["decision"], read["reason_code"]) == ("allow", "allowed")
    # The context is a closed object of booleans.
    for context in ({"untrusted": True, "source": "x"}, {"untrusted": "yes"}, {"untrusted": 1},
                    "untrusted"):
        r = client.check(editor, "deploy_dashboard", "ss-dev", context=context, **args)
        assert r.status_code == 400 and r.json()["code"] == "INVALID_REQUEST", context
    lines = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [(x["context"], x["reason_code"]) for x in lines] == [
        ({"untrusted": False}, "allowed"), ({"untrusted": False}, "allowed"),
        ({"untrusted": True}, "confirmation_required_untrusted"),
        ({"untrusted": True}, "confirmation_required"), ({"untrusted": True}, "allowed")]
