"""The compiled snapshot against pycasbin's enforce(), the engine's fail-closed rules, and
what a policy folder must be to load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentchat.catalog import load_catalog
from agentchat.identity import parse_roles
from agentchat.policy.engine import CheckRequest, decide, tool_risk
from agentchat.policy.policy_tests import run_policy_tests
from agentchat.policy.reference import ReferenceEnforcer
from agentchat.policy.reload import ReloadError, build_snapshot
from agentchat.policy.rules import read_folder, validate
from agentchat.policy.snapshot import Snapshot
from agentchat.policy.synthetic import SHIPPED_POLICY, random_requests, write_synthetic
from agentchat.settings import PACKAGE_DATA

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
    snapshot, reference = Snapshot(source, catalog), ReferenceEnforcer(source, catalog)
    requests = random_requests(catalog, 2000)
    mismatches = [(roles, dom, obj) for roles, dom, obj in requests
                  if snapshot.check(roles, dom, obj).allowed != reference.allowed(roles, dom, obj)]
    assert mismatches == []
    allowed = sum(snapshot.check(*r).allowed for r in requests)
    assert 0.1 * len(requests) < allowed < 0.9 * len(requests)  # both answers are exercised


def test_shipped_policy_agrees_with_enforce_everywhere(catalog) -> None:
    source = read_folder(SHIPPED_POLICY)
    snapshot, reference = Snapshot(source, catalog), ReferenceEnforcer(source, catalog)
    role_sets = [(), *[((r, e),) for r in ("viewer", "editor", "admin", "oncall", "ghost")
                       for e in (None, "prod", "ss-dev")],
                 (("editor", None), ("oncall", None))]
    for roles in role_sets:
        for dom in snapshot.domains:
            for obj in snapshot.obj_bit:
                assert snapshot.check(roles, dom, obj).allowed == \
                    reference.allowed(roles, dom, obj), (roles, dom, obj)


def test_shipped_policy_tests_pass(catalog) -> None:
    _snapshot, report = build_snapshot(SHIPPED_POLICY, CATALOG_PATH)
    assert report.ok, report.summary()
    assert report.passed >= 40


def _decide(snapshot: Snapshot, roles: list[str], tool: str, env: str | None = None,
            **arguments: object):  # type: ignore[no-untyped-def]
    return decide(snapshot, parse_roles(roles), CheckRequest("t", env, tool, dict(arguments)))


def test_fail_closed(catalog) -> None:
    snapshot = Snapshot(read_folder(SHIPPED_POLICY), catalog)
    unknown = _decide(snapshot, ["admin"], "format_disk", "prod")
    assert (unknown.decision, unknown.reason_code, unknown.risk, unknown.dangerous) == (
        "deny", "unknown_tool", "destructive", True)
    env = _decide(snapshot, ["admin"], "deploy_dashboard", "qa", env_id="qa", dashboard_id=1)
    assert (env.decision, env.reason_code) == ("deny", "unknown_environment")
    mismatch = _decide(snapshot, ["admin"], "deploy_dashboard", "ss-dev", env_id="prod")
    assert (mismatch.decision, mismatch.reason_code) == ("deny", "invalid_arguments")
    not_a_string = _decide(snapshot, ["admin"], "deploy_dashboard", None, env_id=["prod"])
    assert not_a_string.reason_code == "invalid_arguments"
    # A tool without risk metadata counts as destructive (the catalog model requires risk, so
    # build one that lacks it the way a future catalog field change could).
    tool = catalog.get("list_databases").model_copy(update={"risk": None})
    assert tool_risk(tool) == "destructive"


def test_an_error_while_deciding_is_a_deny(catalog) -> None:
    snapshot = Snapshot(read_folder(SHIPPED_POLICY), catalog)
    broken = decide(snapshot, parse_roles(["admin"]),
                    CheckRequest("t", None, "search_dashboards", None))  # type: ignore[arg-type]
    assert (broken.decision, broken.allow, broken.reason_code) == (
        "deny", False, "internal_error")


def test_env_less_calls_use_any_role(catalog) -> None:
    snapshot = Snapshot(read_folder(SHIPPED_POLICY), catalog)
    assert _decide(snapshot, ["viewer@prod"], "show_capabilities").decision == "allow"
    assert _decide(snapshot, ["viewer@prod"], "search_dashboards", query="x").decision == "allow"
    assert _decide(snapshot, [], "show_capabilities").decision == "deny"


@pytest.mark.parametrize(("edit", "message"), [
    ("p, viewer, qa, read, allow", "unknown environment 'qa'"),
    ("p, viewer, prod, format_disk, allow", "unknown tool or group 'format_disk'"),
    ("p, viewer, prod, read, maybe", "effect must be allow or deny"),
    ("p, viewer, prod", "p needs 4 fields"),
    ("q, viewer, prod, read, allow", "not a policy line"),
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
