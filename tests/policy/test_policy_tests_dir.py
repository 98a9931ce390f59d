"""Policy tests from a folder of their own (AGENTCHAT_POLICY_TESTS_DIR): the chart mounts them
from a second ConfigMap, whole, so adding a test file changes that ConfigMap and not the pod.
The sidecar runs them, watches them and refuses an edit that fails one, as with tests/."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentchat.identity import DevUserIssuer
from agentchat.keys import KeyRing, sign_service_token
from agentchat.policy.reload import ReloadError, build_snapshot
from agentchat.policy.rules import read_folder
from agentchat.settings import SharedSettings
from testkit.policy import PolicyClient, sidecar
from testkit.support import AGENTCHAT
from testkit.synthetic_policies import SHIPPED_POLICY

CATALOG = SHIPPED_POLICY.parent / "catalog.yaml"
AUDITOR_TEST = ("cases:\n  - name: auditors read the databases in prod\n    roles: [auditor]\n"
                "    env: prod\n    tool: list_databases\n    expect: allow\n")
# Breaks a case of tests/roles.yaml ("a write in prod needs a card").
BREAKS_ROLES = "p, editor, prod, write, allow\n"


def project(root: Path, files: dict[str, str]) -> None:
    """Project `files` into `root` as kubelet projects a ConfigMap mounted whole: a new
    timestamped version, `..data` swapped to it in one rename, one symlink per key at the top,
    the old version removed."""
    root.mkdir(parents=True, exist_ok=True)
    old = os.readlink(root / "..data") if (root / "..data").is_symlink() else None
    version = "..v" + uuid.uuid4().hex[:8]
    (root / version).mkdir()
    for name, text in files.items():
        (root / version / name).write_text(text)
    tmp = root / "..data_tmp"
    tmp.symlink_to(version)
    os.rename(tmp, root / "..data")
    for name in files:
        if not (root / name).is_symlink():
            (root / name).symlink_to(f"..data/{name}")
    for link in root.iterdir():
        if link.is_symlink() and not link.name.startswith("..") and link.name not in files:
            link.unlink()
    if old is not None:
        shutil.rmtree(root / old)


def shipped_policy(**replace: str) -> dict[str, str]:
    files = {n: (SHIPPED_POLICY / n).read_text()
             for n in ("model.conf", "policy.csv", "approvals.yaml")}
    return {**files, **replace}


def shipped_tests(*names: str) -> dict[str, str]:
    return {n: (SHIPPED_POLICY / "tests" / n).read_text() for n in names}


# -- reading ---------------------------------------------------------------------------------

def test_tests_from_their_own_folder_give_the_same_revision(tmp_path: Path) -> None:
    policy, tests = tmp_path / "policy", tmp_path / "policy-tests"
    project(policy, shipped_policy())
    project(tests, shipped_tests("roles.yaml", "scoped.yaml"))
    split = read_folder(policy, tests_dir=tests)
    whole = read_folder(SHIPPED_POLICY)
    assert split.revision == whole.revision and split.tests == whole.tests
    assert [f for f, _ in split.files] == [f for f, _ in whole.files]
    assert split.tests_folder == tests
    assert str(split.version).startswith("..v") and str(split.tests_version).startswith("..v")
    # The default (the folder's tests/) named explicitly is the default.
    assert read_folder(SHIPPED_POLICY, tests_dir=SHIPPED_POLICY / "tests").tests_folder is None


def test_the_named_tests_folder_replaces_tests_and_must_exist(tmp_path: Path) -> None:
    policy = tmp_path / "policy"
    shutil.copytree(SHIPPED_POLICY, policy)
    (policy / "tests" / "stale.yaml").write_text(AUDITOR_TEST)  # would fail: no auditor line
    tests = tmp_path / "policy-tests"
    project(tests, shipped_tests("roles.yaml"))
    snapshot, report = build_snapshot(policy, CATALOG, tests)
    assert report.ok and [n for n, _ in snapshot.source.tests] == ["roles.yaml"]
    with pytest.raises(ReloadError, match="cannot read the policy tests"):
        build_snapshot(policy, CATALOG, tmp_path / "missing")


def test_policy_test_reads_the_tests_folder(tmp_path: Path) -> None:
    policy, tests = tmp_path / "policy", tmp_path / "policy-tests"
    project(policy, shipped_policy())
    project(tests, {"auditor.yaml": AUDITOR_TEST})

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([AGENTCHAT, "policy", "test", *args], capture_output=True,
                              text=True, timeout=120, check=False, env={**os.environ, **env})

    # Without a DIR, as in the pod: the sidecar's settings, AGENTCHAT_POLICY_TESTS_DIR included.
    in_pod = run(AGENTCHAT_POLICY_DIR=str(policy), AGENTCHAT_POLICY_TESTS_DIR=str(tests))
    assert in_pod.returncode == 1, in_pod.stdout + in_pod.stderr
    assert "tests/auditor.yaml: auditors read the databases in prod" in in_pod.stdout
    assert "0 passed, 1 failed" in in_pod.stdout
    flag = run(str(SHIPPED_POLICY), "--tests-dir", str(tests))
    assert flag.returncode == 1 and "0 passed, 1 failed" in flag.stdout


# -- the running sidecar ---------------------------------------------------------------------

@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    policy, tests = tmp_path / "policy", tmp_path / "policy-tests"
    project(policy, shipped_policy())
    project(tests, shipped_tests("roles.yaml"))
    return policy, tests


@pytest.fixture
def client(settings: SharedSettings, ring: KeyRing, issuer: DevUserIssuer,
           folders: tuple[Path, Path], tmp_path: Path) -> Iterator[PolicyClient]:
    # ring and issuer publish the service and user JWKS the sidecar needs to be ready.
    policy, tests = folders
    # No polling to speak of: a change must arrive as a file event in the watched folders.
    with sidecar(settings.data_dir, policy, tmp_path, AGENTCHAT_POLICY_TESTS_DIR=str(tests),
                 AGENTCHAT_POLICY_TUNING__RELOAD_POLL_S="600") as svc:
        yield PolicyClient(svc.url, sign_service_token(
            ring, issuer=settings.service_issuer, audience=settings.service_audience))


def _status(client: PolicyClient) -> dict[str, Any]:
    r = client.http.get("/v1/policy", headers={"Authorization": f"Bearer {client.service_token}"})
    assert r.status_code == 200, r.text
    return dict(r.json())


def _wait(client: PolicyClient, predicate: Callable[[dict[str, Any]], bool],
          timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not predicate(status := _status(client)):
        assert time.monotonic() < deadline, f"GET /v1/policy never matched: {status}"
        time.sleep(0.05)
    return status


def test_the_sidecar_runs_watches_and_enforces_the_tests_folder(
        client: PolicyClient, folders: tuple[Path, Path], issuer: DevUserIssuer) -> None:
    policy, tests = folders
    roles_cases = build_snapshot(SHIPPED_POLICY, CATALOG, tests)[1].passed
    first = _status(client)
    assert first["tests"] == {"passed": roles_cases, "failed": 0}
    assert first["tests_dir"] == str(tests) and first["tests_version"].startswith("..v")
    assert {f["path"] for f in first["files"]} == {"model.conf", "policy.csv", "approvals.yaml",
                                               "tests/roles.yaml"}
    revision = first["policy_revision"]
    auditor = issuer.mint("ann", ["auditor"])

    def auditor_reads() -> dict[str, Any]:
        return dict(client.check(auditor, "list_databases", "prod", env_id="prod").json())

    assert auditor_reads()["decision"] == "deny"

    # A policy edit that breaks a test of the tests folder is refused; the old policy serves.
    csv = (SHIPPED_POLICY / "policy.csv").read_text()
    assert BREAKS_ROLES in csv
    project(policy, shipped_policy(**{"policy.csv": csv.replace(BREAKS_ROLES, "")}))
    refused = _wait(client, lambda s: s["last_rejected"] is not None)
    assert refused["policy_revision"] == revision and refused["reload_failing"] is True
    assert refused["last_rejected"]["revision"] is not None  # it loaded, then failed its tests
    assert "policy tests failed" in refused["last_rejected"]["reason"]
    assert "tests/roles.yaml: a write in prod needs a card" in refused["last_rejected"]["reason"]
    assert auditor_reads()["policy_revision"] == revision
    project(policy, shipped_policy())  # fixed forward: the same policy as before
    _wait(client, lambda s: not s["reload_failing"])

    # A new test file is picked up: it fails against the serving policy, so nothing changes...
    project(tests, {**shipped_tests("roles.yaml"), "auditor.yaml": AUDITOR_TEST})
    new_test = _wait(client, lambda s: "tests/auditor.yaml" in (s["last_reload_error"] or ""))
    assert new_test["policy_revision"] == revision
    assert "auditors read the databases in prod" in new_test["last_reload_error"]
    # ...until the policy edit it was written for arrives: then both are live together.
    project(policy, shipped_policy(**{"policy.csv": csv + "p, auditor, *, read, allow\n"}))
    live = _wait(client, lambda s: s["policy_revision"] != revision and not s["reload_failing"])
    assert live["tests"] == {"passed": roles_cases + 1, "failed": 0}
    assert "tests/auditor.yaml" in {f["path"] for f in live["files"]}
    assert auditor_reads()["decision"] == "allow"

    # A test edited alone re-runs the tests: a wrong expectation is refused too.
    project(tests, {**shipped_tests("roles.yaml"),
                    "auditor.yaml": AUDITOR_TEST.replace("expect: allow", "expect: deny")})
    edited = _wait(client, lambda s: s["reload_failing"])
    assert edited["policy_revision"] == live["policy_revision"]
    assert "expected 'deny', got 'allow'" in edited["last_reload_error"]
    assert auditor_reads()["decision"] == "allow"
