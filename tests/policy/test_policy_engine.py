"""The compiled snapshot against pycasbin's enforce(), the engine's fail-closed rules, and
what a policy folder must be to load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentchat.catalog import load_catalog
from agentchat.identity import parse_roles
from agentchat.policy.cases import run_policy_tests
from agentchat.policy.engine import CheckRequest, decide, tool_risk
from agentchat.policy.reload import ReloadError, build_snapshot
from agentchat.policy.rules import read_folder, validate
from agentchat.policy.snapshot import Snapshot
from agentchat.settings import PACKAGE_DATA
from testkit.policy_reference import ReferenceEnforcer
from testkit.synthetic_policies import SHIPPED_POLICY, random_requests, write_synthetic

CATALOG_PATH = PACKAGE_DATA / "catalog.yaml"


@pytest.fixture(scope="module")
def catalog():  # type: ignore[no-untyped-def]
    return load_catalog(CATALOG_PATH)


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "policy"
    shutil.copytree(SHIPPED_POLICY, folder)
    return folder


def test_snapshot_agrees_with_enforce_on_a_realistic_policy(tmp_path: Path, catalog) -> None:
    lines = write_synthetic(tmp_path / "synthetic", catalog)
    assert 1900 <= lines <= 2200
    source = read_folder(tmp_path / "synthetic")
    validate(source, catalog)
    assert sum(r.eft == "deny" for r in source.rules) > 50
    assert sum(r.dom == "*" and r.obj in catalog.names for r in source.rules) > 80
    assert len(source.context_rules) > 50
    snapshot, reference = Snapshot(source, catalog), ReferenceEnforcer(source, catalog)
    # 600 requests: pycasbin's enforce takes ~20 ms each on this policy (2,000 took 47 s).
    requests = random_requests(catalog, 600)
    mismatches = [(roles, dom, obj) for roles, dom, obj in requests
                  if snapshot.check(roles, dom, obj).allowed != reference.allowed(roles, dom, obj)]
    assert mismatches == []
    allowed = sum(snapshot.check(*r).allowed for r in requests)
    assert 0.1 * len(requests) < allowed < 0.9 * len(requests)  # both answers are exercised
    # The new semantics are exercised: role@env in domain *, admitted by explicit lines only.
    scoped_any = [(roles, obj) for roles, dom, obj in requests if dom == "*"
                  and all(env is not None for _, env in roles)]
    admitted = sum(snapshot.check(roles, "*", obj).allowed for roles, obj in scoped_any)
    assert len(scoped_any) > 60 and 0 < admitted < len(scoped_any)
    context = [r for r in requests
               if snapshot.context_rule(*r, "untrusted") != reference.context_rule(*r, "untrusted")
               or snapshot.context_rule(*r, "trusted") or reference.context_rule(*r, "trusted")]
    assert context == []
    carded = sum(snapshot.context_rule(*r, "untrusted") for r in requests)
    assert 30 < carded < 570


def test_shipped_policy_agrees_with_enforce_everywhere(catalog) -> None:
    source = read_folder(SHIPPED_POLICY)
    snapshot, reference = Snapshot(source, catalog), ReferenceEnforcer(source, catalog)
    role_sets = [(), *[((r, e),) for r in ("viewer", "editor", "admin", "oncall", "ghost")
                       for e in (None, "prod", "ss-dev")],
                 (("editor", None), ("oncall", None)),
                 (("editor", "ss-dev"), ("editor", "ss-stage"), ("viewer", "prod")),
                 (("admin", "ss-dev"), ("viewer", None))]
    for roles in role_sets:
        for dom in snapshot.domains:
            for obj in snapshot.obj_bit:
                assert snapshot.check(roles, dom, obj).allowed == \
                    reference.allowed(roles, dom, obj), (roles, dom, obj)
                assert snapshot.context_rule(roles, dom, obj, "untrusted") == \
                    reference.context_rule(roles, dom, obj, "untrusted"), (roles, dom, obj)


def test_shipped_policy_tests_pass(catalog) -> None:
    _snapshot, report = build_snapshot(SHIPPED_POLICY, CATALOG_PATH)
    assert report.ok, report.summary()
    assert report.passed >= 40


def _roles(roles: list[str]):  # type: ignore[no-untyped-def]
    return parse_roles(roles, ("ss-dev", "ss-stage", "prod"))


def _decide(snapshot: Snapshot, roles: list[str], tool: str, env: str | None = None,
            untrusted: bool = False, **arguments: object):  # type: ignore[no-untyped-def]
    return decide(snapshot, _roles(roles),
                  CheckRequest("t", env, tool, dict(arguments), untrusted=untrusted))


def test_fail_closed(catalog) -> None:
    snapshot = Snapshot(read_folder(SHIPPED_POLICY), catalog)
    unknown = _decide(snapshot, ["admin"], "format_disk", "prod")
    assert (unknown.decision, unknown.reason_code, unknown.risk, unknown.dangerous) == (
        "deny", "unknown_tool", "destructive", True)
    assert unknown.detail == "unknown tool 'format_disk'"
    env = _decide(snapshot, ["admin"], "deploy_dashboard", "qa", env_id="qa", dashboard_id=1)
    assert (env.decision, env.reason_code) == ("deny", "unknown_environment")
    assert env.detail == "unknown environment 'qa' (known: ss-dev, ss-stage, prod)"
    mismatch = _decide(snapshot, ["admin"], "deploy_dashboard", "ss-dev", env_id="prod",
                       dashboard_id=1)
    assert (mismatch.decision, mismatch.reason_code) == ("deny", "invalid_arguments")
    assert mismatch.detail == "the request's environment 'ss-dev' differs from env_id='prod'"
    not_a_string = _decide(snapshot, ["admin"], "deploy_dashboard", None, env_id=["prod"])
    assert not_a_string.reason_code == "invalid_arguments"
    # A tool without risk metadata counts as destructive (the catalog model requires risk, so
    # build one that lacks it the way a future catalog field change could).
    tool = catalog.get("list_databases").model_copy(update={"risk": None})
    assert tool_risk(tool) == "destructive"


def test_an_error_while_deciding_is_a_deny(catalog) -> None:
    snapshot = Snapshot(read_folder(SHIPPED_POLICY), catalog)
    broken = decide(snapshot, _roles(["admin"]),
                    CheckRequest("t", None, "search_dashboards", None))  # type: ignore[arg-type]
    assert (broken.decision, broken.allow, broken.reason_code) == (
        "deny", False, "internal_error")


def test_the_sidecar_validates_the_arguments_again(catalog) -> None:
    snapshot = Snapshot(read_folder(SHIPPED_POLICY), catalog)
    ok = _decide(snapshot, ["admin"], "deploy_dashboard", "ss-dev", env_id="ss-dev",
                 dashboard_id=5)
    assert (ok.decision, ok.detail) == ("allow", None)
    cases = [
        # (env, arguments, what the detail says)
        ("ss-dev", {"env_id": "ss-dev", "dashboard_id": "5"}, "dashboard_id: '5' is not"),
        ("ss-dev", {"env_id": "ss-dev", "dashboard_id": True}, "dashboard_id: True is not"),
        ("ss-dev", {"env_id": "ss-dev", "dashboard_id": 5, "force": True},
         "unknown argument(s) for deploy_dashboard: force"),
        ("ss-dev", {"env_id": "ss-dev"}, "'dashboard_id' is a required property"),
        (None, {"dashboard_id": 5}, "'env_id' is a required property"),
        (None, {"env_id": "ss-dev", "dashboard_id": 5},
         "the request's environment is missing (env_id is 'ss-dev')"),
        ("prod", {"env_id": "ss-dev", "dashboard_id": 5},
         "the request's environment 'prod' differs from env_id='ss-dev'"),
    ]
    for env, arguments, detail in cases:
        got = _decide(snapshot, ["admin"], "deploy_dashboard", env, **arguments)
        assert (got.decision, got.allow, got.reason_code) == (
            "deny", False, "invalid_arguments"), (env, arguments)
        assert got.detail is not None and detail in got.detail, (got.detail, detail)
    env_less = _decide(snapshot, ["admin"], "get_dashboard", "prod", dashboard_id=5)
    assert (env_less.reason_code, env_less.detail) == (
        "invalid_arguments", "get_dashboard takes no environment, but the request names 'prod'")
    path = _decide(snapshot, ["admin"], "get_task_status", None, task_id="../x")
    assert path.reason_code == "invalid_arguments"


def test_env_less_calls_count_only_unrestricted_roles_and_explicit_lines(catalog) -> None:
    snapshot = Snapshot(read_folder(SHIPPED_POLICY), catalog)
    # The attack: a role held in one environment, a destructive call without its environment.
    attack = _decide(snapshot, ["admin@ss-dev"], "delete_dashboard", None, dashboard_id=5)
    assert (attack.decision, attack.reason_code) == ("deny", "invalid_arguments")
    # Checked directly in domain * (as any env-less call is): admin@ss-dev does not count.
    assert not snapshot.check(_roles(["admin@ss-dev"]), "*", "delete_dashboard").allowed
    assert snapshot.check(_roles(["admin"]), "*", "delete_dashboard").allowed
    bob = ["editor@ss-dev", "editor@ss-stage", "viewer@prod"]
    for tool, args in (("show_capabilities", {}), ("list_environments", {}),
                       ("get_dashboard", {"dashboard_id": 5}), ("get_task_status",
                                                                 {"task_id": "task-1"})):
        assert _decide(snapshot, bob, tool, **args).decision == "allow", tool
        assert _decide(snapshot, ["viewer"], tool, **args).decision == "allow", tool
        assert _decide(snapshot, [], tool, **args).decision == "deny", tool
    # An explicit line only counts for its own tool in domain *: bob gets no read group there.
    assert not snapshot.check(_roles(bob), "*", "search_dashboards").allowed
    assert snapshot.check(_roles(["viewer"]), "*", "search_dashboards").allowed


def test_a_tool_the_policy_does_not_name_needs_an_unrestricted_role(policy_dir: Path) -> None:
    csv = policy_dir / "policy.csv"
    csv.write_text(csv.read_text().replace("p, viewer, *, get_task_status, allow\n", "")
                   + "p, editor, *, get_dashboard, deny\n")
    (policy_dir / "tests").joinpath("roles.yaml").unlink()
    (policy_dir / "tests").joinpath("scoped.yaml").unlink()
    snapshot, _ = build_snapshot(policy_dir, CATALOG_PATH)
    task = _decide(snapshot, ["viewer@prod"], "get_task_status", task_id="task-1")
    assert (task.decision, task.reason_code, task.required_role) == (
        "deny", "role_missing", "viewer")
    assert _decide(snapshot, ["viewer"], "get_task_status", task_id="task-1").decision == "allow"
    # The deny lines of every held role apply, scoped ones included.
    for roles in (["editor@ss-dev"], ["viewer", "editor@prod"]):
        denied = _decide(snapshot, roles, "get_dashboard", dashboard_id=1)
        assert (denied.decision, denied.reason_code) == ("deny", "denied_by_rule"), roles
    assert _decide(snapshot, ["viewer@prod"], "get_dashboard", dashboard_id=1).allow
    rules = snapshot.matching_rules(_roles(["viewer", "editor@prod"]), "*", "get_dashboard")
    assert [r.text() for r in rules] == ["p, viewer, *, read, allow",
                                         "p, viewer, *, get_dashboard, allow",
                                         "p, editor, *, get_dashboard, deny"]
    scoped = snapshot.matching_rules(_roles(["viewer@prod"]), "*", "get_dashboard")
    assert [r.text() for r in scoped] == ["p, viewer, *, get_dashboard, allow"]


def test_an_untrusted_context_asks_for_a_card(catalog) -> None:
    snapshot = Snapshot(read_folder(SHIPPED_POLICY), catalog)
    args = {"env_id": "ss-dev", "dashboard_id": 5}
    plain = _decide(snapshot, ["editor"], "deploy_dashboard", "ss-dev", **args)
    assert (plain.decision, plain.reason_code) == ("allow", "allowed")
    carded = _decide(snapshot, ["editor"], "deploy_dashboard", "ss-dev", untrusted=True, **args)
    assert (carded.decision, carded.allow, carded.confirmation_required, carded.reason_code) == (
        "allow_with_confirmation", True, True, "confirmation_required_untrusted")
    read = _decide(snapshot, ["editor"], "search_dashboards", "ss-dev", untrusted=True,
                   env_id="ss-dev")
    assert (read.decision, read.reason_code) == ("allow", "allowed")
    assert [r.text() for r in snapshot.matching_context_rules(
        _roles(["editor"]), "ss-dev", "deploy_dashboard", "untrusted")] == [
        "p2, viewer, *, write, untrusted"]
    assert snapshot.matching_context_rules(
        _roles(["editor"]), "ss-dev", "deploy_dashboard", "trusted") == []


@pytest.mark.parametrize(("edit", "message"), [
    ("p, viewer, qa, read, allow", "unknown environment 'qa'"),
    ("p, viewer, prod, format_disk, allow", "unknown tool or group 'format_disk'"),
    ("p, viewer, prod, read, maybe", "effect must be allow or deny"),
    ("p, viewer, prod", "p needs 4 fields"),
    ("q, viewer, prod, read, allow", "not a policy line"),
    ("p2, viewer, prod, write, trusted", "p2 context must be untrusted"),
    ("p2, viewer, prod, write", "p2 needs 4 fields"),
    ("p2, viewer, qa, write, untrusted", "unknown environment 'qa'"),
    ("p2, viewer, prod, format_disk, untrusted", "unknown tool or group 'format_disk'"),
    ("g2, delete_dashboard, get_dashboard", "makes tool 'get_dashboard' a group"),
    ("g, viewer, admin", "g cycle"),
])
def test_broken_policies_are_refused(policy_dir: Path, edit: str, message: str) -> None:
    with (policy_dir / "policy.csv").open("a") as f:
        f.write(edit + "\n")
    with pytest.raises(ReloadError, match=message):
        build_snapshot(policy_dir, CATALOG_PATH)


def test_another_model_is_refused(policy_dir: Path) -> None:
    model = (policy_dir / "model.conf").read_text()
    (policy_dir / "model.conf").write_text(model.replace("!some(where (p.eft == deny))",
                                                         "true"))
    with pytest.raises(ReloadError, match="unsupported model"):
        build_snapshot(policy_dir, CATALOG_PATH)


def test_the_model_before_contexts_still_loads_without_p2(policy_dir: Path) -> None:
    from agentchat.policy.rules import LEGACY_MODEL

    (policy_dir / "model.conf").write_text(LEGACY_MODEL)
    csv = policy_dir / "policy.csv"
    with pytest.raises(ReloadError, match="p2 lines need the model's r2/p2/e2/m2"):
        build_snapshot(policy_dir, CATALOG_PATH)
    csv.write_text(csv.read_text().replace("p2, viewer, *, write, untrusted\n", ""))
    (policy_dir / "tests" / "roles.yaml").unlink()
    snapshot, report = build_snapshot(policy_dir, CATALOG_PATH)
    assert report.ok, report.summary()
    source = snapshot.source
    assert not source.has_contexts
    reference = ReferenceEnforcer(source, snapshot.catalog)
    assert not reference.context_rule(_roles(["editor"]), "ss-dev", "deploy_dashboard",
                                      "untrusted")
    assert reference.allowed(_roles(["editor"]), "ss-dev", "deploy_dashboard")


def test_deep_hierarchies_are_refused(policy_dir: Path) -> None:
    chain = [f"g, r{i}, r{i + 1}" for i in range(10)]
    with (policy_dir / "policy.csv").open("a") as f:
        f.write("\n".join(chain) + "\n")
    with pytest.raises(ReloadError, match="levels deep"):
        build_snapshot(policy_dir, CATALOG_PATH)


def test_policy_test_failures_read_as_a_diff(policy_dir: Path) -> None:
    text = (policy_dir / "policy.csv").read_text()
    (policy_dir / "policy.csv").write_text(text.replace("p, editor, prod, write, allow\n", ""))
    snapshot, report = build_snapshot(policy_dir, CATALOG_PATH)
    assert not report.ok
    summary = report.summary()
    assert "a write in prod needs a card (roles editor, env prod, tool deploy_dashboard)" in summary
    assert "decision:       expected 'allow_with_confirmation', got 'deny'" in summary
    assert report == run_policy_tests(snapshot)
